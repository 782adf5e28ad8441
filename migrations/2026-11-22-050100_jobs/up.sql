-- One row per generation request. The row is the truth; queue messages only
-- point at it.
CREATE TABLE jobs (
    id                UUID PRIMARY KEY,              -- UUIDv7: time ordered
    org_id            UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    api_key_id        UUID NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
    tool              TEXT NOT NULL,
    status            TEXT NOT NULL DEFAULT 'pending'
                      CHECK (status IN ('pending', 'processing', 'completed', 'failed', 'cancelled')),
    progress          SMALLINT NOT NULL DEFAULT 0 CHECK (progress BETWEEN 0 AND 100),
    model             TEXT NOT NULL,
    model_tier        TEXT NOT NULL,
    input_params      JSONB NOT NULL,
    output_data       JSONB,
    estimated_credits BIGINT NOT NULL,
    actual_credits    BIGINT,
    error_message     TEXT,
    -- Delivery bookkeeping: attempt counts claims; enqueued_at is set once the
    -- broker confirmed the message (NULL = the relay must publish it).
    attempt           INTEGER NOT NULL DEFAULT 0,
    enqueued_at       TIMESTAMPTZ,
    worker_id         TEXT,
    lease_expires_at  TIMESTAMPTZ,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    started_at        TIMESTAMPTZ,
    completed_at      TIMESTAMPTZ
);

CREATE INDEX jobs_org_created_idx ON jobs (org_id, created_at DESC);
CREATE INDEX jobs_org_tool_created_idx ON jobs (org_id, tool, created_at DESC);
-- The relay's work list: accepted but never confirmed by the broker.
CREATE INDEX jobs_unpublished_idx ON jobs (created_at)
    WHERE status = 'pending' AND enqueued_at IS NULL;
-- Lease rescue: processing jobs ordered by lease expiry.
CREATE INDEX jobs_lease_idx ON jobs (lease_expires_at) WHERE status = 'processing';
