-- The outbox of account events (webhook payloads). A row is written in the
-- same transaction as the state change it reports, so no event is lost and
-- none is reported for a change that rolled back. Delivery (webhooks) reads
-- from here.
CREATE TABLE events (
    id         UUID PRIMARY KEY,               -- the envelope id, receivers' dedup key
    org_id     UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    type       TEXT NOT NULL,
    data       JSONB NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX events_org_created_idx ON events (org_id, created_at);
