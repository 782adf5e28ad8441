-- Stored responses: the upstream that holds a response answered natively
-- (an `openai` / `azure-openai` upstream with `responses = true`; NULL for
-- responses bridged through chat), so a `previous_response_id` continuing it
-- goes back there; and when a stored response expires
-- (`responses.retention_seconds` after it was stored, 30 days by default):
-- past it, it is a 404, and the scheduler deletes it.
ALTER TABLE responses
    ADD COLUMN upstream   TEXT,
    ADD COLUMN expires_at TIMESTAMPTZ NOT NULL DEFAULT now() + interval '30 days';
CREATE INDEX responses_expires_idx ON responses (expires_at);
