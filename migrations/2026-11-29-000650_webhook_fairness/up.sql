-- Webhook delivery shared fairly between organizations (issue 34, finding 2).
--
-- An attempt in flight: the claim sets `leased_until` to the end of its
-- lease, recording the attempt clears it. The claim's per-organization and
-- per-webhook caps count the rows whose lease has not run out; the partial
-- index holds only those (and the few whose scheduler died mid-attempt).
ALTER TABLE webhook_deliveries ADD COLUMN leased_until TIMESTAMPTZ;
CREATE INDEX webhook_deliveries_leased_idx ON webhook_deliveries (webhook_id)
    WHERE leased_until IS NOT NULL;
-- The claim walks the webhooks that have pending deliveries (a skip scan of
-- this index) and takes each one's oldest due deliveries from it: a backlog
-- of one webhook costs the others nothing.
CREATE INDEX webhook_deliveries_pending_idx ON webhook_deliveries (webhook_id, next_attempt_at)
    WHERE status = 'pending';
-- Manual sends (test event, redelivery, replay) per webhook: a fixed
-- one-minute window that starts at its first send.
ALTER TABLE webhooks
    ADD COLUMN manual_window_at TIMESTAMPTZ,
    ADD COLUMN manual_sends     INTEGER NOT NULL DEFAULT 0;
