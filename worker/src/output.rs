//! What a finished tool hands back. A leaf: the tools and the registry
//! that dispatches to them both import it, and it imports neither.

/// `outputData` (file keys, not URLs) and the credits the tool actually
/// consumed.
pub struct ToolOutput {
    pub output: serde_json::Value,
    pub actual_credits: i64,
}
