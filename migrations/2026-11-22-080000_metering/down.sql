DROP TABLE concurrency_slots;
DROP TABLE rate_limits;
DROP TABLE usage_records;
DROP TABLE credit_transactions;
DROP TABLE reservations;
DROP TABLE quota_usage;
DROP TABLE billing_accounts;
