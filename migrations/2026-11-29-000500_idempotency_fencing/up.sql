-- Each claim of an Idempotency-Key has its own id: completing or releasing
-- the key matches it, so a request whose claim was taken over (abandoned
-- after 15 minutes) can neither overwrite nor free its successor's claim.
ALTER TABLE idempotency_keys ADD COLUMN claim_id UUID NOT NULL DEFAULT gen_random_uuid();
-- The job a claim created, written by the statement that inserts the job:
-- a request that ends without settling its key (the client went away
-- between the job's commit and the broker's confirm) can no longer free a
-- key whose job exists; the key answers that job's 202 instead.
ALTER TABLE idempotency_keys ADD COLUMN job_id UUID;
