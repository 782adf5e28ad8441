-- Dashboard lists: keyset pages of an organization's jobs of one status, and
-- the events (so the webhook deliveries) of one job.
CREATE INDEX jobs_org_status_created_idx ON jobs (org_id, status, created_at DESC, id DESC);
CREATE INDEX events_job_idx ON events ((data->>'jobId')) WHERE data ? 'jobId';

-- What each webhook attempt sent and got: the exact request headers it was
-- signed with, and the first 1 KB of the receiver's answer.
ALTER TABLE webhook_attempts
    ADD COLUMN request_headers JSONB NOT NULL DEFAULT '{}',
    ADD COLUMN response_body   TEXT;
