-- Daily usage rollups: one row per organization, UTC day, model, endpoint and
-- API key, with the sums of the usage records it covers. The dashboard's
-- aggregate pages read these instead of scanning usage_records.
--
-- Exact by construction: the rows are written by a statement-level trigger on
-- usage_records (unigen_usage_rollup, migrations/functions.sql), which runs
-- inside every statement that records usage (unigen_settle,
-- unigen_settle_many, unigen_settle_shares, unigen_release, and any direct
-- insert), over exactly the rows that statement inserted (a record skipped by
-- ON CONFLICT DO NOTHING is not in the transition table). usage_records rows
-- are never updated or deleted except with their organization, and this
-- table is deleted with it.
CREATE TABLE usage_daily (
    org_id            UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    day               DATE NOT NULL,             -- (created_at AT TIME ZONE 'UTC')::date
    model             TEXT NOT NULL,
    endpoint          TEXT NOT NULL,
    -- No foreign key: keys are revoked, never deleted, and the rollup keeps
    -- the id the records were written with.
    api_key_id        UUID,
    requests          BIGINT NOT NULL DEFAULT 0,
    successes         BIGINT NOT NULL DEFAULT 0,
    credits           BIGINT NOT NULL DEFAULT 0,
    prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    total_tokens      BIGINT NOT NULL DEFAULT 0,
    latency_ms_sum    BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT usage_daily_key UNIQUE NULLS NOT DISTINCT (org_id, day, model, endpoint, api_key_id)
);

-- The first version of the trigger function (functions.sql replaces it).
CREATE OR REPLACE FUNCTION unigen_usage_rollup() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO usage_daily AS d (org_id, day, model, endpoint, api_key_id, requests, successes,
                                  credits, prompt_tokens, completion_tokens, total_tokens,
                                  latency_ms_sum)
    SELECT n.org_id, (n.created_at AT TIME ZONE 'UTC')::date, n.model, n.endpoint, n.api_key_id,
           count(*), count(*) FILTER (WHERE n.status = 'success'), sum(n.credits),
           sum(n.prompt_tokens), sum(n.completion_tokens), sum(n.total_tokens), sum(n.latency_ms)
      FROM new_usage n
     GROUP BY 1, 2, 3, 4, 5
     ORDER BY 1, 2, 3, 4, 5
    ON CONFLICT ON CONSTRAINT usage_daily_key DO UPDATE SET
        requests = d.requests + EXCLUDED.requests,
        successes = d.successes + EXCLUDED.successes,
        credits = d.credits + EXCLUDED.credits,
        prompt_tokens = d.prompt_tokens + EXCLUDED.prompt_tokens,
        completion_tokens = d.completion_tokens + EXCLUDED.completion_tokens,
        total_tokens = d.total_tokens + EXCLUDED.total_tokens,
        latency_ms_sum = d.latency_ms_sum + EXCLUDED.latency_ms_sum;
    RETURN NULL;
END
$$;

-- No insert may land between the backfill and the trigger's first run.
LOCK TABLE usage_records IN SHARE ROW EXCLUSIVE MODE;

CREATE TRIGGER usage_records_rollup
    AFTER INSERT ON usage_records
    REFERENCING NEW TABLE AS new_usage
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_usage_rollup();

INSERT INTO usage_daily (org_id, day, model, endpoint, api_key_id, requests, successes, credits,
                         prompt_tokens, completion_tokens, total_tokens, latency_ms_sum)
SELECT org_id, (created_at AT TIME ZONE 'UTC')::date, model, endpoint, api_key_id,
       count(*), count(*) FILTER (WHERE status = 'success'), sum(credits),
       sum(prompt_tokens), sum(completion_tokens), sum(total_tokens), sum(latency_ms)
  FROM usage_records
 GROUP BY 1, 2, 3, 4, 5;
