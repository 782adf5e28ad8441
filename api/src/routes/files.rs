use std::collections::HashMap;

use actix_web::http::header;
use actix_web::{HttpResponse, get, web};
use chrono::Utc;

use crate::error::ApiError;
use crate::state::AppState;

/// Serves a stored output file under a signed, expiring URL. The signature is
/// the authorization: these links are handed to browsers and other tools.
#[get("/files/{key}*")]
pub async fn get_file(
    state: web::Data<AppState>,
    path: web::Path<String>,
    query: web::Query<HashMap<String, String>>,
) -> Result<HttpResponse, ApiError> {
    let key = path.into_inner();
    let expires = query.get("expires").and_then(|v| v.parse::<i64>().ok());
    let signature = query.get("sig");
    let now = Utc::now().timestamp();
    let valid = match (expires, signature) {
        (Some(expires), Some(sig)) => state.signer.verify(&key, expires, sig, now),
        _ => false,
    };
    if !valid {
        // Same answer for a bad signature, an expired link and a missing file
        // with a bad signature: nothing about the store leaks.
        return Err(ApiError::NotFound("file not found or link expired".into()));
    }
    let bytes = state
        .store
        .get(&key)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(|| ApiError::NotFound("file not found or link expired".into()))?;
    let content_type = mime_guess::from_path(&key).first_or_octet_stream();
    let max_age = (expires.unwrap_or(now) - now).max(0);
    let shown = Shown::of(&content_type);
    Ok(HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, content_type.as_ref()))
        .insert_header((header::CACHE_CONTROL, format!("private, max-age={max_age}")))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"))
        .insert_header((header::CONTENT_SECURITY_POLICY, shown.policy()))
        .insert_header((
            header::CONTENT_DISPOSITION,
            format!(
                "{}; filename=\"{}\"",
                shown.disposition(),
                download_name(&key)
            ),
        ))
        .body(bytes))
}

/// How a browser may show a stored file. The files are generated from
/// users' prompts and documents and served on the API's origin, so nothing
/// in them may run there: media and PDFs display inline under a policy that
/// loads and runs nothing; everything else (HTML, SVG, text, JSON, DOCX...)
/// is a download.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    /// Raster images, audio and video: the browser's own media document.
    Media,
    /// PDF, in the browser's viewer.
    Pdf,
    Download,
}

impl Shown {
    fn of(content_type: &mime_guess::Mime) -> Self {
        use mime_guess::mime;
        match (content_type.type_(), content_type.subtype()) {
            // SVG is a document that can carry scripts.
            (mime::IMAGE, mime::SVG) => Self::Download,
            (mime::IMAGE | mime::AUDIO | mime::VIDEO, _) => Self::Media,
            (mime::APPLICATION, mime::PDF) => Self::Pdf,
            _ => Self::Download,
        }
    }

    fn disposition(self) -> &'static str {
        match self {
            Self::Media | Self::Pdf => "inline",
            Self::Download => "attachment",
        }
    }

    /// `sandbox` gives the document an opaque origin with scripts off.
    /// Browsers' media documents still show the file itself under
    /// `img-src`/`media-src 'self'` (and style their page inline). Chrome's
    /// PDF viewer does not run in a sandboxed document, so a PDF gets the
    /// same policy without `sandbox` (its viewer never runs the file's
    /// scripts on our origin) and with its own `object-src`.
    fn policy(self) -> &'static str {
        match self {
            Self::Media => {
                "default-src 'none'; img-src 'self'; media-src 'self'; \
                 style-src 'unsafe-inline'; sandbox"
            }
            Self::Pdf => {
                "default-src 'none'; object-src 'self'; img-src 'self'; \
                 style-src 'unsafe-inline'; form-action 'none'; frame-ancestors 'self'"
            }
            Self::Download => "default-src 'none'; sandbox",
        }
    }
}

/// The file name offered for a key: its last segment, with anything but
/// ASCII letters, digits, `.`, `-` and `_` replaced by `_` (nothing to
/// escape in the header, no path), no leading dot, at most 128 characters.
fn download_name(key: &str) -> String {
    let last = key.rsplit('/').next().unwrap_or_default();
    let safe: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let safe = safe.trim_start_matches('.');
    let safe: String = safe.chars().take(128).collect();
    if safe.is_empty() {
        "file".to_owned()
    } else {
        safe
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(key: &str) -> Shown {
        Shown::of(&mime_guess::from_path(key).first_or_octet_stream())
    }

    #[test]
    fn media_and_pdf_are_inline_everything_else_a_download() {
        for key in [
            "a/b.png", "x.jpg", "x.webp", "x.gif", "x.mp3", "x.wav", "x.mp4", "x.webm",
        ] {
            assert_eq!(shown(key), Shown::Media, "{key}");
        }
        assert_eq!(shown("doc.pdf"), Shown::Pdf);
        for key in [
            "x.svg", "x.html", "x.htm", "x.txt", "x.md", "x.json", "x.docx", "x.xml", "noext",
        ] {
            assert_eq!(shown(key), Shown::Download, "{key}");
        }
        assert!(Shown::Download.policy().ends_with("sandbox"));
        assert!(Shown::Media.policy().ends_with("sandbox"));
    }

    #[test]
    fn download_names_are_the_last_segment_made_safe() {
        assert_eq!(download_name("2025/01/abc.png"), "abc.png");
        assert_eq!(
            download_name("a/\"evil\"; name=x.html"),
            "_evil___name_x.html"
        );
        assert_eq!(download_name("a/..\\..\\x.txt"), "_.._x.txt");
        assert_eq!(download_name("a/.hidden"), "hidden");
        assert_eq!(download_name("a/r\u{e9}sum\u{e9}.pdf"), "r_sum_.pdf");
        assert_eq!(download_name("a/"), "file");
        assert_eq!(download_name(&"x".repeat(300)).len(), 128);
    }
}
