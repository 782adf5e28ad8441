//! Parsing of bodies and query strings with errors that name the field.

use std::collections::HashMap;

use serde::de::DeserializeOwned;

use crate::error::ApiError;

/// JSON body -> `T`; a type error names the field (`n: invalid type ...`).
pub fn json_body<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::BadRequest(
            "request body must be a JSON object".into(),
        ));
    }
    let mut de = serde_json::Deserializer::from_slice(body);
    serde_path_to_error::deserialize(&mut de).map_err(|err| {
        let path = err.path().to_string();
        let inner = err.into_inner();
        if inner.is_syntax() || inner.is_eof() || path == "." {
            ApiError::BadRequest(format!("request body is not valid JSON: {inner}"))
        } else {
            ApiError::BadRequest(format!("{path}: {inner}"))
        }
    })
}

/// Query boolean: `true`/`false`/`1`/`0`, absent = `default`.
pub fn query_bool(
    query: &HashMap<String, String>,
    name: &str,
    default: bool,
) -> Result<bool, ApiError> {
    match query.get(name).map(String::as_str) {
        None => Ok(default),
        Some("true" | "1") => Ok(true),
        Some("false" | "0") => Ok(false),
        Some(other) => Err(ApiError::BadRequest(format!(
            "{name} must be true or false, got `{other}`"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    struct Body {
        #[allow(dead_code)]
        n: Option<u32>,
    }

    #[test]
    fn type_errors_name_the_field_and_syntax_errors_say_json() {
        let err = json_body::<Body>(br#"{"n": "three"}"#)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("n: invalid type"), "{err}");
        let err = json_body::<Body>(b"{not json").unwrap_err().to_string();
        assert!(err.starts_with("request body is not valid JSON"), "{err}");
        assert!(json_body::<Body>(b"").is_err());
    }

    #[test]
    fn query_booleans() {
        let q: HashMap<String, String> = [("async".to_owned(), "1".to_owned())].into();
        assert!(query_bool(&q, "async", false).unwrap());
        assert!(!query_bool(&q, "poll", false).unwrap());
        let q: HashMap<String, String> = [("async".to_owned(), "yes".to_owned())].into();
        assert!(query_bool(&q, "async", false).is_err());
    }
}
