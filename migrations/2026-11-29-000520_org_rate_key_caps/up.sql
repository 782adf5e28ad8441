-- Issue 34, finding 3: minting keys no longer multiplies the rate limit.
--
-- The plan's request rate is counted per organization: `rate_limits` rows
-- are keyed by the organization's id from now on (the column keeps its
-- name; the table is unlogged, transient state, so it starts empty).
ALTER TABLE rate_limits DROP CONSTRAINT IF EXISTS rate_limits_api_key_id_fkey;
DELETE FROM rate_limits;
COMMENT ON COLUMN rate_limits.api_key_id IS
    'the organization whose request rate this is (named when the rate was per key)';

-- A cap per plan on an organization's active (unrevoked, unexpired) keys,
-- for POST /keys and the dashboard (the operator CLI is not capped).
ALTER TABLE plans ADD COLUMN max_api_keys INTEGER NOT NULL DEFAULT 20
    CHECK (max_api_keys >= 0);
UPDATE plans SET max_api_keys = CASE code
    WHEN 'free' THEN 3
    WHEN 'pro' THEN 20
    WHEN 'business' THEN 100
    WHEN 'cli_pro' THEN 20
    WHEN 'cli_team' THEN 100
    ELSE max_api_keys END;

-- A key's change names the key (`api_keys:<id>`): every API process drops
-- that key from its cache, not every key.
CREATE FUNCTION unigen_api_key_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('unigen_auth', 'api_keys:' || OLD.id::text);
    RETURN NULL;
END
$$;
DROP TRIGGER api_keys_auth_changed ON api_keys;
CREATE TRIGGER api_keys_auth_changed
    AFTER UPDATE OF org_id, key_hash, scopes, expires_at, revoked_at OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION unigen_api_key_changed();
