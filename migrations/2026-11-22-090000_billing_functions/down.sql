DROP FUNCTION unigen_release(uuid, uuid, uuid, text, text, text, bigint, text, text[], bigint, bigint);
DROP FUNCTION unigen_settle(uuid, bigint, bigint, uuid, text, text, text, bigint, text[], bigint, bigint);
DROP FUNCTION unigen_reserve(uuid, uuid, bigint, text, bigint, timestamptz);
DROP FUNCTION IF EXISTS unigen_take_rate_token(uuid, bigint);
DROP FUNCTION unigen_record_event(uuid, uuid, text, jsonb, timestamptz);
DROP FUNCTION unigen_bucket_limit(plans, text);
