UPDATE api_keys SET scopes = array_remove(scopes, 'keys') WHERE 'keys' = ANY (scopes);

DROP TRIGGER api_keys_auth_changed ON api_keys;
CREATE TRIGGER api_keys_auth_changed AFTER UPDATE OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_auth_changed();

ALTER TABLE api_keys DROP COLUMN last_used_at;
