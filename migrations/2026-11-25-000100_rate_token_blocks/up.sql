-- Takes up to `wanted` request tokens of a key at once, for an API process
-- that admits requests from a local block instead of one statement each.
-- Same cell rate algorithm as unigen_take_rate_token (a burst of the plan's
-- per-minute rate, then one token per interval). granted = 0: refused,
-- tat tells when the next token is due.
CREATE FUNCTION unigen_take_rate_tokens(
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
        UPDATE rate_limits r SET tat = base + make_interval(secs => granted * interval_us / 1e6)
         WHERE r.api_key_id = key;
        tat := NULL;
    ELSE
        granted := 0;
    END IF;
END
$$;
