ALTER TABLE webhook_attempts DROP COLUMN response_body, DROP COLUMN request_headers;
DROP INDEX events_job_idx;
DROP INDEX jobs_org_status_created_idx;
