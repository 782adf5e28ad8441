//! `[voices]` settings: which raw voice ids a speech request may name, and
//! how many cloned voices an organization may keep upstream.

use serde::Deserialize;

fn default_max_clones_per_org() -> u32 {
    3
}

fn default_clone_idle_seconds() -> u64 {
    86_400
}

/// `[voices]`: voices on vendors that keep state per voice (ElevenLabs).
#[derive(Debug, Clone, Deserialize)]
pub struct VoiceSettings {
    /// Vendor voice ids a request may name directly, besides the names in
    /// its model's `voices` (and the ids they map to). Empty: none. Clones
    /// belong to one organization, so only the operator can allow a raw id.
    #[serde(default)]
    pub allowed_voice_ids: Vec<String>,
    /// Live cloned voices an organization may hold upstream; past it the
    /// least recently used one is deleted before another is made. 0: a
    /// clone is deleted right after the request that made it.
    #[serde(default = "default_max_clones_per_org")]
    pub max_clones_per_org: u32,
    /// A clone unused for this long is deleted upstream (swept whenever a
    /// cloning request runs). Keep it well above the speech timeout.
    #[serde(default = "default_clone_idle_seconds")]
    pub clone_idle_seconds: u64,
}

impl Default for VoiceSettings {
    fn default() -> Self {
        Self {
            allowed_voice_ids: Vec::new(),
            max_clones_per_org: default_max_clones_per_org(),
            clone_idle_seconds: default_clone_idle_seconds(),
        }
    }
}
