ALTER TABLE webhooks DROP COLUMN manual_sends, DROP COLUMN manual_window_at;
DROP INDEX webhook_deliveries_pending_idx;
DROP INDEX webhook_deliveries_leased_idx;
ALTER TABLE webhook_deliveries DROP COLUMN leased_until;
