-- Event retention: the scheduler deletes old events (and, by cascade, their
-- deliveries and attempts) oldest first, skipping events still being delivered.
CREATE INDEX events_created_idx ON events (created_at);
-- Deliveries by event: the retention check and the cascade from events.
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (event_id);
