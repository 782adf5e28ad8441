-- Idempotency-Key records (IETF draft-ietf-httpapi-idempotency-key-header):
-- one per organization and key, kept 24 hours. The request's fingerprint
-- tells a retry (same body) from a misuse (another body, 422); `in_flight`
-- rows answer 409 until the first request completes. Only the response is
-- kept, never the request.
CREATE TABLE idempotency_keys (
    org_id       UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    idem_key     TEXT NOT NULL CHECK (length(idem_key) BETWEEN 1 AND 255),
    -- SHA-256 of method, path, query, media type and canonical body.
    fingerprint  BYTEA NOT NULL CHECK (octet_length(fingerprint) = 32),
    state        TEXT NOT NULL CHECK (state IN ('in_flight', 'completed')),
    status_code  SMALLINT,
    content_type TEXT,
    body         BYTEA,
    -- A streamed agent run is replayed from its stored steps, not bytes.
    agent_run_id UUID,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (org_id, idem_key)
);
CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at);
