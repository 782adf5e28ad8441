-- Metering: credits, quota buckets, reservations, the credit ledger, usage
-- records and the request-rate state. Every charge locks its organization's
-- billing_accounts row, so an organization's charges are serialized and can
-- never overdraw; different organizations never wait on each other.

-- One row per organization: the current billing period and credit balances.
-- The ledger invariant: the sum of an organization's credit_transactions
-- amounts equals included_remaining + purchased_balance - overage_credits.
CREATE TABLE billing_accounts (
    org_id                    UUID PRIMARY KEY REFERENCES organizations(id) ON DELETE CASCADE,
    period_start              TIMESTAMPTZ NOT NULL,
    period_end                TIMESTAMPTZ NOT NULL,
    included_credits          BIGINT NOT NULL,            -- allocated for this period
    included_remaining        BIGINT NOT NULL CHECK (included_remaining >= 0),
    purchased_balance         BIGINT NOT NULL DEFAULT 0 CHECK (purchased_balance >= 0),
    reserved_credits          BIGINT NOT NULL DEFAULT 0 CHECK (reserved_credits >= 0),
    overage_credits           BIGINT NOT NULL DEFAULT 0 CHECK (overage_credits >= 0), -- this period
    overage_enabled           BOOLEAN NOT NULL DEFAULT false,
    soft_limit                BIGINT CHECK (soft_limit > 0),  -- overage credits; notifies
    hard_limit                BIGINT CHECK (hard_limit > 0),  -- overage credits; stops access
    notification_email        TEXT,
    notification_thresholds   INTEGER[] NOT NULL DEFAULT '{50,80,100}',
    soft_limit_notified       BOOLEAN NOT NULL DEFAULT false,
    credits_low_notified      BOOLEAN NOT NULL DEFAULT false,
    credits_depleted_notified BOOLEAN NOT NULL DEFAULT false,
    last_notification_at      TIMESTAMPTZ,
    created_at                TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX billing_accounts_period_end_idx ON billing_accounts (period_end);

-- Quota buckets per organization and period, in thousandths of a unit so tier
-- multipliers (1.25x, 1.5x) and fractional seconds stay exact.
CREATE TABLE quota_usage (
    org_id            UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    period_start      TIMESTAMPTZ NOT NULL,
    bucket            TEXT NOT NULL,
    used_milli        BIGINT NOT NULL DEFAULT 0 CHECK (used_milli >= 0),
    reserved_milli    BIGINT NOT NULL DEFAULT 0 CHECK (reserved_milli >= 0),
    low_notified      BOOLEAN NOT NULL DEFAULT false,
    depleted_notified BOOLEAN NOT NULL DEFAULT false,
    PRIMARY KEY (org_id, period_start, bucket)
);

-- What a request or job holds until it settles. Jobs use their id and are
-- released by their final state; sync requests expire so a crashed API
-- process cannot hold credits forever.
CREATE TABLE reservations (
    id           UUID PRIMARY KEY,
    org_id       UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    credits      BIGINT NOT NULL CHECK (credits >= 0),
    bucket       TEXT,
    bucket_milli BIGINT NOT NULL DEFAULT 0 CHECK (bucket_milli >= 0),
    period_start TIMESTAMPTZ NOT NULL,
    expires_at   TIMESTAMPTZ,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX reservations_expiry_idx ON reservations (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE credit_transactions (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    type          TEXT NOT NULL CHECK (type IN ('allocation', 'consumption', 'purchase', 'overage')),
    amount        BIGINT NOT NULL,
    balance_after BIGINT NOT NULL,
    description   TEXT NOT NULL,
    metadata      JSONB NOT NULL DEFAULT '{}',
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX credit_transactions_org_idx ON credit_transactions (org_id, created_at DESC, id DESC);

-- One row per metered request (a sync call or a finished job).
CREATE TABLE usage_records (
    id                UUID PRIMARY KEY,                 -- the request id (a job's id)
    org_id            UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    api_key_id        UUID REFERENCES api_keys(id) ON DELETE SET NULL,
    endpoint          TEXT NOT NULL,                    -- e.g. /v1/chat/completions
    method            TEXT NOT NULL,
    model             TEXT NOT NULL,
    credits           BIGINT NOT NULL,
    latency_ms        BIGINT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('success', 'failed', 'cancelled')),
    tools_used        TEXT[] NOT NULL DEFAULT '{}',
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    total_tokens      BIGINT NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX usage_records_org_created_idx ON usage_records (org_id, created_at DESC);

-- Request rate per key: the generic cell rate algorithm keeps one timestamp
-- (the theoretical arrival time) per key, updated by a single statement.
CREATE TABLE rate_limits (
    api_key_id UUID PRIMARY KEY REFERENCES api_keys(id) ON DELETE CASCADE,
    tat        TIMESTAMPTZ NOT NULL
);

-- Concurrent requests per organization: a semaphore of numbered slots taken
-- with SKIP LOCKED; a slot whose holder died frees itself when it expires.
CREATE TABLE concurrency_slots (
    org_id     UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    slot       INTEGER NOT NULL,
    holder     UUID,
    expires_at TIMESTAMPTZ,
    PRIMARY KEY (org_id, slot)
);
