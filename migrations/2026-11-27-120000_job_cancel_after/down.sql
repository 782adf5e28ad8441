DROP INDEX IF EXISTS jobs_cancel_after_idx;
ALTER TABLE jobs DROP COLUMN IF EXISTS cancel_after;
