-- Request-rate and concurrency state is touched by every request and worth
-- nothing after a database crash (windows restart, in-flight requests died
-- with their connections). Unlogged, its updates write no WAL and their
-- commits do not wait for a disk flush: one hot row per key no longer caps a
-- key at the disk's flush rate.
ALTER TABLE rate_limits SET UNLOGGED;
ALTER TABLE concurrency_slots SET UNLOGGED;
