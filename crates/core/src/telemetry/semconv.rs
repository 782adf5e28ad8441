//! Span names, attribute keys and values, after the OpenTelemetry semantic
//! conventions **v1.37.0** (GenAI: `gen_ai.*`, in development; messaging:
//! `messaging.*` with the RabbitMQ page; HTTP: `http.*`, stable). Our own
//! values and keys are marked *custom*; keys of our own start `unigen.`.

/// `gen_ai.operation.name` values.
pub mod operation {
    /// Chat completions and their streams.
    pub const CHAT: &str = "chat";
    pub const EMBEDDINGS: &str = "embeddings";
    /// Images, video, music, speech and transcriptions: the conventions'
    /// multimodal operation, with `gen_ai.output.type` saying which.
    pub const GENERATE_CONTENT: &str = "generate_content";
    pub const INVOKE_AGENT: &str = "invoke_agent";
    pub const EXECUTE_TOOL: &str = "execute_tool";
}

/// `gen_ai.output.type` values. `image` and `text` are the conventions';
/// `audio` and `video` are *custom* (the list is open).
pub mod output_type {
    pub const TEXT: &str = "text";
    pub const IMAGE: &str = "image";
    pub const JSON: &str = "json";
    /// *custom*: speech and music.
    pub const AUDIO: &str = "audio";
    /// *custom*.
    pub const VIDEO: &str = "video";
}

/// `gen_ai.provider.name` values: the conventions' well-known names where one
/// fits (`openai`, `anthropic`, `gcp.gemini`, ...), else the adapter's name.
pub mod provider {
    /// *custom*: the in-process local provider (procedural renderers,
    /// the echo chat model), which makes no network call.
    pub const LOCAL: &str = "unigen.local";

    /// The provider name for a catalogue adapter.
    pub fn for_adapter(adapter: &str) -> &str {
        match adapter {
            "local" => LOCAL,
            "gemini" => "gcp.gemini",
            "azure" | "azure_openai" => "azure.ai.openai",
            "bedrock" => "aws.bedrock",
            other => other,
        }
    }
}

/// `error.type` values of our own (*custom*); otherwise an HTTP status code
/// or the error's class.
pub mod error_type {
    pub const TIMEOUT: &str = "timeout";
    pub const TRANSIENT: &str = "transient";
    pub const PERMANENT: &str = "permanent";
    pub const BROKER: &str = "broker";
    pub const STORAGE: &str = "storage";
    /// The generic `_OTHER` of the conventions.
    pub const OTHER: &str = "_OTHER";
}

/// `gen_ai.tool.type` values.
pub mod tool_type {
    /// A tool the agent runtime executes itself (all of ours).
    pub const FUNCTION: &str = "function";
}

/// Attribute keys of our own (*custom*: the conventions have the
/// `gen_ai.server.time_to_first_token` metric, but no span attribute).
pub mod attribute {
    /// Seconds from the start of a streamed GenAI call (its CLIENT span) to
    /// the first chunk it relayed.
    pub const TIME_TO_FIRST_CHUNK: &str = "unigen.gen_ai.time_to_first_chunk";
}

/// `messaging.system`.
pub const MESSAGING_RABBITMQ: &str = "rabbitmq";

/// AMQP message headers carrying the W3C trace context.
pub const TRACEPARENT: &str = "traceparent";
pub const TRACESTATE: &str = "tracestate";
