//! The one error of the Responses translations: a field refused, named.

/// A field the bridge refuses: `param` names it the way the client sent it
/// (`input[2].content[0]`, `tools[1].type`, `text.format.schema`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub param: String,
    pub message: String,
}

impl Invalid {
    pub fn new(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            param: param.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for Invalid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Invalid {}
