DROP TRIGGER api_keys_auth_changed ON api_keys;
CREATE TRIGGER api_keys_auth_changed
    AFTER UPDATE OF org_id, key_hash, scopes, expires_at, revoked_at OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_auth_changed();
DROP FUNCTION unigen_api_key_changed();
ALTER TABLE plans DROP COLUMN max_api_keys;
DELETE FROM rate_limits;
COMMENT ON COLUMN rate_limits.api_key_id IS NULL;
ALTER TABLE rate_limits ADD CONSTRAINT rate_limits_api_key_id_fkey
    FOREIGN KEY (api_key_id) REFERENCES api_keys(id) ON DELETE CASCADE;
