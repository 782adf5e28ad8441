DROP INDEX webhook_deliveries_event_idx;
DROP INDEX events_created_idx;
