DROP TRIGGER usage_records_rollup ON usage_records;
DROP FUNCTION unigen_usage_rollup();
DROP TABLE usage_daily;
