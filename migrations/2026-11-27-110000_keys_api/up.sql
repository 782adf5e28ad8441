-- Keys API: when a key was last used (written at most about once a minute
-- per key and API process, off the request path), and the `keys` scope.
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;

-- Recording a key's use must not empty every process's key cache: only
-- changes to what authentication reads notify.
DROP TRIGGER api_keys_auth_changed ON api_keys;
CREATE TRIGGER api_keys_auth_changed
    AFTER UPDATE OF org_id, key_hash, scopes, expires_at, revoked_at OR DELETE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION unigen_auth_changed();

-- Keys created with `all` were stored with every scope known then: they
-- hold the new `keys` scope too.
UPDATE api_keys SET scopes = array_append(scopes, 'keys')
WHERE scopes @> ARRAY['chat', 'image', 'image_edit', 'video', 'music', 'tts', 'stt',
                      'usage', 'jobs', 'agents', 'webhooks']
  AND NOT ('keys' = ANY (scopes));
