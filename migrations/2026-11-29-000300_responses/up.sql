-- Stored responses of the Responses API (`store`, the default): the
-- `response` object as answered, the request's input items (as
-- `GET /responses/{id}/input_items` lists them) and the conversation a
-- `previous_response_id` continues (the continued response's conversation,
-- then this response's input items, then its output). Private to their
-- organization.
CREATE TABLE responses (
    id                   TEXT PRIMARY KEY,
    org_id               UUID NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    model                TEXT NOT NULL,
    status               TEXT NOT NULL,
    body                 JSONB NOT NULL,
    input_items          JSONB NOT NULL,
    conversation         JSONB NOT NULL,
    previous_response_id TEXT,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX responses_org_created_idx ON responses (org_id, created_at DESC);
