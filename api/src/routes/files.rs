use std::collections::HashMap;
use std::ops::Range;

use actix_web::body::SizedStream;
use actix_web::http::header;
use actix_web::{HttpRequest, HttpResponse, HttpResponseBuilder, get, web};
use chrono::Utc;

use crate::error::ApiError;
use crate::state::AppState;

/// Serves a stored output file under a signed, expiring URL. The signature is
/// the authorization: these links are handed to browsers and other tools.
///
/// The file is streamed (never whole in memory) with an `ETag`
/// (`If-None-Match` answers 304) and one byte range (`Range`, 206; 416 when
/// unsatisfiable), so video can seek. With `storage.s3.presign_seconds` set,
/// the answer is a redirect to a presigned URL of the bucket instead.
#[get("/files/{key}*")]
pub async fn get_file(
    state: web::Data<AppState>,
    request: HttpRequest,
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
    let not_found = || ApiError::NotFound("file not found or link expired".into());
    if !valid {
        // Same answer for a bad signature, an expired link and a missing file
        // with a bad signature: nothing about the store leaks.
        return Err(not_found());
    }
    let meta = state
        .store
        .head(&key)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(not_found)?;
    if let Some(url) = state
        .store
        .presigned_get(&key)
        .await
        .map_err(ApiError::internal)?
    {
        return Ok(HttpResponse::TemporaryRedirect()
            .insert_header((header::LOCATION, url))
            .insert_header((header::CACHE_CONTROL, "no-store"))
            .finish());
    }
    let content_type = mime_guess::from_path(&key).first_or_octet_stream();
    let max_age = (expires.unwrap_or(now) - now).max(0);
    let shown = Shown::of(&content_type);
    let headers = |mut response: HttpResponseBuilder| {
        response
            .insert_header((header::ETAG, meta.e_tag.as_str()))
            .insert_header((header::ACCEPT_RANGES, "bytes"))
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
            ));
        response
    };
    let header_of = |name| {
        request
            .headers()
            .get(name)
            .and_then(|value| value.to_str().ok())
    };
    if header_of(header::IF_NONE_MATCH).is_some_and(|tags| any_tag_matches(tags, &meta.e_tag)) {
        return Ok(headers(HttpResponse::NotModified()).finish());
    }
    // `If-Range` with another tag (or a date, which we do not compare)
    // asks for the whole file.
    let range = match header_of(header::RANGE) {
        Some(value) if header_of(header::IF_RANGE).is_none_or(|tag| tag == meta.e_tag) => {
            requested_range(value, meta.size)
        }
        _ => Requested::Full,
    };
    let (mut response, range) = match range {
        Requested::Full => (headers(HttpResponse::Ok()), 0..meta.size),
        Requested::Part(range) => {
            let mut response = headers(HttpResponse::PartialContent());
            response.insert_header((
                header::CONTENT_RANGE,
                format!("bytes {}-{}/{}", range.start, range.end - 1, meta.size),
            ));
            (response, range)
        }
        Requested::Unsatisfiable => {
            return Ok(headers(HttpResponse::RangeNotSatisfiable())
                .insert_header((header::CONTENT_RANGE, format!("bytes */{}", meta.size)))
                .finish());
        }
    };
    let length = range.end - range.start;
    let stream = state
        .store
        .stream(&key, range)
        .await
        .map_err(ApiError::internal)?
        .ok_or_else(not_found)?;
    Ok(response
        .insert_header((header::CONTENT_TYPE, content_type.as_ref()))
        .body(SizedStream::new(length, stream)))
}

/// What a `Range` header asks of a file of `size` bytes.
#[derive(Debug, PartialEq, Eq)]
enum Requested {
    /// No (usable) range: the whole file, 200. Several ranges are answered
    /// so too, as RFC 9110 allows.
    Full,
    /// One satisfiable range (end exclusive, within the file): 206.
    Part(Range<u64>),
    /// 416.
    Unsatisfiable,
}

/// Parses a `Range` header: `bytes=a-b`, `bytes=a-` or `bytes=-n`. A header
/// that is not one of these is ignored (the whole file), as RFC 9110 says.
fn requested_range(value: &str, size: u64) -> Requested {
    let Some(spec) = value.trim().strip_prefix("bytes=") else {
        return Requested::Full;
    };
    if spec.contains(',') {
        return Requested::Full;
    }
    let Some((first, last)) = spec.trim().split_once('-') else {
        return Requested::Full;
    };
    let number = |text: &str| {
        let text = text.trim();
        (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
            .then(|| text.parse::<u64>().ok())
            .flatten()
    };
    match (first.trim().is_empty(), number(first), number(last)) {
        // `-n`: the last n bytes.
        (true, _, Some(suffix)) => {
            if suffix == 0 || size == 0 {
                Requested::Unsatisfiable
            } else {
                Requested::Part(size.saturating_sub(suffix)..size)
            }
        }
        (false, Some(start), end) if last.trim().is_empty() || end.is_some() => {
            if end.is_some_and(|end| end < start) {
                Requested::Full
            } else if start >= size {
                Requested::Unsatisfiable
            } else {
                let end = end.map_or(size, |end| end.saturating_add(1).min(size));
                Requested::Part(start..end)
            }
        }
        _ => Requested::Full,
    }
}

/// Whether an `If-None-Match` list names `e_tag` (weak comparison) or is `*`.
fn any_tag_matches(tags: &str, e_tag: &str) -> bool {
    let bare = |tag: &str| tag.trim().trim_start_matches("W/").to_owned();
    let e_tag = bare(e_tag);
    tags.split(',')
        .any(|tag| tag.trim() == "*" || bare(tag) == e_tag)
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

    #[test]
    fn ranges_are_parsed_as_rfc_9110_says() {
        use Requested::*;
        let r = requested_range;
        assert_eq!(r("bytes=0-9", 100), Part(0..10));
        assert_eq!(r("bytes=10-", 100), Part(10..100));
        assert_eq!(r("bytes=-10", 100), Part(90..100));
        assert_eq!(r("bytes=-1000", 100), Part(0..100));
        assert_eq!(r("bytes=90-1000", 100), Part(90..100));
        assert_eq!(r("bytes=99-99", 100), Part(99..100));
        assert_eq!(r("bytes=100-", 100), Unsatisfiable);
        assert_eq!(r("bytes=100-200", 100), Unsatisfiable);
        assert_eq!(r("bytes=-0", 100), Unsatisfiable);
        assert_eq!(r("bytes=0-", 0), Unsatisfiable);
        assert_eq!(r("bytes=-5", 0), Unsatisfiable);
        for ignored in [
            "bytes=0-1,5-6",
            "bytes=9-1",
            "items=0-1",
            "bytes=a-b",
            "bytes=-",
            "bytes=1",
            "bytes=+1-2",
            "",
        ] {
            assert_eq!(r(ignored, 100), Full, "{ignored}");
        }
    }

    #[test]
    fn if_none_match_compares_tags_weakly_and_takes_a_star() {
        assert!(any_tag_matches("\"abc\"", "\"abc\""));
        assert!(any_tag_matches("W/\"abc\"", "\"abc\""));
        assert!(any_tag_matches("\"x\", \"abc\"", "\"abc\""));
        assert!(any_tag_matches("*", "\"abc\""));
        assert!(!any_tag_matches("\"abd\"", "\"abc\""));
        assert!(!any_tag_matches("abc", "\"abc\""));
    }

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
