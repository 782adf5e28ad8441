-- Knowledge files of an agent: uploaded (pending), processed by a worker from
-- the `knowledge` queue (processing, under a lease like jobs), then completed
-- with their chunks and embeddings, or failed with a user-facing message.
CREATE TABLE knowledge_files (
    id               UUID PRIMARY KEY,
    org_id           UUID NOT NULL REFERENCES organizations(id) ON DELETE CASCADE,
    agent_id         UUID NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    filename         TEXT NOT NULL,
    format           TEXT NOT NULL,
    size_bytes       BIGINT NOT NULL,
    storage_key      TEXT NOT NULL,
    status           TEXT NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'processing', 'completed', 'failed')),
    error_message    TEXT,
    chunk_count      INTEGER NOT NULL DEFAULT 0,
    attempt          INTEGER NOT NULL DEFAULT 0,
    worker_id        TEXT,
    lease_expires_at TIMESTAMPTZ,
    -- When the broker confirmed the file's message; NULL: the scheduler
    -- (re-)publishes it (a lost publish, a rescued lease, a worker stopping).
    enqueued_at      TIMESTAMPTZ,
    -- The catalogue model that embedded the chunks: retrieval compares only
    -- vectors of the model it embeds the query with.
    embedding_model  TEXT,
    created_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at       TIMESTAMPTZ NOT NULL DEFAULT now(),
    processed_at     TIMESTAMPTZ
);
CREATE INDEX knowledge_files_agent_idx ON knowledge_files (agent_id, created_at DESC);
-- The scheduler's rounds: unpublished pending files and expired leases.
CREATE INDEX knowledge_files_unpublished_idx ON knowledge_files (created_at)
    WHERE status = 'pending' AND enqueued_at IS NULL;
CREATE INDEX knowledge_files_lease_idx ON knowledge_files (lease_expires_at)
    WHERE status = 'processing';

-- Text chunks with their embeddings (unit vectors: similarity is a dot product).
CREATE TABLE knowledge_chunks (
    file_id     UUID NOT NULL REFERENCES knowledge_files(id) ON DELETE CASCADE,
    chunk_index INTEGER NOT NULL,
    agent_id    UUID NOT NULL REFERENCES agents(id) ON DELETE CASCADE,
    content     TEXT NOT NULL,
    token_count INTEGER NOT NULL,
    embedding   REAL[] NOT NULL,
    PRIMARY KEY (file_id, chunk_index)
);
CREATE INDEX knowledge_chunks_agent_idx ON knowledge_chunks (agent_id);
