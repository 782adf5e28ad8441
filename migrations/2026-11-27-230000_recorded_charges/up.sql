-- A sync request's charge (chat, embeddings), written before its answer is
-- sent and settled in bulk afterwards, off the answer's path: by its API
-- process, or by the scheduler when that process died. Settling deletes the
-- row in the same transaction, so a charge is settled exactly once. The
-- columns are unigen_settle_shares' item.
CREATE TABLE recorded_charges (
    request_id        UUID PRIMARY KEY,
    allowance_id      UUID NOT NULL,
    org_id            UUID NOT NULL,
    period_start      TIMESTAMPTZ NOT NULL,
    bucket            TEXT,
    hold_credits      BIGINT NOT NULL,
    hold_milli        BIGINT NOT NULL,
    credits           BIGINT NOT NULL,
    bucket_milli      BIGINT NOT NULL,
    multiplier        DOUBLE PRECISION NOT NULL,
    api_key_id        UUID,
    endpoint          TEXT NOT NULL,
    method            TEXT NOT NULL,
    model             TEXT NOT NULL,
    latency_ms        BIGINT NOT NULL,
    status            TEXT NOT NULL,
    tools_used        JSONB NOT NULL,
    prompt_tokens     BIGINT NOT NULL,
    completion_tokens BIGINT NOT NULL,
    recorded_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX recorded_charges_recorded_at_idx ON recorded_charges (recorded_at);
