DROP TABLE batch_lines;
DROP TABLE batches;
DROP TABLE files;
ALTER TABLE plans DROP COLUMN max_batch_concurrency;
