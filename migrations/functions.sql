-- Every plpgsql/SQL function of the schema, in its current version. `migrate`
-- applies this file after the migrations, in the same advisory lock, with
-- CREATE OR REPLACE: changing a rule is an edit here, not a migration that
-- re-creates a function whole. (Migrations still create the versions they
-- shipped with; this file replaces them.) A function whose signature
-- changes must be dropped here first.

-- A plan's limit for a bucket: NULL unlimited, 0 not on the plan.
CREATE OR REPLACE FUNCTION unigen_bucket_limit(p plans, bucket text) RETURNS bigint
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
CREATE OR REPLACE FUNCTION unigen_record_event(
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

-- The admission rule every hold shares (unigen_reserve, unigen_reserve_more,
-- unigen_allowance_grow): a quota bucket admits `p_need_milli` only within
-- its limit (0: not on the plan; NULL: unlimited); credits come from the
-- balance, and past it only with overage enabled on a plan that prices it,
-- and never past the hard limit (in-flight holds beyond the balance count as
-- overage too). `p_credits_offset` and `p_milli_offset` are added to what is
-- free (a block counts its own free part as available).
-- outcome: 'ok', 'quota' (remaining: what the bucket has left, in units),
-- 'credits' (remaining: credits left), 'hard_limit'. `avail_credits` and
-- `avail_milli` (NULL when the bucket is unlimited or absent) are what was
-- free for this hold.
CREATE OR REPLACE FUNCTION unigen_admit(
    a billing_accounts, p plans, p_bucket text,
    p_need_credits bigint, p_need_milli bigint,
    p_credits_offset bigint, p_milli_offset bigint,
    OUT outcome text, OUT remaining double precision, OUT hard_limit bigint,
    OUT avail_credits bigint, OUT avail_milli bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    lim bigint;
    q_used bigint := 0;
    q_reserved bigint := 0;
BEGIN
    outcome := 'ok';
    remaining := 0;
    IF p_bucket IS NOT NULL THEN
        lim := unigen_bucket_limit(p, p_bucket);
        IF lim IS NOT NULL THEN
            SELECT q.used_milli, q.reserved_milli INTO q_used, q_reserved FROM quota_usage q
             WHERE q.org_id = a.org_id AND q.period_start = a.period_start AND q.bucket = p_bucket;
            q_used := COALESCE(q_used, 0);
            q_reserved := COALESCE(q_reserved, 0);
            avail_milli := lim * 1000 - q_used - q_reserved + p_milli_offset;
            IF lim = 0 OR p_need_milli > avail_milli THEN
                outcome := 'quota';
                remaining := greatest(avail_milli, 0) / 1000.0;
                RETURN;
            END IF;
        END IF;
    END IF;
    avail_credits := a.included_remaining + a.purchased_balance - a.reserved_credits + p_credits_offset;
    IF p_need_credits > avail_credits THEN
        IF NOT (a.overage_enabled AND p.overage_rate_micros IS NOT NULL) THEN
            outcome := 'credits';
            remaining := greatest(avail_credits, 0);
            RETURN;
        END IF;
        IF a.hard_limit IS NOT NULL AND a.overage_credits + (p_need_credits - avail_credits) > a.hard_limit THEN
            outcome := 'hard_limit';
            hard_limit := a.hard_limit;
            RETURN;
        END IF;
    END IF;
END
$$;

-- After a charge to quota row `q` (as it is after the charge) of a bucket
-- whose plan limit is `lim` units: credits.low once when less than 10% is
-- left, credits.depleted once when nothing is (per period; the row keeps
-- the flags). True when an event was recorded.
CREATE OR REPLACE FUNCTION unigen_bucket_events(q quota_usage, lim bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    rem bigint;
BEGIN
    IF q.org_id IS NULL OR NOT coalesce(lim > 0, false) THEN
        RETURN false;
    END IF;
    rem := greatest(lim * 1000 - q.used_milli, 0);
    IF rem = 0 AND NOT q.depleted_notified THEN
        UPDATE quota_usage qu SET depleted_notified = true, low_notified = true
         WHERE qu.org_id = q.org_id AND qu.period_start = q.period_start AND qu.bucket = q.bucket;
        PERFORM unigen_record_event(gen_random_uuid(), q.org_id, 'credits.depleted', jsonb_build_object(
            'bucketType', q.bucket, 'remaining', 0, 'limit', lim, 'percentUsed', 100.0), clock_timestamp());
        RETURN true;
    ELSIF rem * 100 < lim * 1000 * 10 AND NOT q.low_notified THEN
        UPDATE quota_usage qu SET low_notified = true
         WHERE qu.org_id = q.org_id AND qu.period_start = q.period_start AND qu.bucket = q.bucket;
        PERFORM unigen_record_event(gen_random_uuid(), q.org_id, 'credits.low', jsonb_build_object(
            'bucketType', q.bucket, 'remaining', rem / 1000.0, 'limit', lim,
            'percentUsed', round(least(q.used_milli::numeric / 10 / lim, 100), 1)), clock_timestamp());
        RETURN true;
    END IF;
    RETURN false;
END
$$;

-- After a charge to account `a` (as it is after the charge) on plan `p`:
-- the credits' low (below 10% of what the period allotted) and depleted
-- (nothing left) events, and overage.soft_limit_reached, each once per
-- period (the account keeps the flags). True when an event was recorded.
CREATE OR REPLACE FUNCTION unigen_account_events(a billing_accounts, p plans) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    left_credits bigint := greatest(a.included_remaining + a.purchased_balance, 0);
    allotted bigint := a.included_credits + a.purchased_balance;
    recorded boolean := false;
BEGIN
    IF left_credits = 0 AND allotted > 0 AND NOT a.credits_depleted_notified THEN
        UPDATE billing_accounts ba SET credits_depleted_notified = true, credits_low_notified = true
         WHERE ba.org_id = a.org_id;
        PERFORM unigen_record_event(gen_random_uuid(), a.org_id, 'credits.depleted', jsonb_build_object(
            'bucketType', 'credits', 'remaining', 0, 'limit', allotted, 'percentUsed', 100.0), clock_timestamp());
        recorded := true;
    ELSIF allotted > 0 AND left_credits * 100 < allotted * 10 AND NOT a.credits_low_notified THEN
        UPDATE billing_accounts ba SET credits_low_notified = true WHERE ba.org_id = a.org_id;
        PERFORM unigen_record_event(gen_random_uuid(), a.org_id, 'credits.low', jsonb_build_object(
            'bucketType', 'credits', 'remaining', left_credits, 'limit', allotted,
            'percentUsed', round(least((allotted - left_credits) * 100.0 / allotted, 100), 1)), clock_timestamp());
        recorded := true;
    END IF;
    IF a.soft_limit IS NOT NULL AND a.overage_credits >= a.soft_limit AND NOT a.soft_limit_notified THEN
        UPDATE billing_accounts ba SET soft_limit_notified = true, last_notification_at = now()
         WHERE ba.org_id = a.org_id;
        PERFORM unigen_record_event(gen_random_uuid(), a.org_id, 'overage.soft_limit_reached', jsonb_build_object(
            'overageCredits', a.overage_credits, 'softLimit', a.soft_limit,
            'overageCost', COALESCE(p.overage_rate_micros, 0) * a.overage_credits / 1000000.0), clock_timestamp());
        recorded := true;
    END IF;
    RETURN recorded;
END
$$;

-- Holds `p_credits` and `p_milli` of `p_bucket` for request `p_id`.
-- outcome: 'ok', 'setup', 'quota' (remaining: what the bucket has left, in
-- units), 'credits' (remaining: credits left), 'hard_limit'.
CREATE OR REPLACE FUNCTION unigen_reserve(
    p_org uuid, p_id uuid, p_credits bigint, p_bucket text, p_milli bigint, p_expires timestamptz,
    OUT outcome text, OUT remaining double precision, OUT hard_limit bigint)
LANGUAGE plpgsql AS $$
DECLARE
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
BEGIN
    remaining := 0;
    SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = p_org;
    SELECT * INTO a FROM billing_accounts WHERE org_id = p_org FOR UPDATE;
    IF NOT FOUND OR a.period_end <= now() THEN
        outcome := 'setup';
        RETURN;
    END IF;
    SELECT ad.outcome, ad.remaining, ad.hard_limit INTO outcome, remaining, hard_limit
      FROM unigen_admit(a, p, p_bucket, p_credits, p_milli, 0, 0) ad;
    IF outcome <> 'ok' THEN
        RETURN;
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

-- unigen_reserve for many holds: taken in organization order (the order
-- accounts are locked in everywhere), each item is admitted exactly as if
-- reserved on its own after the ones before it (the batch's earlier holds
-- count against it), but each organization's account
-- row is locked and updated once, each quota bucket row upserted once, and
-- the reservations inserted in one statement. Answers one row per item,
-- `ord` its 1-based position; 'setup' items (no account, or a period that
-- has ended) are left to unigen_reserve's single path.
CREATE OR REPLACE FUNCTION unigen_reserve_many(
    p_orgs uuid[], p_ids uuid[], p_credits bigint[], p_buckets text[], p_millis bigint[],
    p_expires timestamptz[])
RETURNS TABLE (ord bigint, outcome text, remaining double precision, hard_limit bigint)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n int := coalesce(cardinality(p_ids), 0);
    i int;
    cur_org uuid;
    needs_setup boolean := false;
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    held_credits bigint := 0;
    held_milli jsonb := '{}';
    admitted boolean[] := array_fill(false, ARRAY[n]);
    periods timestamptz[] := array_fill(NULL::timestamptz, ARRAY[n]);
    ad record;
BEGIN
    FOR i IN SELECT u.pos::int FROM unnest(p_orgs) WITH ORDINALITY AS u(org, pos)
              ORDER BY u.org, u.pos LOOP
        IF cur_org IS DISTINCT FROM p_orgs[i] THEN
            cur_org := p_orgs[i];
            held_credits := 0;
            held_milli := '{}';
            SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code
             WHERE o.id = cur_org;
            SELECT * INTO a FROM billing_accounts b WHERE b.org_id = cur_org FOR UPDATE;
            needs_setup := NOT FOUND OR a.period_end <= now();
        END IF;
        ord := i;
        remaining := 0;
        hard_limit := NULL;
        IF needs_setup THEN
            outcome := 'setup';
            RETURN NEXT;
            CONTINUE;
        END IF;
        SELECT * INTO ad FROM unigen_admit(a, p, p_buckets[i], p_credits[i], p_millis[i],
            -held_credits,
            -coalesce((held_milli ->> coalesce(p_buckets[i], ''))::bigint, 0));
        outcome := ad.outcome;
        remaining := ad.remaining;
        hard_limit := ad.hard_limit;
        IF ad.outcome = 'ok' THEN
            admitted[i] := true;
            periods[i] := a.period_start;
            held_credits := held_credits + p_credits[i];
            IF p_buckets[i] IS NOT NULL THEN
                held_milli := held_milli || jsonb_build_object(p_buckets[i],
                    coalesce((held_milli ->> p_buckets[i])::bigint, 0) + p_millis[i]);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
    UPDATE billing_accounts b SET reserved_credits = b.reserved_credits + s.total
      FROM (SELECT x.org, sum(x.credits) AS total
              FROM unnest(p_orgs, p_credits, admitted) AS x(org, credits, ok)
             WHERE x.ok GROUP BY x.org) s
     WHERE b.org_id = s.org;
    INSERT INTO quota_usage AS q (org_id, period_start, bucket, reserved_milli)
    SELECT x.org, x.period, x.bucket, sum(x.milli)
      FROM unnest(p_orgs, periods, p_buckets, p_millis, admitted) AS x(org, period, bucket, milli, ok)
     WHERE x.ok AND x.bucket IS NOT NULL
     GROUP BY x.org, x.period, x.bucket
     ORDER BY x.org, x.bucket
    ON CONFLICT (org_id, period_start, bucket)
    DO UPDATE SET reserved_milli = q.reserved_milli + EXCLUDED.reserved_milli;
    INSERT INTO reservations (id, org_id, credits, bucket, bucket_milli, period_start, expires_at)
    SELECT x.id, x.org, x.credits, x.bucket, CASE WHEN x.bucket IS NULL THEN 0 ELSE x.milli END,
           x.period, x.expires
      FROM unnest(p_ids, p_orgs, p_credits, p_buckets, p_millis, periods, p_expires, admitted)
           AS x(id, org, credits, bucket, milli, period, expires, ok)
     WHERE x.ok;
END
$$;

-- Charges reservation `p_id`: credits from included, then purchased, then
-- overage; the bucket in the reservation's period; the ledger rows, the
-- usage record and the billing events (credits.low / credits.depleted per
-- bucket and for the credits, overage.soft_limit_reached).
-- outcome: 'ok', 'gone' (already settled or released), 'setup'.
CREATE OR REPLACE FUNCTION unigen_settle(
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
    credits bigint := greatest(p_credits, 0);
    meta jsonb;
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
    -- Never more than admission allowed: what was reserved (grown by
    -- unigen_reserve_more) passed the quota, balance, overage and hard-limit
    -- checks; a larger measured use (a transcription longer than its probe
    -- said) is not charged beyond it.
    credits := least(credits, r.credits);
    p_milli := least(greatest(p_milli, 0), r.bucket_milli);
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
        IF unigen_bucket_events(q, lim) THEN
            events_recorded := true;
        END IF;
    END IF;
    INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits, latency_ms,
                               status, tools_used, prompt_tokens, completion_tokens, total_tokens, created_at)
    VALUES (p_id, v_org, u_key, u_endpoint, u_method, u_model, credits, u_latency_ms, 'success',
            u_tools, u_prompt, u_completion, u_prompt + u_completion, now())
    ON CONFLICT DO NOTHING;
    IF unigen_account_events(a, p) THEN
        events_recorded := true;
    END IF;
    credits_remaining := greatest(a.included_remaining + a.purchased_balance - a.reserved_credits, 0);
    overage_enabled := a.overage_enabled;
    overage_credits := a.overage_credits;
    overage_rate_micros := p.overage_rate_micros;
    outcome := 'ok';
END
$$;

-- unigen_settle for a batch of reservations (finished jobs'): each item is
-- charged exactly as unigen_settle charges it alone after the ones before
-- it, but each organization's account row is locked and updated once (in
-- organization order), each quota bucket row once, and the ledger rows and
-- usage records are inserted in one statement each. The account row is the
-- one every submission of the organization locks too, so the less time a
-- settlement holds it, the less they wait. Answers one row per item, `ord`
-- its 1-based position: 'ok', 'gone' (already settled or released) or
-- 'setup' (no account, or an ended period: nothing of it was written; the
-- single path sets the account up and settles it).
CREATE OR REPLACE FUNCTION unigen_settle_many(
    p_ids uuid[], p_credits bigint[], p_millis bigint[],
    u_keys uuid[], u_endpoints text[], u_methods text[], u_models text[], u_latencies bigint[],
    u_tools jsonb[], u_prompts bigint[], u_completions bigint[])
RETURNS TABLE (
    ord bigint, outcome text, from_included bigint, from_purchased bigint, overage bigint,
    bucket text, remaining_milli bigint, credits_remaining bigint, overage_enabled boolean,
    overage_credits bigint, overage_rate_micros bigint, events_recorded boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    n int := coalesce(cardinality(p_ids), 0);
    orgs uuid[] := array_fill(NULL::uuid, ARRAY[n]);
    v_org uuid;
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    q quota_usage%ROWTYPE;
    it record;
    -- This organization's reservations, deleted under its account lock.
    r_ids uuid[];
    r_c bigint[];
    r_b text[];
    r_m bigint[];
    r_period timestamptz[];
    ri int;
    -- This organization's buckets: period, bucket, its limit, used and
    -- reserved before the batch, used added and reserved released by it.
    k_period timestamptz[];
    k_bucket text[];
    k_lim bigint[];
    k_base_used bigint[];
    k_base_reserved bigint[];
    k_used bigint[];
    k_released bigint[];
    -- Whether its row exists, and its low and depleted flags as they stand.
    k_exists boolean[];
    k_low boolean[];
    k_depleted boolean[];
    base_used bigint;
    base_reserved bigint;
    base_low boolean;
    base_depleted boolean;
    k int;
    j int;
    -- Per item.
    o_outcome text[] := array_fill('gone'::text, ARRAY[n]);
    o_charged bigint[] := array_fill(0::bigint, ARRAY[n]);
    o_incl bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_purch bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_over bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_bucket text[] := array_fill(NULL::text, ARRAY[n]);
    o_remaining bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_credits_left bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_over_enabled boolean[] := array_fill(NULL::boolean, ARRAY[n]);
    o_over_credits bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_rate bigint[] := array_fill(NULL::bigint, ARRAY[n]);
    o_events boolean[] := array_fill(false, ARRAY[n]);
    -- Ledger rows, for the whole batch.
    l_org uuid[] := '{}';
    l_type text[] := '{}';
    l_amount bigint[] := '{}';
    l_balance bigint[] := '{}';
    l_desc text[] := '{}';
    l_meta jsonb[] := '{}';
    -- Running balances of the organization being settled.
    incl bigint;
    purch bigint;
    ovr bigint;
    reserved bigint;
    credits bigint;
    milli bigint;
    f_incl bigint;
    f_purch bigint;
    f_over bigint;
    meta jsonb;
    org_events boolean;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    -- A reservation's organization never changes: read without a lock.
    FOR it IN SELECT x.n, res.org_id FROM unnest(p_ids) WITH ORDINALITY AS x(id, n)
                JOIN reservations res ON res.id = x.id LOOP
        orgs[it.n] := it.org_id;
    END LOOP;
    FOR v_org IN SELECT DISTINCT x.org FROM unnest(orgs) AS x(org) WHERE x.org IS NOT NULL ORDER BY 1 LOOP
        SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = v_org;
        SELECT * INTO a FROM billing_accounts ba WHERE ba.org_id = v_org FOR UPDATE;
        IF NOT FOUND OR a.period_end <= now() THEN
            FOR j IN 1..n LOOP
                IF orgs[j] = v_org THEN
                    o_outcome[j] := 'setup';
                END IF;
            END LOOP;
            CONTINUE;
        END IF;
        -- Deleted under the account lock: a racing settle or release finds nothing.
        WITH d AS (
            DELETE FROM reservations res
             WHERE res.org_id = v_org
               AND res.id IN (SELECT x.id FROM unnest(p_ids, orgs) AS x(id, org) WHERE x.org = v_org)
            RETURNING res.id, res.credits, res.bucket, res.bucket_milli, res.period_start)
        SELECT array_agg(d.id), array_agg(d.credits), array_agg(d.bucket), array_agg(d.bucket_milli),
               array_agg(d.period_start)
          INTO r_ids, r_c, r_b, r_m, r_period
          FROM d;
        IF r_ids IS NULL THEN
            CONTINUE;
        END IF;
        k_period := '{}'; k_bucket := '{}'; k_lim := '{}'; k_base_used := '{}';
        k_base_reserved := '{}'; k_used := '{}'; k_released := '{}';
        k_exists := '{}'; k_low := '{}'; k_depleted := '{}';
        org_events := false;
        incl := a.included_remaining;
        purch := a.purchased_balance;
        ovr := a.overage_credits;
        reserved := a.reserved_credits;
        FOR it IN
            SELECT x.n, x.id, x.credits, x.milli, x.endpoint, x.model
              FROM unnest(p_ids, p_credits, p_millis, u_endpoints, u_models)
                   WITH ORDINALITY AS x(id, credits, milli, endpoint, model, n)
             WHERE orgs[x.n] = v_org
             ORDER BY x.n
        LOOP
            ri := array_position(r_ids, it.id);
            IF ri IS NULL THEN
                CONTINUE;
            END IF;
            -- Consumed: the same id twice in a batch is settled once.
            r_ids[ri] := NULL;
            -- Never more than admission allowed (see unigen_settle).
            credits := least(greatest(it.credits, 0), r_c[ri]);
            milli := least(greatest(it.milli, 0), r_m[ri]);
            f_incl := least(credits, incl);
            f_purch := least(credits - f_incl, purch);
            f_over := credits - f_incl - f_purch;
            incl := incl - f_incl;
            purch := purch - f_purch;
            ovr := ovr + f_over;
            reserved := reserved - r_c[ri];
            meta := jsonb_build_object('request_id', it.id, 'model', it.model, 'endpoint', it.endpoint);
            IF f_incl + f_purch > 0 THEN
                l_org := l_org || v_org;
                l_type := l_type || 'consumption'::text;
                l_amount := l_amount || (-(f_incl + f_purch));
                l_balance := l_balance || (incl + purch - (ovr - f_over));
                l_desc := l_desc || (it.endpoint || ' ' || it.model);
                l_meta := l_meta || (meta || jsonb_build_object('included', f_incl, 'purchased', f_purch));
            END IF;
            IF f_over > 0 THEN
                l_org := l_org || v_org;
                l_type := l_type || 'overage'::text;
                l_amount := l_amount || (-f_over);
                l_balance := l_balance || (incl + purch - ovr);
                l_desc := l_desc || ('Overage: ' || it.endpoint || ' ' || it.model);
                l_meta := l_meta || (meta || jsonb_build_object(
                    'rate', COALESCE(p.overage_rate_micros, 0) / 1000000.0,
                    'cost', COALESCE(p.overage_rate_micros, 0) * f_over / 1000000.0,
                    'billing_status', 'pending'));
            END IF;
            IF r_b[ri] IS NOT NULL THEN
                k := NULL;
                FOR j IN 1..coalesce(array_length(k_bucket, 1), 0) LOOP
                    IF k_bucket[j] = r_b[ri] AND k_period[j] = r_period[ri] THEN
                        k := j;
                    END IF;
                END LOOP;
                IF k IS NULL THEN
                    SELECT qu.used_milli, qu.reserved_milli, qu.low_notified, qu.depleted_notified
                      INTO base_used, base_reserved, base_low, base_depleted
                      FROM quota_usage qu
                     WHERE qu.org_id = v_org AND qu.period_start = r_period[ri] AND qu.bucket = r_b[ri];
                    k_exists := k_exists || FOUND;
                    k_low := k_low || coalesce(base_low, false);
                    k_depleted := k_depleted || coalesce(base_depleted, false);
                    k_period := k_period || r_period[ri];
                    k_bucket := k_bucket || r_b[ri];
                    k_lim := k_lim || unigen_bucket_limit(p, r_b[ri]);
                    k_base_used := k_base_used || coalesce(base_used, 0);
                    k_base_reserved := k_base_reserved || coalesce(base_reserved, 0);
                    k_used := k_used || 0::bigint;
                    k_released := k_released || 0::bigint;
                    k := array_length(k_bucket, 1);
                END IF;
                k_used[k] := k_used[k] + milli;
                k_released[k] := k_released[k] + r_m[ri];
                -- What the bucket has left after this item, as unigen_settle answers it.
                IF k_lim[k] IS NOT NULL THEN
                    o_remaining[it.n] := greatest(k_lim[k] * 1000 - (k_base_used[k] + k_used[k])
                        - (k_base_reserved[k] - k_released[k]), 0);
                END IF;
                -- Its events as after this item alone (a batch that crosses
                -- 10% and then 0 announces both, in that order).
                -- (Only near a threshold: the helper is a call per item.)
                IF k_exists[k] AND k_lim[k] > 0 AND NOT k_depleted[k]
                   AND (k_lim[k] * 1000 - k_base_used[k] - k_used[k]) * 10 < k_lim[k] * 1000 THEN
                    q.org_id := v_org;
                    q.period_start := k_period[k];
                    q.bucket := k_bucket[k];
                    q.used_milli := k_base_used[k] + k_used[k];
                    q.reserved_milli := k_base_reserved[k] - k_released[k];
                    q.low_notified := k_low[k];
                    q.depleted_notified := k_depleted[k];
                    IF unigen_bucket_events(q, k_lim[k]) THEN
                        org_events := true;
                        SELECT qu.low_notified, qu.depleted_notified INTO base_low, base_depleted
                          FROM quota_usage qu
                         WHERE qu.org_id = v_org AND qu.period_start = k_period[k] AND qu.bucket = k_bucket[k];
                        k_low[k] := base_low;
                        k_depleted[k] := base_depleted;
                    END IF;
                END IF;
            END IF;
            -- The account's events, likewise as after this item alone.
            a.included_remaining := incl;
            a.purchased_balance := purch;
            a.overage_credits := ovr;
            IF ((NOT a.credits_depleted_notified
                 AND greatest(incl + purch, 0) * 10 < a.included_credits + purch)
                OR (a.soft_limit IS NOT NULL AND ovr >= a.soft_limit AND NOT a.soft_limit_notified))
               AND unigen_account_events(a, p) THEN
                org_events := true;
                SELECT ba.credits_low_notified, ba.credits_depleted_notified, ba.soft_limit_notified
                  INTO a.credits_low_notified, a.credits_depleted_notified, a.soft_limit_notified
                  FROM billing_accounts ba WHERE ba.org_id = v_org;
            END IF;
            o_outcome[it.n] := 'ok';
            o_charged[it.n] := credits;
            o_incl[it.n] := f_incl;
            o_purch[it.n] := f_purch;
            o_over[it.n] := f_over;
            o_bucket[it.n] := r_b[ri];
            o_credits_left[it.n] := greatest(incl + purch - reserved, 0);
            o_over_enabled[it.n] := a.overage_enabled;
            o_over_credits[it.n] := ovr;
            o_rate[it.n] := p.overage_rate_micros;
        END LOOP;

        UPDATE billing_accounts ba SET included_remaining = incl, purchased_balance = purch,
               overage_credits = ovr, reserved_credits = reserved
         WHERE ba.org_id = v_org;
        FOR j IN 1..coalesce(array_length(k_bucket, 1), 0) LOOP
            UPDATE quota_usage qu SET used_milli = qu.used_milli + k_used[j],
                   reserved_milli = qu.reserved_milli - k_released[j]
             WHERE qu.org_id = v_org AND qu.period_start = k_period[j] AND qu.bucket = k_bucket[j];
        END LOOP;
        FOR j IN 1..n LOOP
            IF orgs[j] = v_org AND o_outcome[j] = 'ok' THEN
                o_events[j] := org_events;
            END IF;
        END LOOP;
    END LOOP;

    INSERT INTO credit_transactions (id, org_id, type, amount, balance_after, description, metadata, created_at)
    SELECT gen_random_uuid(), x.org, x.kind, x.amount, x.balance, x.description, x.meta, clock_timestamp()
      FROM unnest(l_org, l_type, l_amount, l_balance, l_desc, l_meta)
           AS x(org, kind, amount, balance, description, meta);
    INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits, latency_ms,
                               status, tools_used, prompt_tokens, completion_tokens, total_tokens, created_at)
    SELECT x.id, x.org, x.key, x.endpoint, x.method, x.model, x.charged, x.latency, 'success',
           ARRAY(SELECT jsonb_array_elements_text(x.tools)), x.prompt, x.completion,
           x.prompt + x.completion, now()
      FROM unnest(p_ids, orgs, u_keys, u_endpoints, u_methods, u_models, u_latencies, u_tools,
                  u_prompts, u_completions, o_charged, o_outcome)
           AS x(id, org, key, endpoint, method, model, latency, tools, prompt, completion, charged, outcome)
     WHERE x.outcome = 'ok'
    ON CONFLICT DO NOTHING;

    RETURN QUERY
    SELECT o.n, o.outcome, o.incl, o.purch, o.ovg, o.bkt, o.remaining, o.credits_left,
           o.over_enabled, o.over_credits, o.rate, o.events
      FROM unnest(o_outcome, o_incl, o_purch, o_over, o_bucket, o_remaining,
                  o_credits_left, o_over_enabled, o_over_credits, o_rate, o_events)
           WITH ORDINALITY AS o(outcome, incl, purch, ovg, bkt, remaining, credits_left,
                                over_enabled, over_credits, rate, events, n)
     ORDER BY o.n;
END
$$;

-- Gives reservation `p_id` back without charging; records the request's
-- usage row (zero credits, `u_status`) when one is given (`u_endpoint`).
CREATE OR REPLACE FUNCTION unigen_release(
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

-- Grows an open reservation by p_credits under the same rules as
-- unigen_reserve: an agent run reserves its base price when it starts, then
-- each model turn and tool call before it happens, so a run never spends
-- credits the organization does not have. 'missing': the reservation is gone
-- (settled, released or expired).
CREATE OR REPLACE FUNCTION unigen_reserve_more(
    p_id uuid, p_credits bigint,
    OUT outcome text, OUT remaining double precision, OUT hard_limit bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_org uuid;
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
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
    SELECT ad.outcome, ad.remaining, ad.hard_limit INTO outcome, remaining, hard_limit
      FROM unigen_admit(a, p, NULL, p_credits, 0, 0, 0) ad;
    IF outcome <> 'ok' THEN
        RETURN;
    END IF;
    UPDATE billing_accounts SET reserved_credits = reserved_credits + p_credits WHERE org_id = v_org;
    UPDATE reservations SET credits = credits + p_credits WHERE id = p_id;
    outcome := 'ok';
END
$$;

-- API processes cache verified keys (with their organization and plan) for
-- a few seconds. Any change to those rows, by the API, the admin commands
-- or an operator in psql, tells every process to drop its cache at once.
CREATE OR REPLACE FUNCTION unigen_auth_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('unigen_auth', TG_TABLE_NAME);
    RETURN NULL;
END
$$;

-- Takes up to `wanted` request tokens of a key at once, for an API process
-- that admits requests from a local block instead of one statement each.
-- Same cell rate algorithm as unigen_take_rate_token (a burst of the plan's
-- per-minute rate, then one token per interval). granted = 0: refused,
-- tat tells when the next token is due; granted >= 1: tat is the new
-- theoretical arrival time (what is left, and when the burst is whole again).
CREATE OR REPLACE FUNCTION unigen_take_rate_tokens(
    key uuid, interval_us bigint, wanted integer,
    OUT granted integer, OUT tat timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    now_ts timestamptz := clock_timestamp();
    base timestamptz;
BEGIN
    INSERT INTO rate_limits (api_key_id, tat) VALUES (key, now_ts)
    ON CONFLICT (api_key_id) DO NOTHING;
    SELECT r.tat INTO tat FROM rate_limits r WHERE r.api_key_id = key FOR UPDATE;
    base := greatest(tat, now_ts);
    granted := least(wanted::bigint,
        floor(extract(epoch FROM (now_ts + interval '60 seconds' - base)) * 1e6 / interval_us))::integer;
    IF granted >= 1 THEN
        tat := base + make_interval(secs => granted * interval_us / 1e6);
        UPDATE rate_limits r SET tat = unigen_take_rate_tokens.tat
         WHERE r.api_key_id = key;
    ELSE
        granted := 0;
    END IF;
END
$$;

-- Resizes allowance `p_id` to keep + need + extra: `keep` is what requests
-- admitted from it still hold, `need` what the request being admitted
-- needs (refused, changing nothing, when it does not fit: the block's own
-- free part counts as available), `extra` what the process would like
-- beyond it, granted up to an eighth of what would be left (a block idle
-- in one process keeps little from jobs and other processes). outcome:
-- 'ok', 'setup' (no account or an ended period: set it up and call again),
-- 'stale' (the block belongs to an ended period: start another),
-- 'quota', 'credits', 'hard_limit' as unigen_reserve.
CREATE OR REPLACE FUNCTION unigen_allowance_grow(
    p_id uuid, p_org uuid, p_bucket text,
    p_keep_credits bigint, p_keep_milli bigint,
    p_need_credits bigint, p_need_milli bigint,
    p_extra_credits bigint, p_extra_milli bigint,
    p_expires timestamptz,
    OUT outcome text, OUT remaining double precision, OUT hard_limit bigint,
    OUT held_credits bigint, OUT held_milli bigint,
    OUT held_period_start timestamptz, OUT held_period_end timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    r reservations%ROWTYPE;
    found_row boolean;
    cur_c bigint := 0;
    cur_m bigint := 0;
    avail bigint;
    avail_m bigint;
    room bigint;
    extra_c bigint := 0;
    extra_m bigint := 0;
BEGIN
    remaining := 0;
    SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = p_org;
    SELECT * INTO a FROM billing_accounts WHERE org_id = p_org FOR UPDATE;
    IF NOT FOUND OR a.period_end <= now() THEN
        outcome := 'setup';
        RETURN;
    END IF;
    -- The account lock comes first, as everywhere.
    SELECT * INTO r FROM reservations WHERE id = p_id FOR UPDATE;
    found_row := FOUND;
    IF found_row THEN
        IF r.period_start <> a.period_start THEN
            outcome := 'stale';
            RETURN;
        END IF;
        cur_c := r.credits;
        cur_m := r.bucket_milli;
    END IF;
    SELECT ad.outcome, ad.remaining, ad.hard_limit, ad.avail_credits, ad.avail_milli
      INTO outcome, remaining, hard_limit, avail, avail_m
      FROM unigen_admit(a, p, p_bucket, p_need_credits, p_need_milli,
                        cur_c - p_keep_credits, cur_m - p_keep_milli) ad;
    IF outcome <> 'ok' THEN
        RETURN;
    END IF;
    IF p_bucket IS NOT NULL THEN
        extra_m := CASE WHEN avail_m IS NULL THEN p_extra_milli
                        ELSE least(p_extra_milli, (avail_m - p_need_milli) / 8) END;
    END IF;
    -- What would be left after this request: the balance, plus the overage
    -- still allowed (unbounded without a hard limit).
    room := avail - p_need_credits;
    IF a.overage_enabled AND p.overage_rate_micros IS NOT NULL THEN
        room := CASE WHEN a.hard_limit IS NULL THEN NULL
                     ELSE room + a.hard_limit - a.overage_credits END;
    END IF;
    extra_c := CASE WHEN room IS NULL THEN p_extra_credits
                    ELSE least(p_extra_credits, greatest(room, 0) / 8) END;
    held_credits := p_keep_credits + p_need_credits + extra_c;
    held_milli := CASE WHEN p_bucket IS NULL THEN 0
                       ELSE p_keep_milli + p_need_milli + greatest(extra_m, 0) END;
    UPDATE billing_accounts SET reserved_credits = reserved_credits + (held_credits - cur_c)
     WHERE org_id = p_org;
    IF p_bucket IS NOT NULL AND held_milli <> cur_m THEN
        UPDATE quota_usage q SET reserved_milli = q.reserved_milli + (held_milli - cur_m)
         WHERE q.org_id = p_org AND q.period_start = a.period_start AND q.bucket = p_bucket;
        IF NOT FOUND THEN
            INSERT INTO quota_usage (org_id, period_start, bucket, reserved_milli)
            VALUES (p_org, a.period_start, p_bucket, held_milli - cur_m);
        END IF;
    END IF;
    IF found_row THEN
        UPDATE reservations SET credits = held_credits, bucket_milli = held_milli, expires_at = p_expires
         WHERE id = p_id;
    ELSE
        INSERT INTO reservations (id, org_id, credits, bucket, bucket_milli, period_start, expires_at)
        VALUES (p_id, p_org, held_credits, p_bucket, held_milli, a.period_start, p_expires);
    END IF;
    held_period_start := a.period_start;
    held_period_end := a.period_end;
    outcome := 'ok';
END
$$;

-- Records sync requests' charges (recorded_charges) for a later
-- settlement; a request already recorded is left as it is. Without
-- p_flush, the statement's commit does not wait for the WAL flush: the
-- setting is transaction-local, so it lasts until the commit right after.
CREATE OR REPLACE FUNCTION unigen_record_charges(
    p_flush boolean, i_request uuid[], i_allowance uuid[], i_org uuid[], i_period timestamptz[],
    i_bucket text[], i_hold_credits bigint[], i_hold_milli bigint[], i_credits bigint[],
    i_milli bigint[], i_multiplier double precision[], i_key uuid[], i_endpoint text[],
    i_method text[], i_model text[], i_latency bigint[], i_status text[], i_tools jsonb[],
    i_prompt bigint[], i_completion bigint[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    n integer;
BEGIN
    IF NOT p_flush THEN
        PERFORM set_config('synchronous_commit', 'off', true);
    END IF;
    INSERT INTO recorded_charges
        (request_id, allowance_id, org_id, period_start, bucket, hold_credits, hold_milli,
         credits, bucket_milli, multiplier, api_key_id, endpoint, method, model, latency_ms,
         status, tools_used, prompt_tokens, completion_tokens)
    SELECT * FROM unnest(i_request, i_allowance, i_org, i_period, i_bucket, i_hold_credits,
                         i_hold_milli, i_credits, i_milli, i_multiplier, i_key, i_endpoint,
                         i_method, i_model, i_latency, i_status, i_tools, i_prompt, i_completion)
    ON CONFLICT (request_id) DO NOTHING;
    GET DIAGNOSTICS n = ROW_COUNT;
    RETURN n;
END
$$;

-- Gives back what allowance `p_id` holds beyond `keep` (what admitted
-- requests still hold); with nothing kept, the row goes. A missing row
-- (released after its lease expired) is left missing.
CREATE OR REPLACE FUNCTION unigen_allowance_shrink(p_id uuid, p_keep_credits bigint, p_keep_milli bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_org uuid;
    r reservations%ROWTYPE;
    keep_c bigint;
    keep_m bigint;
BEGIN
    SELECT org_id INTO v_org FROM reservations WHERE id = p_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    PERFORM 1 FROM billing_accounts WHERE org_id = v_org FOR UPDATE;
    SELECT * INTO r FROM reservations WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    keep_c := least(greatest(p_keep_credits, 0), r.credits);
    keep_m := least(greatest(p_keep_milli, 0), r.bucket_milli);
    UPDATE billing_accounts SET reserved_credits = reserved_credits - (r.credits - keep_c)
     WHERE org_id = v_org;
    IF r.bucket IS NOT NULL AND r.bucket_milli > keep_m THEN
        UPDATE quota_usage q SET reserved_milli = q.reserved_milli - (r.bucket_milli - keep_m)
         WHERE q.org_id = v_org AND q.period_start = r.period_start AND q.bucket = r.bucket;
    END IF;
    IF keep_c = 0 AND keep_m = 0 THEN
        DELETE FROM reservations WHERE id = p_id;
    ELSE
        UPDATE reservations SET credits = keep_c, bucket_milli = keep_m WHERE id = p_id;
    END IF;
END
$$;

-- Settles a batch of requests admitted from allowances: each item is
-- charged exactly as unigen_settle charges a request (included credits,
-- then purchased, then overage; its bucket in the allowance's period; its
-- ledger rows and usage record; never more than admission allowed, its
-- hold, as unigen_settle never charges past its reservation), its charge
-- taken out of its allowance's
-- hold up to what it held. Each organization's account is locked once, in
-- organization order, and updated once; ledger rows and usage records are
-- inserted in one statement each. An item whose allowance row is gone
-- (expired and released) is charged without a hold. Items with status
-- 'failed' charge nothing and only record their usage row.
-- outcome per item: 'ok', or 'setup' (no account or an ended period: set it
-- up and settle that item again; nothing of it was written).
CREATE OR REPLACE FUNCTION unigen_settle_shares(
    i_allowance uuid[], i_org uuid[], i_period timestamptz[], i_bucket text[],
    i_hold_credits bigint[], i_hold_milli bigint[], i_credits bigint[], i_milli bigint[],
    i_request uuid[], i_key uuid[], i_endpoint text[], i_method text[], i_model text[],
    i_latency bigint[], i_status text[], i_tools jsonb[], i_prompt bigint[], i_completion bigint[])
RETURNS TABLE (
    ord bigint, outcome text, from_included bigint, from_purchased bigint, overage bigint,
    bucket text, remaining_milli bigint, credits_remaining bigint, overage_enabled boolean,
    overage_credits bigint, overage_rate_micros bigint, events_recorded boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_org uuid;
    a billing_accounts%ROWTYPE;
    p plans%ROWTYPE;
    q quota_usage%ROWTYPE;
    it record;
    -- This organization's allowances in the batch: id, credits, milli left.
    r_ids uuid[];
    r_b text[];
    r_c bigint[];
    r_m bigint[];
    -- This organization's buckets touched: period, bucket, used added, reserved released, remaining.
    k_period timestamptz[];
    k_bucket text[];
    k_used bigint[];
    k_released bigint[];
    k_remaining bigint[];
    k int;
    ri int;
    -- Results, for the whole batch.
    o_ord bigint[] := '{}';
    o_outcome text[] := '{}';
    o_credits bigint[] := '{}';
    o_incl bigint[] := '{}';
    o_purch bigint[] := '{}';
    o_over bigint[] := '{}';
    o_bucket text[] := '{}';
    o_k int[] := '{}';
    o_remaining bigint[] := '{}';
    o_credits_left bigint[] := '{}';
    o_over_enabled boolean[] := '{}';
    o_over_credits bigint[] := '{}';
    o_rate bigint[] := '{}';
    o_events boolean[] := '{}';
    org_first int;
    -- Ledger rows, for the whole batch.
    l_org uuid[] := '{}';
    l_type text[] := '{}';
    l_amount bigint[] := '{}';
    l_balance bigint[] := '{}';
    l_desc text[] := '{}';
    l_meta jsonb[] := '{}';
    -- Running balances of the organization being settled.
    incl bigint;
    purch bigint;
    ovr bigint;
    reserved bigint;
    blocks_c bigint;
    credits bigint;
    milli bigint;
    hold_c bigint;
    hold_m bigint;
    f_incl bigint;
    f_purch bigint;
    f_over bigint;
    meta jsonb;
    lim bigint;
    org_events boolean;
    n int;
BEGIN
    FOR v_org IN SELECT DISTINCT x.org FROM unnest(i_org) AS x(org) ORDER BY 1 LOOP
        SELECT pl.* INTO p FROM organizations o JOIN plans pl ON pl.code = o.plan_code WHERE o.id = v_org;
        SELECT * INTO a FROM billing_accounts ba WHERE ba.org_id = v_org FOR UPDATE;
        IF NOT FOUND OR a.period_end <= now() THEN
            FOR it IN SELECT x.n FROM unnest(i_org) WITH ORDINALITY AS x(org, n) WHERE x.org = v_org LOOP
                o_ord := o_ord || it.n;
                o_outcome := o_outcome || 'setup'::text;
                o_credits := o_credits || 0::bigint;
                o_incl := o_incl || NULL::bigint;
                o_purch := o_purch || NULL::bigint;
                o_over := o_over || NULL::bigint;
                o_bucket := o_bucket || NULL::text;
                o_k := o_k || NULL::int;
                o_remaining := o_remaining || NULL::bigint;
                o_credits_left := o_credits_left || NULL::bigint;
                o_over_enabled := o_over_enabled || NULL::boolean;
                o_over_credits := o_over_credits || NULL::bigint;
                o_rate := o_rate || NULL::bigint;
                o_events := o_events || false;
            END LOOP;
            CONTINUE;
        END IF;
        SELECT array_agg(s.id), array_agg(s.bucket), array_agg(s.credits), array_agg(s.bucket_milli)
          INTO r_ids, r_b, r_c, r_m
          FROM (SELECT res.id, res.bucket, res.credits, res.bucket_milli FROM reservations res
                 WHERE res.id IN (SELECT DISTINCT x.a FROM unnest(i_allowance, i_org) AS x(a, org)
                                   WHERE x.org = v_org)
                 ORDER BY res.id FOR UPDATE) s;
        -- The organization's other blocks for sync requests (other processes',
        -- or this one's for another bucket): like the batch's own, credits
        -- held for requests like these, not spent.
        SELECT coalesce(sum(res.credits), 0) INTO blocks_c FROM reservations res
         WHERE res.org_id = v_org AND res.expires_at IS NOT NULL
           AND res.id <> ALL (coalesce(r_ids, '{}'));
        k_period := '{}'; k_bucket := '{}'; k_used := '{}'; k_released := '{}'; k_remaining := '{}';
        incl := a.included_remaining;
        purch := a.purchased_balance;
        ovr := a.overage_credits;
        reserved := a.reserved_credits;
        org_first := coalesce(array_length(o_ord, 1), 0) + 1;
        FOR it IN
            SELECT x.n, x.allowance, x.period, x.bkt, x.hold_c, x.hold_m, x.credits, x.milli,
                   x.request, x.endpoint, x.model, x.status
              FROM unnest(i_allowance, i_org, i_period, i_bucket, i_hold_credits, i_hold_milli,
                          i_credits, i_milli, i_request, i_endpoint, i_model, i_status)
                   WITH ORDINALITY AS x(allowance, org, period, bkt, hold_c, hold_m, credits, milli,
                                        request, endpoint, model, status, n)
             WHERE x.org = v_org
             ORDER BY x.n
        LOOP
            IF it.status = 'success' THEN
                credits := greatest(it.credits, 0);
                milli := greatest(it.milli, 0);
            ELSE
                credits := 0;
                milli := 0;
            END IF;
            -- Never more than admission allowed, as unigen_settle: what this
            -- request held passed the quota, balance, overage and hard-limit
            -- checks; usage beyond it (an upstream that counted more than the
            -- estimate) is not charged, in credits or in its bucket.
            credits := least(credits, greatest(it.hold_c, 0));
            milli := least(milli, greatest(it.hold_m, 0));
            -- Out of the allowance's hold, up to what this request held.
            hold_c := 0;
            hold_m := 0;
            ri := array_position(r_ids, it.allowance);
            IF ri IS NOT NULL AND it.status = 'success' THEN
                hold_c := least(credits, greatest(it.hold_c, 0), r_c[ri]);
                hold_m := least(milli, greatest(it.hold_m, 0), r_m[ri]);
                r_c[ri] := r_c[ri] - hold_c;
                r_m[ri] := r_m[ri] - hold_m;
            END IF;
            f_incl := least(credits, incl);
            f_purch := least(credits - f_incl, purch);
            f_over := credits - f_incl - f_purch;
            incl := incl - f_incl;
            purch := purch - f_purch;
            ovr := ovr + f_over;
            reserved := reserved - hold_c;
            meta := jsonb_build_object('request_id', it.request, 'model', it.model, 'endpoint', it.endpoint);
            IF f_incl + f_purch > 0 THEN
                l_org := l_org || v_org;
                l_type := l_type || 'consumption'::text;
                l_amount := l_amount || (-(f_incl + f_purch));
                l_balance := l_balance || (incl + purch - (ovr - f_over));
                l_desc := l_desc || (it.endpoint || ' ' || it.model);
                l_meta := l_meta || (meta || jsonb_build_object('included', f_incl, 'purchased', f_purch));
            END IF;
            IF f_over > 0 THEN
                l_org := l_org || v_org;
                l_type := l_type || 'overage'::text;
                l_amount := l_amount || (-f_over);
                l_balance := l_balance || (incl + purch - ovr);
                l_desc := l_desc || ('Overage: ' || it.endpoint || ' ' || it.model);
                l_meta := l_meta || (meta || jsonb_build_object(
                    'rate', COALESCE(p.overage_rate_micros, 0) / 1000000.0,
                    'cost', COALESCE(p.overage_rate_micros, 0) * f_over / 1000000.0,
                    'billing_status', 'pending'));
            END IF;
            k := NULL;
            IF it.bkt IS NOT NULL THEN
                FOR n IN 1..coalesce(array_length(k_bucket, 1), 0) LOOP
                    IF k_bucket[n] = it.bkt AND k_period[n] = it.period THEN
                        k := n;
                    END IF;
                END LOOP;
                IF k IS NULL THEN
                    k_period := k_period || it.period;
                    k_bucket := k_bucket || it.bkt;
                    k_used := k_used || 0::bigint;
                    k_released := k_released || 0::bigint;
                    k_remaining := k_remaining || NULL::bigint;
                    k := array_length(k_bucket, 1);
                END IF;
                k_used[k] := k_used[k] + milli;
                k_released[k] := k_released[k] + hold_m;
            END IF;
            o_ord := o_ord || it.n;
            o_outcome := o_outcome || 'ok'::text;
            o_credits := o_credits || credits;
            o_incl := o_incl || f_incl;
            o_purch := o_purch || f_purch;
            o_over := o_over || f_over;
            o_bucket := o_bucket || it.bkt;
            o_k := o_k || k;
            o_remaining := o_remaining || NULL::bigint;
            -- What is left for the caller: the balance less the jobs'
            -- reservations (blocks for sync requests hold credits for
            -- requests like this one, not spent ones).
            o_credits_left := o_credits_left || greatest(
                incl + purch - reserved + blocks_c
                + (SELECT coalesce(sum(v), 0) FROM unnest(r_c) AS v), 0);
            o_over_enabled := o_over_enabled || a.overage_enabled;
            o_over_credits := o_over_credits || ovr;
            o_rate := o_rate || p.overage_rate_micros;
            o_events := o_events || false;
        END LOOP;

        UPDATE billing_accounts ba SET included_remaining = incl, purchased_balance = purch,
               overage_credits = ovr, reserved_credits = reserved
         WHERE ba.org_id = v_org RETURNING * INTO a;
        IF r_ids IS NOT NULL THEN
            UPDATE reservations res SET credits = x.c, bucket_milli = x.m
              FROM unnest(r_ids, r_c, r_m) AS x(id, c, m)
             WHERE res.id = x.id AND (res.credits <> x.c OR res.bucket_milli <> x.m);
        END IF;
        org_events := false;
        FOR n IN 1..coalesce(array_length(k_bucket, 1), 0) LOOP
            UPDATE quota_usage qu SET used_milli = qu.used_milli + k_used[n],
                   reserved_milli = qu.reserved_milli - k_released[n]
             WHERE qu.org_id = v_org AND qu.period_start = k_period[n] AND qu.bucket = k_bucket[n]
            RETURNING * INTO q;
            IF NOT FOUND THEN
                INSERT INTO quota_usage (org_id, period_start, bucket, used_milli)
                VALUES (v_org, k_period[n], k_bucket[n], k_used[n])
                RETURNING * INTO q;
            END IF;
            lim := unigen_bucket_limit(p, k_bucket[n]);
            IF lim IS NOT NULL THEN
                -- Less the jobs' reservations, as for the credits (the
                -- batch's blocks are updated by now).
                k_remaining[n] := greatest(lim * 1000 - q.used_milli - q.reserved_milli
                    + (SELECT coalesce(sum(res.bucket_milli), 0) FROM reservations res
                        WHERE res.org_id = v_org AND res.bucket = k_bucket[n]
                          AND res.period_start = k_period[n] AND res.expires_at IS NOT NULL), 0);
            END IF;
            IF unigen_bucket_events(q, lim) THEN
                org_events := true;
            END IF;
        END LOOP;
        IF unigen_account_events(a, p) THEN
            org_events := true;
        END IF;
        FOR n IN org_first..coalesce(array_length(o_ord, 1), 0) LOOP
            IF o_k[n] IS NOT NULL THEN
                o_remaining[n] := k_remaining[o_k[n]];
            END IF;
            o_events[n] := org_events;
        END LOOP;
    END LOOP;

    INSERT INTO credit_transactions (id, org_id, type, amount, balance_after, description, metadata, created_at)
    SELECT gen_random_uuid(), x.org, x.kind, x.amount, x.balance, x.description, x.meta, clock_timestamp()
      FROM unnest(l_org, l_type, l_amount, l_balance, l_desc, l_meta)
           AS x(org, kind, amount, balance, description, meta);
    INSERT INTO usage_records (id, org_id, api_key_id, endpoint, method, model, credits, latency_ms,
                               status, tools_used, prompt_tokens, completion_tokens, total_tokens, created_at)
    SELECT x.request, x.org, x.key, x.endpoint, x.method, x.model, o.credits, x.latency, x.status,
           ARRAY(SELECT jsonb_array_elements_text(x.tools)), x.prompt, x.completion,
           x.prompt + x.completion, now()
      FROM unnest(i_request, i_org, i_key, i_endpoint, i_method, i_model, i_latency, i_status,
                  i_tools, i_prompt, i_completion)
           WITH ORDINALITY AS x(request, org, key, endpoint, method, model, latency, status,
                                tools, prompt, completion, n)
      JOIN unnest(o_ord, o_outcome, o_credits) AS o(n, outcome, credits) ON o.n = x.n
     WHERE o.outcome = 'ok'
    ON CONFLICT DO NOTHING;

    RETURN QUERY
    SELECT o.n, o.outcome, o.incl, o.purch, o.ovg, o.bkt, o.remaining, o.credits_left,
           o.over_enabled, o.over_credits, o.rate, o.events
      FROM unnest(o_ord, o_outcome, o_incl, o_purch, o_over, o_bucket, o_remaining,
                  o_credits_left, o_over_enabled, o_over_credits, o_rate, o_events)
           AS o(n, outcome, incl, purch, ovg, bkt, remaining, credits_left, over_enabled,
                over_credits, rate, events)
     ORDER BY o.n;
END
$$;

-- Concurrency slots are leased by API processes in blocks (holder = the
-- process) and renewed while the process lives; requests are counted
-- against them in memory. Takes up to `wanted` free slots of 1..limit.
CREATE OR REPLACE FUNCTION unigen_lease_slots(
    p_org uuid, p_limit integer, p_holder uuid, p_wanted integer, p_lease_secs double precision)
RETURNS SETOF integer
LANGUAGE plpgsql AS $$
BEGIN
    FOR attempt IN 1..2 LOOP
        RETURN QUERY
        UPDATE concurrency_slots s SET holder = p_holder,
               expires_at = now() + make_interval(secs => p_lease_secs)
         WHERE (s.org_id, s.slot) IN (
               SELECT c.org_id, c.slot FROM concurrency_slots c
                WHERE c.org_id = p_org AND c.slot <= p_limit
                  AND (c.holder IS NULL OR c.expires_at < now())
                ORDER BY c.slot LIMIT p_wanted
                FOR UPDATE SKIP LOCKED)
        RETURNING s.slot;
        IF FOUND OR attempt = 2 THEN
            RETURN;
        END IF;
        -- None free: create the slots up to the limit (first use, or a
        -- raised limit), then try once more; a concurrent creator makes
        -- this wait, then do nothing.
        INSERT INTO concurrency_slots (org_id, slot)
        SELECT p_org, g FROM generate_series(
            (SELECT COALESCE(max(c.slot), 0) + 1 FROM concurrency_slots c WHERE c.org_id = p_org),
            p_limit) AS g
        ON CONFLICT DO NOTHING;
    END LOOP;
END
$$;

-- Keeps usage_daily (the dashboard's rollups) exact: an AFTER INSERT ...
-- FOR EACH STATEMENT trigger on usage_records, so it runs inside every
-- statement that records usage (unigen_settle, unigen_settle_many,
-- unigen_settle_shares, unigen_release, direct inserts), over exactly the rows
-- that statement inserted (records skipped by ON CONFLICT DO NOTHING are not
-- in `new_usage`). Rows are upserted in key order, so two statements never
-- wait on each other's rollup rows in opposite orders.
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

-- Dead: replaced by unigen_take_rate_tokens (blocks of tokens).
DROP FUNCTION IF EXISTS unigen_take_rate_token(uuid, bigint);
