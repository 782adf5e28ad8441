-- Retention: the scheduler deletes finished jobs oldest first.
CREATE INDEX jobs_finished_idx ON jobs (completed_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
