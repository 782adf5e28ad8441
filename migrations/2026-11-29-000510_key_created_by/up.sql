-- Who created a key: another key (POST /keys) or a dashboard member; both
-- NULL for the operator CLI and keys made before this migration.
ALTER TABLE api_keys
    ADD COLUMN created_by_key UUID REFERENCES api_keys(id) ON DELETE SET NULL,
    ADD COLUMN created_by_member UUID REFERENCES members(id) ON DELETE SET NULL;
