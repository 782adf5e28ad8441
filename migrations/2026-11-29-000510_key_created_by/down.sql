ALTER TABLE api_keys DROP COLUMN created_by_member, DROP COLUMN created_by_key;
