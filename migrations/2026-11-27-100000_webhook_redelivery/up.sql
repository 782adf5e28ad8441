-- Redelivery and replay: an extra attempt of a delivery, made at once and
-- outside the retry schedule.
ALTER TABLE webhook_deliveries
    -- The next claimed attempt is an extra one (redeliver, replay).
    ADD COLUMN manual_attempt  BOOLEAN NOT NULL DEFAULT false,
    -- Extra attempts made so far: counted in `attempts`, not in the schedule.
    ADD COLUMN manual_attempts INTEGER NOT NULL DEFAULT 0,
    -- A pending delivery redelivered early: when its next scheduled attempt
    -- was due, restored if the extra attempt fails. NULL for a finished
    -- delivery, which ends with the extra attempt's result.
    ADD COLUMN resume_at       TIMESTAMPTZ;
-- Replay picks a webhook's failed deliveries.
CREATE INDEX webhook_deliveries_failed_idx ON webhook_deliveries (webhook_id)
    WHERE status = 'failed';
