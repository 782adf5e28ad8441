DROP INDEX responses_expires_idx;
ALTER TABLE responses DROP COLUMN expires_at, DROP COLUMN upstream;
