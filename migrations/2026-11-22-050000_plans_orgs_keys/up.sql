-- Plans: the limits of the spec's tables. A NULL limit means unlimited; 0 means
-- the feature is not available on the plan. Values the spec leaves open are
-- chosen in docs/spec-decisions.md.
CREATE TABLE plans (
    code                      TEXT PRIMARY KEY,
    name                      TEXT NOT NULL,
    included_credits          BIGINT NOT NULL,
    overage_rate_micros       BIGINT,            -- USD per credit, in millionths; NULL = no overage
    rate_limit_per_minute     INTEGER NOT NULL,
    concurrent_requests       INTEGER NOT NULL,
    chat_tokens               BIGINT,
    image_generations         BIGINT,
    video_seconds             BIGINT,
    stt_seconds               BIGINT,
    tts_chars                 BIGINT,
    image_edits               BIGINT,
    music_tracks              BIGINT,
    agent_runs                BIGINT,
    max_agents                INTEGER NOT NULL,
    tools_per_agent           INTEGER NOT NULL,
    max_iterations            INTEGER NOT NULL,
    knowledge_files_per_agent INTEGER NOT NULL,
    max_file_size_mb          INTEGER NOT NULL,
    max_webhooks              INTEGER NOT NULL
);

INSERT INTO plans VALUES
 ('free',     'Free',        100,  NULL,    20,   2,   100000,     25,   0,     0,      0,   0,   0,    0,  0, 0,  0,  0,  0,  0),
 ('pro',      'Pro',       2000,  10000,   300,  10,  2000000,    500,  120,  3600, 200000,  75,  20,  100,  5, 4, 10,  5, 10,  5),
 ('business', 'Business', 10000,   8000,  1000,  50, 10000000,   2500,  600, 18000, 800000, 300,  80,  500, 20, 7, 20, 20, 25, 20),
 ('cli_pro',  'CLI Pro',   5000,  10000,   600,  20,  5000000,    500,  120,  3600, 200000,  75,  20, NULL, 10, 7, 20, 10, 25,  5),
 ('cli_team', 'CLI Team', 20000,   8000,  2000, 100, 20000000,   2500,  600, 18000, 800000, 300,  80, NULL, 50, 7, 20, 50, 50, 20);

CREATE TABLE organizations (
    id         UUID PRIMARY KEY,
    name       TEXT NOT NULL,
    email      TEXT,
    plan_code  TEXT NOT NULL REFERENCES plans(code),
    status     TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE api_keys (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    -- SHA-256 of the full key; the key itself is never stored.
    key_hash     BYTEA NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    -- First characters of the key ("sk_" + 6 hex) so an operator can tell keys apart.
    key_prefix   TEXT NOT NULL,
    scopes       TEXT[] NOT NULL,
    expires_at   TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX api_keys_org_idx ON api_keys (org_id, created_at DESC);
