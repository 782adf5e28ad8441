//! Reading a tool call's arguments with messages that name the argument, so
//! the model can correct its next call.

use serde_json::{Map, Value};

use super::kit::Failure;
use unigen_artifacts::args::kind;

/// The key `llm` stores unparsable argument text under.
const RAW_KEY: &str = "_raw";

/// A call's arguments: a JSON object (absent counts as empty).
pub(super) struct Args<'a>(Option<&'a Map<String, Value>>);

impl<'a> Args<'a> {
    pub(super) fn of(arguments: &'a Value) -> Result<Self, Failure> {
        match arguments {
            Value::Object(map) if map.len() == 1 && map.contains_key(RAW_KEY) => Err(Failure::new(
                "the arguments are not valid JSON; send them as one JSON object",
            )),
            Value::Object(map) => Ok(Self(Some(map))),
            Value::Null => Ok(Self(None)),
            other => Err(Failure::new(format!(
                "the arguments must be a JSON object, got {}",
                kind(other)
            ))),
        }
    }

    /// `null` counts as absent: models often send it for "not set".
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.0?.get(name).filter(|v| !v.is_null())
    }

    /// An optional string, type-checked only.
    pub(super) fn string(&self, name: &str) -> Result<Option<&'a str>, Failure> {
        match self.get(name) {
            None => Ok(None),
            Some(Value::String(text)) => Ok(Some(text)),
            Some(other) => Err(Failure::new(format!(
                "{name} must be a string, got {}",
                kind(other)
            ))),
        }
    }

    /// An optional string of at most `max_chars` characters.
    pub(super) fn text(&self, name: &str, max_chars: usize) -> Result<Option<&'a str>, Failure> {
        let text = self.string(name)?;
        if let Some(text) = text
            && text.chars().count() > max_chars
        {
            return Err(Failure::new(format!(
                "{name} must be at most {max_chars} characters"
            )));
        }
        Ok(text)
    }

    /// A string that is not blank, of at most `max_chars` characters.
    pub(super) fn required_text(&self, name: &str, max_chars: usize) -> Result<&'a str, Failure> {
        self.text(name, max_chars)?
            .filter(|text| !text.trim().is_empty())
            .ok_or_else(|| Failure::new(format!("{name} is required")))
    }

    /// An optional integer in `min..=max` (`5.0` counts as 5).
    pub(super) fn integer(&self, name: &str, min: i64, max: i64) -> Result<Option<i64>, Failure> {
        let Some(value) = self.get(name) else {
            return Ok(None);
        };
        let number = value.as_i64().or_else(|| {
            value
                .as_f64()
                .filter(|n| n.fract() == 0.0 && n.abs() < 9.0e15)
                .map(|n| n as i64)
        });
        match number {
            Some(n) if (min..=max).contains(&n) => Ok(Some(n)),
            _ => Err(Failure::new(format!(
                "{name} must be an integer between {min} and {max}"
            ))),
        }
    }
}
