ALTER TABLE concurrency_slots SET LOGGED;
ALTER TABLE rate_limits SET LOGGED;
