//! Procedural logo renderer behind the legacy `/ai-image/logo` endpoint.
//!
//! A logo here is a flat geometric emblem plus the brand name set in one of
//! the bundled DejaVu faces, centred on a plain light (or, for bold and tech
//! looks, dark) background. The brand name and an optional tagline come from
//! the prompt; the style picks the emblem family (badge, shield, leaf,
//! circuit, ...), the industry picks the palette and a small motif, and the
//! seed picks among layout and shape variants. Every choice comes from a
//! splitmix64 stream keyed by the spec, so one spec always yields the same
//! pixels.
//!
//! All shapes, glyphs included, are polygons rasterised with exact
//! signed-area coverage (the accumulation method of font-rs), so edges are
//! anti-aliased without supersampling and a 1024x1024 logo takes a few
//! milliseconds.

mod colour;
mod draw;
mod name;
mod plan;
mod raster;
mod spec;
mod text;

use image::RgbImage;

use plan::Plan;
use raster::Canvas;
pub use spec::LogoSpec;

/// RGB image of exactly width x height; deterministic for the same spec.
pub fn render(spec: &LogoSpec<'_>) -> image::RgbImage {
    let mut canvas = Canvas {
        img: RgbImage::new(spec.width, spec.height),
    };
    if spec.width == 0 || spec.height == 0 {
        return canvas.img;
    }
    let plan = Plan::build(spec);
    canvas.clear(plan.palette.bg);
    plan.paint(&mut canvas);
    canvas.img
}

#[cfg(test)]
mod tests {
    use std::f32::consts::PI;

    use super::colour::*;
    use super::name::*;
    use super::plan::*;
    use super::raster::*;
    use super::text::*;
    use super::*;

