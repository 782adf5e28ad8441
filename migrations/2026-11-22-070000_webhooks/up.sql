-- Webhooks: an organization's HTTPS endpoints and the events they receive.
CREATE TABLE webhooks (
    id                   UUID PRIMARY KEY,
    org_id               UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    name                 TEXT NOT NULL,
    url                  TEXT NOT NULL,
    events               TEXT[] NOT NULL,
    enabled              BOOLEAN NOT NULL DEFAULT true,
    -- Kept as issued, not hashed: HMAC signing needs the key itself (unlike an
    -- API key, which is only compared). It is shown once, at creation or rotation.
    secret               TEXT NOT NULL,
    -- Custom request headers, a JSON object of string values.
    headers              JSONB NOT NULL DEFAULT '{}',
    -- Deliveries that ended `failed` since the last success; 10 disable the webhook.
    consecutive_failures INTEGER NOT NULL DEFAULT 0,
    disabled_at          TIMESTAMPTZ,
    disabled_reason      TEXT,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX webhooks_org_idx ON webhooks (org_id, created_at);

-- One per event and subscribed webhook, written in the event's transaction.
-- `next_attempt_at` is also the lease of an attempt in flight: a claim moves
-- it past the attempt's timeout, so a scheduler that dies mid-attempt leaves
-- the delivery due again.
CREATE TABLE webhook_deliveries (
    id               UUID PRIMARY KEY,
    webhook_id       UUID NOT NULL REFERENCES webhooks(id) ON DELETE CASCADE,
    event_id         UUID NOT NULL REFERENCES events(id) ON DELETE CASCADE,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'succeeded', 'failed')),
    attempts         INTEGER NOT NULL DEFAULT 0,   -- attempts started (claimed)
    next_attempt_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_status_code INTEGER,
    last_error       TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at     TIMESTAMPTZ,
    UNIQUE (webhook_id, event_id)
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
CREATE INDEX webhook_deliveries_webhook_idx ON webhook_deliveries (webhook_id, created_at DESC);

-- Each finished attempt: what the receiver answered, or why it could not.
CREATE TABLE webhook_attempts (
    delivery_id UUID NOT NULL REFERENCES webhook_deliveries(id) ON DELETE CASCADE,
    number      INTEGER NOT NULL,
    started_at  TIMESTAMPTZ NOT NULL,
    duration_ms INTEGER NOT NULL,
    status_code INTEGER,
    error       TEXT,
    PRIMARY KEY (delivery_id, number)
);
