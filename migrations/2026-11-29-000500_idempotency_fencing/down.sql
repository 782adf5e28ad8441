ALTER TABLE idempotency_keys DROP COLUMN job_id;
ALTER TABLE idempotency_keys DROP COLUMN claim_id;
