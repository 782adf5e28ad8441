-- Voices cloned upstream (ElevenLabs' instant clones) for an organization,
-- one per (organization, model, sample digest). Recorded so that a clone
-- outlives the worker that made it, and so that the least recently used
-- ones, or those idle too long, are deleted upstream again. No foreign key:
-- a deleted organization's rows stay until they are swept (deleted upstream).
CREATE TABLE voice_clones (
    org_id UUID NOT NULL,
    model_id TEXT NOT NULL,
    sample_sha256 BYTEA NOT NULL,
    voice_id TEXT NOT NULL UNIQUE,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, model_id, sample_sha256)
);
CREATE INDEX voice_clones_lru ON voice_clones (org_id, last_used_at);
CREATE INDEX voice_clones_idle ON voice_clones (last_used_at);
