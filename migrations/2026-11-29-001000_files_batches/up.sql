-- OpenAI's Files and Batches APIs. `files` are an organization's uploads
-- (purpose `batch` or `user_data`) and the output and error files of its
-- batches (`batch_output`); their bytes live in the file store under
-- `storage_key`. A batch's lines are rows of `batch_lines`, claimed by the
-- workers with a lease (not rows of `jobs`: a 50,000-line batch must not
-- bury `GET /jobs`); each line's reservation and charge are keyed on the
-- line's id, so a line rerun after a worker dies is charged once.

-- How many lines of an organization's batches run at once.
ALTER TABLE plans ADD COLUMN max_batch_concurrency INTEGER NOT NULL DEFAULT 8
    CHECK (max_batch_concurrency > 0);

CREATE TABLE files (
    id          TEXT PRIMARY KEY,
    org_id      UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    purpose     TEXT NOT NULL CHECK (purpose IN ('batch', 'user_data', 'batch_output')),
    filename    TEXT NOT NULL,
    bytes       BIGINT NOT NULL CHECK (bytes >= 0),
    storage_key TEXT NOT NULL,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- Ids are time-ordered (UUIDv7): listing newest first is `id DESC`.
CREATE INDEX files_org_idx ON files (org_id, id DESC);

CREATE TABLE batches (
    id                TEXT PRIMARY KEY,
    org_id            UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    api_key_id        UUID,
    endpoint          TEXT NOT NULL,
    input_file_id     TEXT NOT NULL,
    completion_window TEXT NOT NULL,
    status            TEXT NOT NULL CHECK (status IN ('validating', 'in_progress', 'finalizing',
                          'completed', 'failed', 'expired', 'cancelling', 'cancelled')),
    metadata          JSONB,
    errors            JSONB,
    output_file_id    TEXT,
    error_file_id     TEXT,
    total             INTEGER NOT NULL,
    completed         INTEGER NOT NULL DEFAULT 0,
    failed            INTEGER NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    in_progress_at    TIMESTAMPTZ,
    expires_at        TIMESTAMPTZ NOT NULL,
    finalizing_at     TIMESTAMPTZ,
    completed_at      TIMESTAMPTZ,
    failed_at         TIMESTAMPTZ,
    expired_at        TIMESTAMPTZ,
    cancelling_at     TIMESTAMPTZ,
    cancelled_at      TIMESTAMPTZ
);
CREATE INDEX batches_org_idx ON batches (org_id, id DESC);
-- What the scheduler watches: batches not yet ended.
CREATE INDEX batches_open_idx ON batches (expires_at) WHERE status IN ('in_progress', 'cancelling');

CREATE TABLE batch_lines (
    id          UUID PRIMARY KEY,
    batch_id    TEXT NOT NULL REFERENCES batches (id) ON DELETE CASCADE,
    org_id      UUID NOT NULL,
    line_no     INTEGER NOT NULL,
    custom_id   TEXT NOT NULL,
    body        JSONB NOT NULL,
    status      TEXT NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'running', 'succeeded',
                    'failed', 'cancelled', 'expired')),
    attempt     INTEGER NOT NULL DEFAULT 0,
    worker_id   TEXT,
    lease_until TIMESTAMPTZ,
    run_after   TIMESTAMPTZ NOT NULL DEFAULT now(),
    status_code INTEGER,
    response    JSONB,
    error       JSONB,
    finished_at TIMESTAMPTZ,
    UNIQUE (batch_id, line_no)
);
CREATE INDEX batch_lines_queued_idx ON batch_lines (run_after, id) WHERE status = 'queued';
CREATE INDEX batch_lines_running_idx ON batch_lines (org_id, lease_until) WHERE status = 'running';
