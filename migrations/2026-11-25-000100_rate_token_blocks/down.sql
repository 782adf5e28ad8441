DROP FUNCTION unigen_take_rate_tokens(uuid, bigint, integer);
