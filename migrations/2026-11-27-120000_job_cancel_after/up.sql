-- Cancel-After: the time by which an unfinished job is cancelled.
ALTER TABLE jobs ADD COLUMN cancel_after TIMESTAMPTZ;

-- The scheduler's sweep reads only unfinished jobs that carry a deadline,
-- soonest first: this index holds exactly those, so it stays small.
CREATE INDEX jobs_cancel_after_idx ON jobs (cancel_after)
    WHERE cancel_after IS NOT NULL AND status IN ('pending', 'processing');
