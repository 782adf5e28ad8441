//! `multipart/form-data` bodies as the OpenAI SDKs send them (image edits,
//! transcriptions, translations), next to the JSON bodies the same routes
//! take. Everything read is bounded: the whole body by `http.max_body_bytes`
//! (as JSON bodies are), each file by `fetch.max_bytes` (as URL and base64
//! inputs are), each text field by [`MAX_TEXT_BYTES`].

use actix_multipart::{Multipart, MultipartError};
use actix_web::error::PayloadError;
use actix_web::http::header;
use actix_web::{HttpRequest, web};
use futures_util::{Stream, StreamExt};
use unigen_core::ValidationError;

use super::generation::Uploads;
use crate::error::ApiError;
use crate::state::AppState;

/// Longest text field kept (a prompt is at most 4000 characters).
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

/// A media field's value when its file was uploaded: the bytes are checked
/// and stored from the upload, never loaded from this text.
pub const UPLOADED: &str = "(uploaded file)";

/// A request body: JSON, or a form when the Content-Type says multipart.
pub enum Body {
    Json(web::Bytes),
    Form(Form),
}

/// The parts a route reads: file fields and text fields, by their request
/// field names. `name[]` and `name[0]` (how SDKs send arrays) count as `name`.
pub struct FormSpec {
    pub files: &'static [&'static str],
    pub fields: &'static [&'static str],
}

/// A file field's value.
#[derive(Debug, PartialEq, Eq)]
pub enum Upload {
    /// The file's bytes (a part with a file name, or any non-text content).
    Bytes(Vec<u8>),
    /// An http(s) URL or data URI given as text instead of a file: loaded
    /// as the JSON field would be.
    Reference(String),
}

/// A read form: the first file of each file field and every known text field.
#[derive(Debug, Default)]
pub struct Form {
    files: Vec<(&'static str, Upload)>,
    fields: Vec<(&'static str, String)>,
}

impl Form {
    /// The file of `field` (the first one when several were sent).
    pub fn take_file(&mut self, field: &str) -> Option<Upload> {
        let index = self.files.iter().position(|(name, _)| *name == field)?;
        Some(self.files.swap_remove(index).1)
    }

    /// The request field's value for a file field: a URL given as text is
    /// the value itself; uploaded bytes go to `uploads` and the value only
    /// says the file is there ([`UPLOADED`]).
    pub fn take_source(&mut self, field: &'static str, uploads: &mut Uploads) -> Option<String> {
        match self.take_file(field)? {
            Upload::Reference(source) => Some(source),
            Upload::Bytes(bytes) => {
                uploads.push((field, bytes));
                Some(UPLOADED.to_owned())
            }
        }
    }

    /// The text of `field` (the last one when repeated, as in a JSON object).
    pub fn text(&self, field: &str) -> Option<String> {
        self.fields
            .iter()
            .rev()
            .find(|(name, _)| *name == field)
            .map(|(_, value)| value.clone())
    }

    /// Every value of a repeated field (`timestamp_granularities[]`), comma
    /// lists split; `None` when the field is absent.
    pub fn list(&self, field: &str) -> Option<Vec<String>> {
        let values: Vec<String> = self
            .fields
            .iter()
            .filter(|(name, _)| *name == field)
            .flat_map(|(_, value)| value.split(','))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
            .collect();
        (!values.is_empty()).then_some(values)
    }

    /// A number field; a value that does not parse is a 400 naming it.
    pub fn number<T: std::str::FromStr>(
        &self,
        field: &'static str,
        what: &str,
    ) -> Result<Option<T>, ValidationError> {
        match self.text(field) {
            None => Ok(None),
            Some(raw) => raw.trim().parse().map(Some).map_err(|_| {
                ValidationError::new(field, format!("{field} must be {what}, got `{raw}`"))
            }),
        }
    }

    /// `true`/`false` (as the SDKs write booleans), or `1`/`0`.
    pub fn boolean(&self, field: &'static str) -> Result<Option<bool>, ValidationError> {
        match self.text(field).as_deref().map(str::trim) {
            None => Ok(None),
            Some("true" | "1") => Ok(Some(true)),
            Some("false" | "0") => Ok(Some(false)),
            Some(other) => Err(ValidationError::new(
                field,
                format!("{field} must be true or false, got `{other}`"),
            )),
        }
    }

    /// A JSON value written as text (`model_inputs`).
    pub fn json(&self, field: &'static str) -> Result<Option<serde_json::Value>, ValidationError> {
        match self.text(field) {
            None => Ok(None),
            Some(raw) => serde_json::from_str(&raw)
                .map(Some)
                .map_err(|_| ValidationError::new(field, format!("{field} must be JSON"))),
        }
    }
}

/// Whether the request says its body is a form.
fn is_multipart(request: &HttpRequest) -> bool {
    request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            v.trim_start()
                .to_ascii_lowercase()
                .starts_with("multipart/form-data")
        })
}

