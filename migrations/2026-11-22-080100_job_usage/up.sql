-- The usage object of a finished job, as settled (credits, bucket counters
-- and what the period has left at that moment).
ALTER TABLE jobs ADD COLUMN usage JSONB;
