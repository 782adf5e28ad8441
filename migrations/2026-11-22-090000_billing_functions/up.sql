-- The hot path of metering as server-side functions. Every charge of an
-- organization locks its billing_accounts row; done statement by statement
-- from the API, that lock was held across a dozen network round trips and an
-- organization topped out below 200 requests/s. Here the lock is held for the
-- function's own execution. The rules are those of `db::queries::billing`
-- (account creation and period rollover stay there: a function answers
-- 'setup' when the account is missing or its period has ended). The event
-- outbox insert and the per-key rate limit live here too.

-- A plan's limit for a bucket: NULL unlimited, 0 not on the plan.
CREATE FUNCTION unigen_bucket_limit(p plans, bucket text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE bucket
        WHEN 'chat_tokens' THEN p.chat_tokens
        WHEN 'image_generations' THEN p.image_generations
        WHEN 'video_seconds' THEN p.video_seconds
        WHEN 'stt_seconds' THEN p.stt_seconds
        WHEN 'tts_chars' THEN p.tts_chars
        WHEN 'image_edits' THEN p.image_edits
        WHEN 'music_tracks' THEN p.music_tracks
        WHEN 'agent_runs' THEN p.agent_runs
    END
$$;

-- Records an event and, in the same statement, a pending delivery for every
-- enabled webhook of its organization subscribed to its kind. The one
-- definition: `db::queries::events::insert` calls it too.
CREATE FUNCTION unigen_record_event(
    event_id uuid, org uuid, kind text, payload jsonb, at timestamptz) RETURNS void
LANGUAGE sql AS $$
    WITH event AS (
        INSERT INTO events (id, org_id, type, data, created_at)
        VALUES (event_id, org, kind, payload, at)
        RETURNING id, org_id, type)
    INSERT INTO webhook_deliveries (id, webhook_id, event_id)
    SELECT gen_random_uuid(), w.id, event.id FROM event
      JOIN webhooks w ON w.org_id = event.org_id AND w.enabled AND event.type = ANY(w.events)
$$;

-- The generic cell rate algorithm for a key's request rate: each admitted
-- request moves the key's theoretical arrival time (TAT) one interval on; a
-- request is admitted while the TAT stays within a minute of now (a burst of
-- the plan's per-minute limit, then one per interval). Answers NULL when
-- admitted, else the TAT (retry once TAT + interval - 60 s has passed).
-- A function, so the fallback read runs with a fresh snapshot: it sees the
-- row a concurrent first request of a new key has just inserted.
CREATE FUNCTION unigen_take_rate_token(key uuid, interval_us bigint) RETURNS timestamptz
LANGUAGE plpgsql AS $$
DECLARE
    step interval := make_interval(secs => interval_us / 1e6);
    current_tat timestamptz;
BEGIN
    INSERT INTO rate_limits AS r (api_key_id, tat) VALUES (key, clock_timestamp() + step)
    ON CONFLICT (api_key_id) DO UPDATE
       SET tat = greatest(r.tat, clock_timestamp()) + step
     WHERE greatest(r.tat, clock_timestamp()) + step <= clock_timestamp() + interval '60 seconds';
    IF FOUND THEN
        RETURN NULL;
    END IF;
    SELECT r.tat INTO current_tat FROM rate_limits r WHERE r.api_key_id = key;
    RETURN current_tat;
END
$$;

-- Holds `p_credits` and `p_milli` of `p_bucket` for request `p_id`.
-- outcome: 'ok', 'setup', 'quota' (remaining: what the bucket has left, in
-- units), 'credits' (remaining: credits left), 'hard_limit'.
CREATE FUNCTION unigen_reserve(
    p_org uuid, p_id uuid, p_credits bigint, p_bucket text, p_milli bigint, p_expires timestamptz,
    OUT outcome text, OUT remaining double precision, OUT hard_limit bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    lim bigint;
    q_used bigint := 0;
    q_reserved bigint := 0;
    available bigint;
BEGIN
    remaining := 0;
    SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = p_org;
    SELECT * INTO a FROM billing_accounts WHERE org_id = p_org FOR UPDATE;
    IF NOT FOUND OR a.period_end <= now() THEN
        outcome := 'setup';
        RETURN;
    END IF;
    IF p_bucket IS NOT NULL THEN
        lim := unigen_bucket_limit(p, p_bucket);
        IF lim IS NOT NULL THEN
            SELECT q.used_milli, q.reserved_milli INTO q_used, q_reserved FROM quota_usage q
             WHERE q.org_id = p_org AND q.period_start = a.period_start AND q.bucket = p_bucket;
            q_used := COALESCE(q_used, 0);
            q_reserved := COALESCE(q_reserved, 0);
            IF lim = 0 OR p_milli > lim * 1000 - q_used - q_reserved THEN
                outcome := 'quota';
                remaining := greatest(lim * 1000 - q_used - q_reserved, 0) / 1000.0;
                RETURN;
            END IF;
        END IF;
    END IF;
    available := a.included_remaining + a.purchased_balance - a.reserved_credits;
    IF p_credits > available THEN
        IF NOT (a.overage_enabled AND p.overage_rate_micros IS NOT NULL) THEN
            outcome := 'credits';
            remaining := greatest(available, 0);
            RETURN;
        END IF;
        -- In-flight reservations beyond the balance count as overage too.
        IF a.hard_limit IS NOT NULL AND a.overage_credits + (p_credits - available) > a.hard_limit THEN
            outcome := 'hard_limit';
            hard_limit := a.hard_limit;
            RETURN;
        END IF;
    END IF;
    UPDATE billing_accounts SET reserved_credits = reserved_credits + p_credits WHERE org_id = p_org;
    IF p_bucket IS NOT NULL THEN
        INSERT INTO quota_usage AS q (org_id, period_start, bucket, reserved_milli)
        VALUES (p_org, a.period_start, p_bucket, p_milli)
        ON CONFLICT (org_id, period_start, bucket)
        DO UPDATE SET reserved_milli = q.reserved_milli + EXCLUDED.reserved_milli;
    END IF;
    INSERT INTO reservations (id, org_id, credits, bucket, bucket_milli, period_start, expires_at)
    VALUES (p_id, p_org, p_credits, p_bucket, CASE WHEN p_bucket IS NULL THEN 0 ELSE p_milli END,
            a.period_start, p_expires);
    outcome := 'ok';
END
$$;

-- Charges reservation `p_id`: credits from included, then purchased, then
-- overage; the bucket in the reservation's period; the ledger rows, the
-- usage record and the billing events (credits.low / credits.depleted per
-- bucket and for the credits, overage.soft_limit_reached).
-- outcome: 'ok', 'gone' (already settled or released), 'setup'.
CREATE FUNCTION unigen_settle(
    p_id uuid, p_credits bigint, p_milli bigint,
    u_key uuid, u_endpoint text, u_method text, u_model text, u_latency_ms bigint,
    u_tools text[], u_prompt bigint, u_completion bigint,
    OUT outcome text, OUT from_included bigint, OUT from_purchased bigint, OUT overage bigint,
    OUT bucket text, OUT remaining_milli bigint, OUT credits_remaining bigint,
    OUT overage_enabled boolean, OUT overage_credits bigint, OUT overage_rate_micros bigint,
    OUT events_recorded boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_org uuid;
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    r reservations%ROWTYPE;
    q quota_usage%ROWTYPE;
    lim bigint;
    rem bigint;
    credits bigint := greatest(p_credits, 0);
    meta jsonb;
    allotted bigint;
    left_credits bigint;
BEGIN
    events_recorded := false;
    SELECT org_id INTO v_org FROM reservations WHERE id = p_id;
    IF NOT FOUND THEN
        outcome := 'gone';
        RETURN;
    END IF;
    SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = v_org;
    SELECT * INTO a FROM billing_accounts WHERE org_id = v_org FOR UPDATE;
    IF NOT FOUND OR a.period_end <= now() THEN
        outcome := 'setup';
        RETURN;
    END IF;
    -- Deleted under the account lock: a racing settle or release finds nothing.
    DELETE FROM reservations WHERE id = p_id RETURNING * INTO r;
    IF NOT FOUND THEN
        outcome := 'gone';
        RETURN;
    END IF;
    from_included := least(credits, a.included_remaining);
    from_purchased := least(credits - from_included, a.purchased_balance);
    overage := credits - from_included - from_purchased;
    UPDATE billing_accounts SET
        reserved_credits = reserved_credits - r.credits,
        included_remaining = included_remaining - from_included,
        purchased_balance = purchased_balance - from_purchased,
        overage_credits = billing_accounts.overage_credits + overage
     WHERE org_id = v_org RETURNING * INTO a;
    meta := jsonb_build_object('request_id', p_id, 'model', u_model, 'endpoint', u_endpoint);
    IF from_included + from_purchased > 0 THEN
        INSERT INTO credit_transactions (id, org_id, type, amount, balance_after, description, metadata, created_at)
        VALUES (gen_random_uuid(), v_org, 'consumption', -(from_included + from_purchased),
                a.included_remaining + a.purchased_balance - (a.overage_credits - overage),
                u_endpoint || ' ' || u_model,
                meta || jsonb_build_object('included', from_included, 'purchased', from_purchased),
                clock_timestamp());
    END IF;
    IF overage > 0 THEN
        INSERT INTO credit_transactions (id, org_id, type, amount, balance_after, description, metadata, created_at)
        VALUES (gen_random_uuid(), v_org, 'overage', -overage,
                a.included_remaining + a.purchased_balance - a.overage_credits,
                'Overage: ' || u_endpoint || ' ' || u_model,
                meta || jsonb_build_object(
                    'rate', COALESCE(p.overage_rate_micros, 0) / 1000000.0,
                    'cost', COALESCE(p.overage_rate_micros, 0) * overage / 1000000.0,
                    'billing_status', 'pending'),
                clock_timestamp());
    END IF;
    bucket := r.bucket;
    IF r.bucket IS NOT NULL THEN
        UPDATE quota_usage SET
            reserved_milli = reserved_milli - r.bucket_milli,
            used_milli = used_milli + greatest(p_milli, 0)
         WHERE org_id = v_org AND period_start = r.period_start AND quota_usage.bucket = r.bucket
         RETURNING * INTO q;
        lim := unigen_bucket_limit(p, r.bucket);
        IF lim IS NOT NULL THEN
            remaining_milli := greatest(lim * 1000 - q.used_milli - q.reserved_milli, 0);
        END IF;
        IF lim > 0 THEN
            rem := greatest(lim * 1000 - q.used_milli, 0);
            IF rem = 0 AND NOT q.depleted_notified THEN
                UPDATE quota_usage SET depleted_notified = true, low_notified = true
                 WHERE org_id = q.org_id AND period_start = q.period_start AND quota_usage.bucket = q.bucket;
                PERFORM unigen_record_event(gen_random_uuid(), v_org, 'credits.depleted', jsonb_build_object(
                    'bucketType', r.bucket, 'remaining', 0, 'limit', lim, 'percentUsed', 100.0), clock_timestamp());
                events_recorded := true;
            ELSIF rem * 100 < lim * 1000 * 10 AND NOT q.low_notified THEN
                UPDATE quota_usage SET low_notified = true
                 WHERE org_id = q.org_id AND period_start = q.period_start AND quota_usage.bucket = q.bucket;
                PERFORM unigen_record_event(gen_random_uuid(), v_org, 'credits.low', jsonb_build_object(
                    'bucketType', r.bucket, 'remaining', rem / 1000.0, 'limit', lim,
                    'percentUsed', round(least(q.used_milli::numeric / 10 / lim, 100), 1)), clock_timestamp());
                events_recorded := true;
            END IF;
        END IF;
    END IF;
    INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits, latency_ms,
                               status, tools_used, prompt_tokens, completion_tokens, total_tokens, created_at)
    VALUES (p_id, v_org, u_key, u_endpoint, u_method, u_model, credits, u_latency_ms, 'success',
            u_tools, u_prompt, u_completion, u_prompt + u_completion, now())
    ON CONFLICT DO NOTHING;
    -- The credits: low below 10% of what the period allotted, depleted at 0.
    left_credits := greatest(a.included_remaining + a.purchased_balance, 0);
    allotted := a.included_credits + a.purchased_balance;
    IF left_credits = 0 AND allotted > 0 AND NOT a.credits_depleted_notified THEN
        UPDATE billing_accounts SET credits_depleted_notified = true, credits_low_notified = true
         WHERE org_id = v_org;
        PERFORM unigen_record_event(gen_random_uuid(), v_org, 'credits.depleted', jsonb_build_object(
            'bucketType', 'credits', 'remaining', 0, 'limit', allotted, 'percentUsed', 100.0), clock_timestamp());
        events_recorded := true;
    ELSIF allotted > 0 AND left_credits * 100 < allotted * 10 AND NOT a.credits_low_notified THEN
        UPDATE billing_accounts SET credits_low_notified = true WHERE org_id = v_org;
        PERFORM unigen_record_event(gen_random_uuid(), v_org, 'credits.low', jsonb_build_object(
            'bucketType', 'credits', 'remaining', left_credits, 'limit', allotted,
            'percentUsed', round(least((allotted - left_credits) * 100.0 / allotted, 100), 1)), clock_timestamp());
        events_recorded := true;
    END IF;
    IF a.soft_limit IS NOT NULL AND a.overage_credits >= a.soft_limit AND NOT a.soft_limit_notified THEN
        UPDATE billing_accounts SET soft_limit_notified = true, last_notification_at = now()
         WHERE org_id = v_org;
        PERFORM unigen_record_event(gen_random_uuid(), v_org, 'overage.soft_limit_reached', jsonb_build_object(
            'overageCredits', a.overage_credits, 'softLimit', a.soft_limit,
            'overageCost', COALESCE(p.overage_rate_micros, 0) * a.overage_credits / 1000000.0), clock_timestamp());
        events_recorded := true;
    END IF;
    credits_remaining := greatest(a.included_remaining + a.purchased_balance - a.reserved_credits, 0);
    overage_enabled := a.overage_enabled;
    overage_credits := a.overage_credits;
    overage_rate_micros := p.overage_rate_micros;
    outcome := 'ok';
END
$$;

-- Gives reservation `p_id` back without charging; records the request's
-- usage row (zero credits, `u_status`) when one is given (`u_endpoint`).
CREATE FUNCTION unigen_release(
    p_id uuid, p_org uuid,
    u_key uuid, u_endpoint text, u_method text, u_model text, u_latency_ms bigint,
    u_status text, u_tools text[], u_prompt bigint, u_completion bigint,
    OUT released boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_org uuid;
    r reservations%ROWTYPE;
BEGIN
    released := false;
    SELECT org_id INTO v_org FROM reservations WHERE id = p_id;
    IF FOUND THEN
        PERFORM 1 FROM billing_accounts WHERE org_id = v_org FOR UPDATE;
        DELETE FROM reservations WHERE id = p_id RETURNING * INTO r;
        IF FOUND THEN
            UPDATE billing_accounts SET reserved_credits = reserved_credits - r.credits WHERE org_id = v_org;
            IF r.bucket IS NOT NULL THEN
                UPDATE quota_usage SET reserved_milli = reserved_milli - r.bucket_milli
                 WHERE org_id = v_org AND period_start = r.period_start AND bucket = r.bucket;
            END IF;
            released := true;
        END IF;
    END IF;
    IF u_endpoint IS NOT NULL THEN
        INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits, latency_ms,
                                   status, tools_used, prompt_tokens, completion_tokens, total_tokens, created_at)
        VALUES (p_id, p_org, u_key, u_endpoint, u_method, u_model, 0, u_latency_ms, u_status,
                u_tools, u_prompt, u_completion, u_prompt + u_completion, now())
        ON CONFLICT DO NOTHING;
    END IF;
END
$$;