/// Reads the body: a form when it is `multipart/form-data`, otherwise the
/// bytes for the route's JSON parser.
pub async fn read_body(
    state: &AppState,
    request: &HttpRequest,
    payload: web::Payload,
    spec: &FormSpec,
) -> Result<Body, ApiError> {
    let max_body = state.limits.max_body;
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|length| length > max_body) {
        return Err(ApiError::PayloadTooLarge(max_body));
    }
    if !is_multipart(request) {
        return match payload.to_bytes_limited(max_body).await {
            Ok(Ok(bytes)) => Ok(Body::Json(bytes)),
            Ok(Err(_)) => Err(ApiError::BadRequest(
                "the request body could not be read".into(),
            )),
            Err(_) => Err(ApiError::PayloadTooLarge(max_body)),
        };
    }
    let limits = Limits {
        max_body,
        max_file: state.fetcher.max_bytes(),
    };
    read_form(request.headers(), payload, spec, limits, |field| {
        let err = state.fetcher.too_large(field);
        ValidationError::new(err.field, err.to_string()).into()
    })
    .await
    .map(Body::Form)
}

#[derive(Clone, Copy)]
struct Limits {
    max_body: usize,
    max_file: usize,
}

/// `image[]`, `image[0]` -> `image`.
fn canonical(name: &str) -> &str {
    match name
        .strip_suffix(']')
        .and_then(|rest| rest.rsplit_once('['))
    {
        Some((base, index)) if index.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// A text value standing for a file: loaded like the JSON field.
fn as_reference(bytes: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(bytes).ok()?.trim();
    ["http://", "https://", "data:"]
        .iter()
        .any(|scheme| text.starts_with(scheme))
        .then(|| text.to_owned())
}

async fn read_form(
    headers: &header::HeaderMap,
    payload: impl Stream<Item = Result<web::Bytes, PayloadError>> + 'static,
    spec: &FormSpec,
    limits: Limits,
    file_too_large: impl Fn(&'static str) -> ApiError,
) -> Result<Form, ApiError> {
    // Counted on the raw stream, so framing and skipped parts count too.
    let mut read = 0usize;
    let bounded = payload.map(move |chunk| {
        let chunk = chunk?;
        read += chunk.len();
        if read > limits.max_body {
            Err(PayloadError::Overflow)
        } else {
            Ok(chunk)
        }
    });
    let mut multipart = Multipart::new(headers, bounded);
    let mut form = Form::default();
    // The first refusal is answered once the body is read, so the client,
    // still sending, reads the answer instead of a reset connection.
    let mut refusal: Option<ApiError> = None;
    while let Some(part) = multipart.next().await {
        let mut part = part.map_err(|e| malformed(e, limits.max_body))?;
        let name = part.name().map(canonical).unwrap_or_default().to_owned();
        let has_filename = part
            .content_disposition()
            .and_then(|d| d.get_filename())
            .is_some();
        let file_field = spec.files.iter().find(|f| **f == name).copied();
        let text_field = spec.fields.iter().find(|f| **f == name).copied();
        let (field, cap) = match (file_field, text_field) {
            (Some(field), _) => (Some(field), limits.max_file),
            (None, Some(field)) => (Some(field), MAX_TEXT_BYTES),
            (None, None) => {
                if has_filename && refusal.is_none() {
                    refusal = Some(ApiError::BadRequest(format!(
                        "unexpected file in the form field `{name}`: this endpoint takes files in {}",
                        spec.files
                            .iter()
                            .map(|f| format!("`{f}`"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )));
                }
                (None, 0)
            }
        };
        // A second file of the same field (`image[]` sent twice) is skipped.
        let keep = field
            .is_some_and(|f| refusal.is_none() && !form.files.iter().any(|(name, _)| *name == f));
        let mut bytes = Vec::new();
        let mut over = false;
        while let Some(chunk) = part.next().await {
            let chunk = chunk.map_err(|e| malformed(e, limits.max_body))?;
            if keep && !over {
                if bytes.len() + chunk.len() > cap {
                    over = true;
                    bytes = Vec::new();
                } else {
                    bytes.extend_from_slice(&chunk);
                }
            }
        }
        let Some(field) = field.filter(|_| keep) else {
            continue;
        };
        if over {
            refusal = Some(if file_field.is_some() {
                file_too_large(field)
            } else {
                ValidationError::new(
                    field,
                    format!("{field} must be at most {MAX_TEXT_BYTES} bytes"),
                )
                .into()
            });
            continue;
        }
        if file_field.is_some() {
            let upload = match as_reference(&bytes).filter(|_| !has_filename) {
                Some(reference) => Upload::Reference(reference),
                None => Upload::Bytes(bytes),
            };
            form.files.push((field, upload));
        } else {
            match String::from_utf8(bytes) {
                // PostgreSQL text cannot hold NUL.
                Ok(text) if text.contains('\0') => {
                    refusal = Some(
                        ValidationError::new(
                            field,
                            format!("{field} must not contain NUL characters"),
                        )
                        .into(),
                    );
                }
                Ok(text) => form.fields.push((field, text)),
                Err(_) => {
                    refusal = Some(
                        ValidationError::new(field, format!("{field} must be UTF-8 text")).into(),
                    );
                }
            }
        }
    }
    match refusal {
        Some(err) => Err(err),
        None => Ok(form),
    }
}

fn malformed(err: MultipartError, max_body: usize) -> ApiError {
    match err {
        MultipartError::Payload(PayloadError::Overflow) => ApiError::PayloadTooLarge(max_body),
        MultipartError::BoundaryMissing | MultipartError::ContentTypeParse => ApiError::BadRequest(
            "the multipart/form-data body has no valid boundary in its Content-Type".into(),
        ),
        other => ApiError::BadRequest(format!("the multipart body could not be read: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use actix_web::http::header::{HeaderMap, HeaderValue};

    use super::*;

    const SPEC: FormSpec = FormSpec {
        files: &["image", "mask"],
        fields: &["prompt", "n"],
    };
    const LIMITS: Limits = Limits {
        max_body: 4096,
        max_file: 1024,
    };

    /// A form body split into small chunks, as a network delivers it.
    async fn read(parts: &[(&str, Option<&str>, &[u8])], limits: Limits) -> Result<Form, ApiError> {
        let mut body = Vec::new();
        for (name, filename, bytes) in parts {
            body.extend_from_slice(b"--XyZ\r\nContent-Disposition: form-data; name=\"");
            body.extend_from_slice(name.as_bytes());
            body.push(b'"');
            if let Some(filename) = filename {
                body.extend_from_slice(format!("; filename=\"{filename}\"").as_bytes());
            }
            body.extend_from_slice(b"\r\n\r\n");
            body.extend_from_slice(bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"--XyZ--\r\n");
        let chunks: Vec<Result<web::Bytes, PayloadError>> = body
            .chunks(100)
            .map(|c| Ok(web::Bytes::copy_from_slice(c)))
            .collect();
        let mut headers = HeaderMap::new();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("multipart/form-data; boundary=XyZ"),
        );
        read_form(
            &headers,
            futures_util::stream::iter(chunks),
            &SPEC,
            limits,
            |field| ValidationError::new(field, format!("{field} is too large")).into(),
        )
        .await
    }

    fn refused(result: Result<Form, ApiError>) -> (u16, String, Option<&'static str>) {
        let err = result.expect_err("refused");
        let param = match &err {
            ApiError::Validation(v) => Some(v.field),
            _ => None,
        };
        (
            actix_web::ResponseError::status_code(&err).as_u16(),
            err.to_string(),
            param,
        )
    }

    #[tokio::test]
    async fn files_and_known_fields_are_kept_others_skipped() {
        let mut form = read(
            &[
                ("image[]", Some("a.png"), b"first"),
                ("image[]", Some("b.png"), b"second"),
                ("prompt", None, "caf\u{e9}".as_bytes()),
                ("user", None, b"someone"),
                ("mask", None, b"https://example.com/m.png"),
            ],
            LIMITS,
        )
        .await
        .unwrap();
        assert_eq!(
            form.take_file("image"),
            Some(Upload::Bytes(b"first".to_vec()))
        );
        assert_eq!(
            form.take_file("mask"),
            Some(Upload::Reference("https://example.com/m.png".into()))
        );
        assert_eq!(form.text("prompt").as_deref(), Some("caf\u{e9}"));
        assert_eq!(form.text("user"), None);
    }

    #[tokio::test]
    async fn oversized_unknown_and_undecodable_parts_are_400s_naming_them() {
        let big = vec![0u8; 1500];
        assert_eq!(
            refused(read(&[("mask", Some("m.png"), &big)], LIMITS).await),
            (400, "mask is too large".into(), Some("mask"))
        );
        let long = vec![b'a'; MAX_TEXT_BYTES + 1];
        let roomy = Limits {
            max_body: 1 << 20,
            max_file: 1024,
        };
        let (status, _, param) = refused(read(&[("prompt", None, &long)], roomy).await);
        assert_eq!((status, param), (400, Some("prompt")));
        let (status, message, _) = refused(read(&[("photo", Some("a.png"), b"x")], LIMITS).await);
        assert_eq!(status, 400);
        assert!(
            message.contains("`photo`") && message.contains("`image`, `mask`"),
            "{message}"
        );
        let (status, _, param) = refused(read(&[("n", None, b"\xff\xfe")], LIMITS).await);
        assert_eq!((status, param), (400, Some("n")));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_a_413_even_in_skipped_parts() {
        let big = vec![0u8; 5000];
        let (status, message, _) = refused(read(&[("ignored", None, &big)], LIMITS).await);
        assert_eq!(status, 413, "{message}");
    }

    #[test]
    fn array_names_are_their_field() {
        assert_eq!(canonical("image[]"), "image");
        assert_eq!(canonical("image[3]"), "image");
        assert_eq!(
            canonical("timestamp_granularities[]"),
            "timestamp_granularities"
        );
        assert_eq!(canonical("image"), "image");
        assert_eq!(canonical("a[b]"), "a[b]");
    }

    #[test]
    fn typed_fields_name_the_field_on_error() {
        let form = Form {
            files: vec![("image", Upload::Bytes(vec![1]))],
            fields: vec![
                ("n", "2".into()),
                ("temperature", "warm".into()),
                ("diarization", "true".into()),
                ("timestamp_granularities", "word".into()),
                ("timestamp_granularities", "segment, word".into()),
                ("model_inputs", "{\"a\": 1}".into()),
                ("prompt", "first".into()),
                ("prompt", "second".into()),
            ],
        };
        assert_eq!(form.number::<u32>("n", "an integer"), Ok(Some(2)));
        let err = form.number::<f64>("temperature", "a number").unwrap_err();
        assert_eq!(
            (err.field, err.message.as_str()),
            ("temperature", "temperature must be a number, got `warm`")
        );
        assert_eq!(form.boolean("diarization"), Ok(Some(true)));
        assert_eq!(form.boolean("translation"), Ok(None));
        assert_eq!(
            form.list("timestamp_granularities").unwrap(),
            ["word", "segment", "word"]
        );
        assert_eq!(form.json("model_inputs").unwrap().unwrap()["a"], 1);
        assert_eq!(form.text("prompt").as_deref(), Some("second"));
        let mut form = form;
        assert_eq!(form.take_file("image"), Some(Upload::Bytes(vec![1])));
        assert_eq!(form.take_file("image"), None);
    }

    #[test]
    fn only_urls_and_data_uris_stand_for_files() {
        assert_eq!(
            as_reference(b" https://example.com/a.png\r\n").as_deref(),
            Some("https://example.com/a.png")
        );
        assert!(as_reference(b"data:image/png;base64,AAAA").is_some());
        assert_eq!(as_reference(b"\x89PNG\r\n"), None);
        assert_eq!(as_reference(b"/etc/passwd"), None);
    }
}
