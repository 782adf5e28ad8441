DROP INDEX webhook_deliveries_failed_idx;
ALTER TABLE webhook_deliveries
    DROP COLUMN manual_attempt,
    DROP COLUMN manual_attempts,
    DROP COLUMN resume_at;
