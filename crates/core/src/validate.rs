//! Field validators shared by every tool's parameters; messages name the field.

/// A request field that failed validation: the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ValidationError {
    pub field: &'static str,
    pub message: String,
}

impl ValidationError {
    pub fn new(field: &'static str, message: impl Into<String>) -> Self {
        Self {
            field,
            message: message.into(),
        }
    }
}

/// A required string: present, not blank, at most `max_chars` characters.
pub fn required_text(
    field: &'static str,
    value: Option<&str>,
    max_chars: usize,
) -> Result<String, ValidationError> {
    let value = value.ok_or_else(|| ValidationError::new(field, format!("{field} is required")))?;
    if value.trim().is_empty() {
        return Err(ValidationError::new(
            field,
            format!("{field} must not be empty"),
        ));
    }
    optional_text(field, Some(value), max_chars).map(|v| v.unwrap_or_default())
}

/// An optional string of at most `max_chars` characters; blank means absent.
pub fn optional_text(
    field: &'static str,
    value: Option<&str>,
    max_chars: usize,
) -> Result<Option<String>, ValidationError> {
    match value {
        Some(v) if v.chars().count() > max_chars => Err(ValidationError::new(
            field,
            format!("{field} must be at most {max_chars} characters"),
        )),
        Some(v) if !v.trim().is_empty() => Ok(Some(v.to_owned())),
        _ => Ok(None),
    }
}

/// `model_inputs`: absent, or a JSON object (the provider's own fields).
pub fn model_inputs(value: Option<&serde_json::Value>) -> Result<(), ValidationError> {
    match value {
        Some(value) if !value.is_object() => Err(ValidationError::new(
            "model_inputs",
            "model_inputs must be an object",
        )),
        _ => Ok(()),
    }
}

/// One of `allowed`, or `default` when absent.
pub fn one_of(
    field: &'static str,
    value: Option<&str>,
    allowed: &[&str],
    default: &str,
) -> Result<String, ValidationError> {
    match value {
        None => Ok(default.to_owned()),
        Some(v) if allowed.contains(&v) => Ok(v.to_owned()),
        Some(_) => Err(ValidationError::new(
            field,
            format!("{field} must be one of: {}", allowed.join(", ")),
        )),
    }
}

/// A number in `min..=max`, or `default` when absent.
pub fn number_in(
    field: &'static str,
    value: Option<f64>,
    min: f64,
    max: f64,
    default: f64,
) -> Result<f64, ValidationError> {
    let value = value.unwrap_or(default);
    if value.is_finite() && (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ValidationError::new(
            field,
            format!("{field} must be between {min} and {max}"),
        ))
    }
}

/// An integer in `min..=max`, or `default` when absent.
pub fn integer_in(
    field: &'static str,
    value: Option<i64>,
    min: i64,
    max: i64,
    default: i64,
) -> Result<i64, ValidationError> {
    let value = value.unwrap_or(default);
    if (min..=max).contains(&value) {
        Ok(value)
    } else {
        Err(ValidationError::new(
            field,
            format!("{field} must be between {min} and {max}"),
        ))
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn model_inputs_must_be_an_object_on_every_tool_that_takes_them() {
        use crate::params::music::MusicGenerationRequest;
        use crate::params::speech::SpeechRequest;
        use crate::params::transcription::TranscriptionRequest;
        let bad = serde_json::json!("not an object");
        let speech: SpeechRequest =
            serde_json::from_value(serde_json::json!({"input": "hi", "model_inputs": bad}))
                .unwrap();
        assert_eq!(speech.validate().unwrap_err().field, "model_inputs");
        let music: MusicGenerationRequest =
            serde_json::from_value(serde_json::json!({"prompt": "piano", "model_inputs": [1]}))
                .unwrap();
        assert_eq!(
            music.validate(1, "local/synth-v1", 47.0).unwrap_err().field,
            "model_inputs"
        );
        let transcription: TranscriptionRequest =
            serde_json::from_value(serde_json::json!({"file": "aGk=", "model_inputs": 3})).unwrap();
        assert_eq!(transcription.validate().unwrap_err().field, "model_inputs");
        assert!(model_inputs(Some(&serde_json::json!({"top_k": 250}))).is_ok());
        assert!(model_inputs(None).is_ok());
    }

    use super::*;

    #[test]
    fn validators_name_the_field_and_apply_defaults() {
        assert_eq!(
            required_text("input", None, 5).unwrap_err().message,
            "input is required"
        );
        assert_eq!(
            required_text("input", Some(" "), 5).unwrap_err().message,
            "input must not be empty"
        );
        assert_eq!(
            required_text("input", Some("abcdef"), 5)
                .unwrap_err()
                .message,
            "input must be at most 5 characters"
        );
        assert_eq!(optional_text("x", Some("  "), 5).unwrap(), None);
        assert_eq!(number_in("speed", None, 0.25, 4.0, 1.0).unwrap(), 1.0);
        assert_eq!(
            number_in("speed", Some(4.5), 0.25, 4.0, 1.0)
                .unwrap_err()
                .message,
            "speed must be between 0.25 and 4"
        );
        assert!(number_in("speed", Some(f64::NAN), 0.25, 4.0, 1.0).is_err());
        assert_eq!(
            integer_in("n", Some(0), 1, 4, 1).unwrap_err().message,
            "n must be between 1 and 4"
        );
        assert_eq!(
            one_of("fps", Some("24"), &["30", "60"], "30")
                .unwrap_err()
                .message,
            "fps must be one of: 30, 60"
        );
    }
}
