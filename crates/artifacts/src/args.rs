//! Reading a model's JSON arguments field by field, so that every error names
//! the exact field (`series[1].values[2]`) instead of serde's path-less
//! "invalid type: null, expected f64".

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::common::ArtifactError;

pub(super) type Object = Map<String, Value>;

/// The arguments object itself.
pub(super) fn object<'a>(value: &'a Value, path: &str) -> Result<&'a Object, ArtifactError> {
    value.as_object().ok_or_else(|| {
        ArtifactError::invalid(format!("{path} must be an object, got {}", kind(value)))
    })
}

/// A field that may be absent; `null` counts as absent because models often
/// send it for "not set".
pub(super) fn optional<T: DeserializeOwned>(
    obj: &Object,
    key: &str,
    path: &str,
) -> Result<Option<T>, ArtifactError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => T::deserialize(value)
            .map(Some)
            .map_err(|e| ArtifactError::invalid(format!("{path}: {e}"))),
    }
}

pub(super) fn required<T: DeserializeOwned>(
    obj: &Object,
    key: &str,
    path: &str,
) -> Result<T, ArtifactError> {
    optional(obj, key, path)?.ok_or_else(|| ArtifactError::invalid(format!("{path} is required")))
}

/// An optional array, returned as its raw elements so each can be checked
/// with its own index in the message.
pub(super) fn array<'a>(
    obj: &'a Object,
    key: &str,
    path: &str,
) -> Result<&'a [Value], ArtifactError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(items)) => Ok(items),
        Some(other) => Err(ArtifactError::invalid(format!(
            "{path} must be an array, got {}",
            kind(other)
        ))),
    }
}

/// A number element; JSON has no NaN or infinity, but a float too large for
/// f64 would still be refused here.
pub(super) fn number(value: &Value, path: &str) -> Result<f64, ArtifactError> {
    match value.as_f64() {
        Some(n) if n.is_finite() => Ok(n),
        Some(_) => Err(ArtifactError::invalid(format!(
            "{path} must be a finite number"
        ))),
        None => Err(ArtifactError::invalid(format!(
            "{path} must be a number, got {}",
            kind(value)
        ))),
    }
}

/// Describes a JSON value's type for messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Refuses text longer than `max` characters (not bytes: the model counts
/// characters).
pub(super) fn check_length(text: &str, max: usize, path: &str) -> Result<(), ArtifactError> {
    let chars = text.chars().count();
    if chars > max {
        return Err(ArtifactError::invalid(format!(
            "{path} is {chars} characters long; at most {max} are allowed"
        )));
    }
    Ok(())
}
