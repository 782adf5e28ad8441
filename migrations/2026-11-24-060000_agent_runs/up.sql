-- Agent runs and their steps. A run is written as it happens: the row when it
-- starts (status running), each step as it is taken, the totals at the end.
CREATE TABLE agent_runs (
    id            UUID PRIMARY KEY,
    org_id        UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    agent_id      UUID NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    api_key_id    UUID,
    -- Runs of one agent sharing a session see each other's exchanges when the
    -- agent has memory_enabled.
    session_id    TEXT NOT NULL,
    status        TEXT NOT NULL DEFAULT 'running'
                  CHECK (status IN ('running', 'completed', 'failed')),
    input         TEXT NOT NULL,
    output        TEXT,
    error_message TEXT,
    total_steps   INTEGER NOT NULL DEFAULT 0,
    tokens_used   BIGINT NOT NULL DEFAULT 0,
    credits_used  BIGINT NOT NULL DEFAULT 0,
    duration_ms   BIGINT,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at  TIMESTAMPTZ
);
CREATE INDEX agent_runs_agent_idx ON agent_runs (agent_id, created_at DESC);
CREATE INDEX agent_runs_session_idx ON agent_runs (agent_id, session_id, created_at);
-- The scheduler fails runs whose API process died mid-run.
CREATE INDEX agent_runs_running_idx ON agent_runs (created_at) WHERE status = 'running';

CREATE TABLE agent_run_steps (
    run_id      UUID NOT NULL REFERENCES agent_runs(id) ON DELETE CASCADE,
    step_number INTEGER NOT NULL,
    step_type   TEXT NOT NULL
                CHECK (step_type IN ('thinking', 'tool_call', 'tool_result', 'response', 'error')),
    content     TEXT NOT NULL DEFAULT '',
    tool_name   TEXT,
    tool_input  JSONB,
    tool_output JSONB,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, step_number)
);

-- Grows an open reservation by p_credits under the same rules as
-- unigen_reserve: an agent run reserves its base price when it starts, then
-- each model turn and tool call before it happens, so a run never spends
-- credits the organization does not have. 'missing': the reservation is gone
-- (settled, released or expired).
CREATE FUNCTION unigen_reserve_more(
    p_id uuid, p_credits bigint,
    OUT outcome text, OUT remaining double precision, OUT hard_limit bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_org uuid;
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    available bigint;
BEGIN
    remaining := 0;
    SELECT org_id INTO v_org FROM reservations WHERE id = p_id;
    IF NOT FOUND THEN
        outcome := 'missing';
        RETURN;
    END IF;
    SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = v_org;
    SELECT * INTO a FROM billing_accounts WHERE org_id = v_org FOR UPDATE;
    -- Under the account lock: a settlement or release may have won the race.
    PERFORM 1 FROM reservations WHERE id = p_id;
    IF NOT FOUND THEN
        outcome := 'missing';
        RETURN;
    END IF;
    available := a.included_remaining + a.purchased_balance - a.reserved_credits;
    IF p_credits > available THEN
        IF NOT (a.overage_enabled AND p.overage_rate_micros IS NOT NULL) THEN
            outcome := 'credits';
            remaining := greatest(available, 0);
            RETURN;
        END IF;
        IF a.hard_limit IS NOT NULL AND a.overage_credits + (p_credits - available) > a.hard_limit THEN
            outcome := 'hard_limit';
            hard_limit := a.hard_limit;
            RETURN;
        END IF;
    END IF;
    UPDATE billing_accounts SET reserved_credits = reserved_credits + p_credits WHERE org_id = v_org;
    UPDATE reservations SET credits = credits + p_credits WHERE id = p_id;
    outcome := 'ok';
END
$$;