    fn spec<'a>(
        prompt: &'a str,
        style: &'a str,
        industry: &'a str,
        w: u32,
        h: u32,
    ) -> LogoSpec<'a> {
        LogoSpec {
            prompt,
            style,
            industry,
            color_scheme: None,
            typography: None,
            mood: None,
            complexity: 3,
            negative_prompt: None,
            seed: 7,
            width: w,
            height: h,
        }
    }

    const STYLES: [&str; 8] = [
        "minimal",
        "modern",
        "vintage",
        "playful",
        "corporate",
        "tech",
        "organic",
        "geometric",
    ];

    fn count(
        img: &RgbImage,
        region: (u32, u32, u32, u32),
        pred: impl Fn([u8; 3]) -> bool,
    ) -> usize {
        let (x0, y0, x1, y1) = region;
        (y0..y1)
            .flat_map(|y| (x0..x1).map(move |x| (x, y)))
            .filter(|&(x, y)| pred(img.get_pixel(x, y).0))
            .count()
    }

    fn near(a: [u8; 3], b: [u8; 3], tol: i32) -> bool {
        (0..3).all(|k| (i32::from(a[k]) - i32::from(b[k])).abs() <= tol)
    }

    #[test]
    fn exact_dimensions_for_all_endpoint_sizes() {
        for (w, h) in [
            (256, 256),
            (512, 512),
            (1024, 1024),
            (1024, 768),
            (1024, 576),
            (768, 1024),
            (576, 1024),
        ] {
            let img = render(&spec(
                "Acme Rockets, reusable launch vehicles",
                "tech",
                "technology",
                w,
                h,
            ));
            assert_eq!(img.dimensions(), (w, h));
        }
        assert_eq!(
            render(&spec("Acme", "modern", "retail", 0, 64)).dimensions(),
            (0, 64)
        );
        assert_eq!(
            render(&spec("Acme", "modern", "retail", 3, 2)).dimensions(),
            (3, 2)
        );
    }

    #[test]
    fn deterministic_and_seed_sensitive() {
        let s = spec("Summit Capital", "corporate", "finance", 192, 192);
        let a = render(&s);
        assert_eq!(a, render(&s));
        let differing = (1..4)
            .filter(|&seed| render(&LogoSpec { seed, ..s.clone() }) != a)
            .count();
        assert_eq!(differing, 3, "every other seed gives a different logo");
    }

    #[test]
    fn styles_differ() {
        let imgs: Vec<RgbImage> = STYLES
            .iter()
            .map(|st| render(&spec("Acme Rockets", st, "technology", 160, 160)))
            .collect();
        for i in 0..imgs.len() {
            for j in i + 1..imgs.len() {
                assert_ne!(imgs[i], imgs[j], "{} vs {}", STYLES[i], STYLES[j]);
            }
        }
    }

    #[test]
    fn emblem_fills_the_centre_and_margins_stay_clear() {
        for (k, st) in STYLES.iter().enumerate() {
            for (w, h) in [(160, 160), (240, 135), (135, 240)] {
                let s = LogoSpec {
                    seed: k as u64,
                    ..spec("Green Leaf Cafe, fresh and local", st, "food", w, h)
                };
                let img = render(&s);
                let bg = img.get_pixel(0, 0).0;
                let inked = |p: [u8; 3]| !near(p, bg, 6);
                // Some of the mark sits in the central band of the picture.
                let centre = (w / 4, h / 4, w * 3 / 4, h * 3 / 4);
                let area = ((w / 2) * (h / 2)) as usize;
                assert!(
                    count(&img, centre, inked) * 20 > area,
                    "{st} {w}x{h}: centre nearly empty"
                );
                // Nothing touches the outer 3 % of the canvas.
                let m = (w.min(h) * 3 / 100).max(2);
                let border = count(&img, (0, 0, w, h), |_| true)
                    - count(&img, (m, m, w - m, h - m), |_| true);
                let border_ink =
                    count(&img, (0, 0, w, h), inked) - count(&img, (m, m, w - m, h - m), inked);
                assert!(border > 0);
                assert_eq!(border_ink, 0, "{st} {w}x{h}: ink in the margin");
            }
        }
    }

    #[test]
    fn no_text_negative_prompt_removes_lettering() {
        // Portrait forces the stacked layout: the name sits in the lower part.
        let with = spec("Green Leaf Cafe", "organic", "food", 192, 256);
        let without = LogoSpec {
            negative_prompt: Some("no text, no letters"),
            ..with.clone()
        };
        let text = to_u8(Plan::build(&with).palette.text);
        let lower = (0, 256 * 62 / 100, 192, 256);
        let is_text = |p: [u8; 3]| near(p, text, 40);
        let a = count(&render(&with), lower, is_text);
        let b = count(&render(&without), lower, is_text);
        assert!(a > 300, "name should be drawn ({a} text pixels)");
        assert!(
            b * 10 < a,
            "no-text logo still has {b} text pixels (vs {a})"
        );
        assert!(Plan::build(&without).brand.is_none());
    }

    #[test]
    fn red_scheme_gives_red_pixels() {
        let is_red = |p: [u8; 3]| p[0] > 150 && p[1] < 80 && p[2] < 80;
        for seed in 0..4 {
            let s = LogoSpec {
                color_scheme: Some("red"),
                seed,
                ..spec("Redline Motors", "minimal", "technology", 128, 160)
            };
            let all = (0, 0, 128, 160);
            let red = count(&render(&s), all, is_red);
            assert!(red > 128 * 160 / 40, "seed {seed}: only {red} red pixels");
            // The technology palette alone has no such red.
            let plain = render(&LogoSpec {
                color_scheme: None,
                ..s.clone()
            });
            assert_eq!(count(&plain, all, is_red), 0);
        }
    }

    #[test]
    fn negative_colours_are_avoided() {
        for seed in 0..6 {
            let s = LogoSpec {
                seed,
                negative_prompt: Some("no red, no orange"),
                ..spec("Crust", "modern", "food", 64, 64)
            };
            let pal = Plan::build(&s).palette;
            for c in [pal.primary, pal.secondary, pal.accent] {
                let (h, sat, _) = to_hsl(c);
                assert!(
                    sat < 0.2 || (hue_distance(h, 0.0) > 40.0 && hue_distance(h, 24.0) > 40.0),
                    "seed {seed}: hue {h}"
                );
            }
        }
    }

    #[test]
    fn colour_scheme_parsing() {
        assert_eq!(
            parse_colors("navy and gold"),
            vec![hex(0x1B2A4E), hex(0xC9A227)]
        );
        assert_eq!(
            parse_colors("#0a7cff, white"),
            vec![hex(0x0A7CFF), hex(0xFFFFFF)]
        );
        assert_eq!(
            parse_colors("Navy blue with #fff"),
            vec![hex(0x1B2A4E), hex(0xFFFFFF)]
        );
        assert_eq!(parse_colors("no colours here"), Vec::<Col>::new());
        let dark_green = parse_colors("dark green")[0];
        assert!(to_hsl(dark_green).2 < to_hsl(hex(0x2F9E44)).2);
        // "#0a7cff, white": blue marks on a white background.
        let s = LogoSpec {
            color_scheme: Some("#0a7cff, white"),
            ..spec("Bluewave", "tech", "technology", 64, 64)
        };
        let pal = Plan::build(&s).palette;
        assert_eq!(to_u8(pal.bg), [255, 255, 255]);
        assert_eq!(to_u8(pal.primary), [0x0A, 0x7C, 0xFF]);
    }

    #[test]
    fn rasterizer_coverage_matches_area() {
        // Coverage sums to the polygon's exact area, edges included.
        let pts = circle((50.3, 40.7), 20.0);
        let m = rasterize(&Path::of(&pts), 100, 100).expect("inside canvas");
        let area: f32 = m.cov.iter().sum();
        assert!((area - signed_area(&pts).abs()).abs() < 0.05, "area {area}");
        assert!((area - PI * 400.0).abs() < 0.01 * PI * 400.0);
        // A ring's hole really is empty and its band solid.
        let mut r = Path::new();
        r.ring((50.0, 50.0), 30.0, 10.0);
        let m = rasterize(&r, 100, 100).expect("inside canvas");
        assert_eq!(m.at(50, 50), 0.0);
        assert!((m.at(50, 24) - 1.0).abs() < 1e-3);
        let expect = signed_area(&circle((50.0, 50.0), 30.0)).abs()
            - signed_area(&circle((50.0, 50.0), 20.0)).abs();
        let area: f32 = m.cov.iter().sum();
        assert!((area - expect).abs() < 0.1, "ring area {area} vs {expect}");
        // Shapes hanging off the canvas are clipped, not wrapped.
        let m = rasterize(&Path::of(&circle((0.0, 0.0), 10.0)), 100, 100).expect("overlaps");
        let area: f32 = m.cov.iter().sum();
        assert!((area - PI * 25.0).abs() < 1.5, "quarter disc {area}");
    }

    #[test]
    fn brand_extraction() {
        let b = |p: &str| brand_and_tagline(p).0;
        assert_eq!(b("Acme Rockets, reusable launch vehicles"), "Acme Rockets");
        assert_eq!(b("Summit Capital: wealth management"), "Summit Capital");
        assert_eq!(b("Green Leaf Cafe - organic coffee"), "Green Leaf Cafe");
        assert_eq!(b("Green Leaf Cafe — organic coffee"), "Green Leaf Cafe");
        assert_eq!(b("Coca-Cola"), "Coca-Cola");
        assert_eq!(b("A logo for a bakery called Sweet Crumbs"), "Sweet Crumbs");
        assert_eq!(b("logo for \"Blue Owl\" bookstore"), "Blue Owl");
        assert_eq!(
            b("minimalist emblem for Northwind Traders with a wind motif"),
            "Northwind Traders"
        );
        assert_eq!(b("The Daily Grind"), "The Daily Grind");
        assert_eq!(
            b("a bakery that sells fresh bread every morning in the city"),
            "Bakery"
        );
        assert_eq!(b("modern logo for coffee shop"), "coffee shop");
        assert_eq!(apply_case("coffee shop", Case::Title), "Coffee Shop");
        assert_eq!(b("   "), "Brand");
        let long = b("Supercalifragilisticexpialidocious Enterprises Worldwide");
        assert!(
            !long.is_empty() && long.chars().count() <= MAX_BRAND_CHARS,
            "{long}"
        );
        assert!(
            b("International Business Machines Corporation Worldwide")
                .chars()
                .count()
                <= MAX_BRAND_CHARS
        );
        assert_eq!(
            brand_and_tagline("Acme Rockets, reusable launch vehicles")
                .1
                .as_deref(),
            Some("REUSABLE LAUNCH VEHICLES")
        );
        assert_eq!(brand_and_tagline("Acme, minimalist blue logo").1, None);
        assert_eq!(monogram("Acme Rockets", 2), "AR");
        assert_eq!(monogram("the daily grind", 2), "DG");
        assert_eq!(monogram("Acme Rockets", 1), "A");
    }

    #[test]
    fn unusual_names_and_extreme_canvases() {
        // A name the bundled faces cannot draw: emblem only, no empty boxes.
        let cjk = spec("株式会社テスト", "corporate", "finance", 96, 96);
        assert!(Plan::build(&cjk).brand.is_none());
        assert_eq!(render(&cjk).dimensions(), (96, 96));
        let mixed = spec("Café Olé 🚀, crêpes", "playful", "food", 96, 96);
        assert_eq!(Plan::build(&mixed).brand.as_deref(), Some("Café Olé"));
        // Very wide and very tall canvases keep everything inside.
        for (w, h) in [(400, 48), (48, 400)] {
            for st in STYLES {
                let img = render(&spec("Northwind Traders", st, "retail", w, h));
                let bg = img.get_pixel(0, 0).0;
                let inked = |p: [u8; 3]| !near(p, bg, 6);
                let rows = |y0, y1| count(&img, (0, y0, w, y1), inked);
                let cols = |x0, x1| count(&img, (x0, 0, x1, h), inked);
                assert_eq!(
                    rows(0, 1) + rows(h - 1, h) + cols(0, 1) + cols(w - 1, w),
                    0,
                    "{st} {w}x{h}"
                );
                assert!(
                    count(&img, (0, 0, w, h), inked) > 0,
                    "{st} {w}x{h} is blank"
                );
            }
        }
    }

    #[test]
    fn industry_keywords_match_words() {
        assert_eq!(Industry::parse("retail"), Industry::Retail);
        assert_eq!(Industry::parse("AI"), Industry::Technology);
        assert_eq!(Industry::parse("airline travel"), Industry::Travel);
        assert_eq!(Industry::parse("Healthcare"), Industry::Healthcare);
        assert_eq!(Industry::parse("something else"), Industry::Other);
    }
}
