use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A string that names no variant of an enum; carries the accepted values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{value}` is not one of: {expected}")]
pub struct ParseEnumError {
    pub value: String,
    pub expected: String,
}

/// Defines a string-backed enum with `as_str`, `ALL`, `FromStr`, `Display`
/// and serde in the same spelling, so the wire, the DB and the CLI agree.
macro_rules! string_enum {
    ($(#[$meta:meta])* $name:ident { $($variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
        pub enum $name {
            $(#[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = ParseEnumError;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(ParseEnumError {
                        value: s.to_owned(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }
    };
}

string_enum! {
    /// A generation tool: each has its own queue and worker pool.
    /// `responses`: background Responses API requests (`background: true`).
    Tool {
        Image => "image",
        ImageEdit => "image_edit",
        Video => "video",
        Music => "music",
        Tts => "tts",
        Stt => "stt",
        Responses => "responses",
    }
}

string_enum! {
    /// Job lifecycle. `completed`, `failed` and `cancelled` are terminal.
    JobStatus {
        Pending => "pending",
        Processing => "processing",
        Completed => "completed",
        Failed => "failed",
        Cancelled => "cancelled",
    }
}

impl JobStatus {
    pub fn is_terminal(self) -> bool {
        match self {
            JobStatus::Pending | JobStatus::Processing => false,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Cancelled => true,
        }
    }
}

string_enum! {
    /// Permission carried by an API key.
    Scope {
        Chat => "chat",
        Image => "image",
        ImageEdit => "image_edit",
        Video => "video",
        Music => "music",
        Tts => "tts",
        Stt => "stt",
        Usage => "usage",
        Jobs => "jobs",
        Agents => "agents",
        Webhooks => "webhooks",
        Keys => "keys",
    }
}

impl Scope {
    /// Parses a comma-separated list; `all` (or `*`) grants every scope.
    /// Duplicates collapse; an empty list or an unknown name is an error.
    pub fn parse_list(list: &str) -> Result<Vec<Scope>, ParseEnumError> {
        let mut scopes = Vec::new();
        for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            if part == "all" || part == "*" {
                return Ok(Scope::ALL.to_vec());
            }
            let scope: Scope = part.parse()?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        if scopes.is_empty() {
            return Err(ParseEnumError {
                value: list.to_owned(),
                expected: "a comma-separated list of scopes, or `all`".to_owned(),
            });
        }
        Ok(scopes)
    }
}

string_enum! {
    /// Price/quality tier of a model; applies quota multipliers.
    ModelTier {
        Fast => "fast",
        Standard => "standard",
        Premium => "premium",
    }
}

impl ModelTier {
    /// Quota multiplier for speech, transcription, image edits and music.
    pub fn quota_multiplier(self) -> f64 {
        match self {
            ModelTier::Fast => 1.0,
            ModelTier::Standard => 1.25,
            ModelTier::Premium => 1.5,
        }
    }
}

string_enum! {
    /// Category a model is listed under.
    ModelCategory {
        Chat => "chat",
        Image => "image",
        Video => "video",
        Audio => "audio",
        Music => "music",
        Embedding => "embedding",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scope_lists_parse_with_all_duplicates_and_spaces() {
        assert_eq!(
            Scope::parse_list("chat, image,chat").unwrap(),
            vec![Scope::Chat, Scope::Image]
        );
        assert_eq!(Scope::parse_list("all").unwrap().len(), Scope::ALL.len());
        assert_eq!(
            Scope::parse_list("image_edit").unwrap(),
            vec![Scope::ImageEdit]
        );
    }

    #[test]
    fn unknown_or_empty_scope_lists_are_rejected() {
        let err = Scope::parse_list("chat,admin").unwrap_err();
        assert_eq!(err.value, "admin");
        assert!(err.expected.contains("image_edit"));
        assert!(Scope::parse_list(" , ").is_err());
    }

    #[test]
    fn enums_round_trip_through_their_wire_names() {
        for tool in Tool::ALL {
            assert_eq!(tool.as_str().parse::<Tool>().unwrap(), *tool);
            assert_eq!(serde_json::to_value(tool).unwrap(), tool.as_str());
        }
        assert!(JobStatus::Cancelled.is_terminal());
        assert!(!JobStatus::Processing.is_terminal());
    }
}

string_enum! {
    /// A quota bucket, counted per organization and billing period.
    Bucket {
        ChatTokens => "chat_tokens",
        ImageGenerations => "image_generations",
        VideoSeconds => "video_seconds",
        SttSeconds => "stt_seconds",
        TtsChars => "tts_chars",
        ImageEdits => "image_edits",
        MusicTracks => "music_tracks",
        AgentRuns => "agent_runs",
    }
}

impl Bucket {
    pub fn for_tool(tool: Tool) -> Bucket {
        match tool {
            Tool::Image => Bucket::ImageGenerations,
            Tool::ImageEdit => Bucket::ImageEdits,
            Tool::Video => Bucket::VideoSeconds,
            Tool::Music => Bucket::MusicTracks,
            Tool::Tts => Bucket::TtsChars,
            Tool::Stt => Bucket::SttSeconds,
            Tool::Responses => Bucket::ChatTokens,
        }
    }

    /// The quota multiplier of a model tier on this bucket: the spec's
    /// Fast/Standard/Premium 1x/1.25x/1.5x for speech, transcription, edits
    /// and music; chat's Basic/Standard/Powerful 1x/1.5x/2x (the low end of
    /// the spec's ranges); 1x for image generations and video seconds.
    pub fn multiplier(self, tier: ModelTier) -> f64 {
        match self {
            Bucket::SttSeconds | Bucket::TtsChars | Bucket::ImageEdits | Bucket::MusicTracks => {
                tier.quota_multiplier()
            }
            Bucket::ChatTokens => match tier {
                ModelTier::Fast => 1.0,
                ModelTier::Standard => 1.5,
                ModelTier::Premium => 2.0,
            },
            Bucket::ImageGenerations | Bucket::VideoSeconds | Bucket::AgentRuns => 1.0,
        }
    }
}
