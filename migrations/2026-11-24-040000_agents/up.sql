-- Agents: an organization's configurable tool-using assistants, plus the
-- built-in templates (org_id NULL, is_template) anyone can list and duplicate.
CREATE TABLE agents (
    id                UUID PRIMARY KEY,
    org_id            UUID REFERENCES organizations(id) ON DELETE CASCADE,
    name              TEXT NOT NULL,
    description       TEXT NOT NULL DEFAULT '',
    icon              TEXT NOT NULL DEFAULT 'bot',
    system_prompt     TEXT NOT NULL,
    model             TEXT NOT NULL,
    tools             TEXT[] NOT NULL DEFAULT '{}',
    temperature       DOUBLE PRECISION NOT NULL DEFAULT 0.7,
    max_tokens        INTEGER NOT NULL DEFAULT 4000,
    max_iterations    INTEGER NOT NULL DEFAULT 10,
    memory_enabled    BOOLEAN NOT NULL DEFAULT false,
    is_template       BOOLEAN NOT NULL DEFAULT false,
    is_public         BOOLEAN NOT NULL DEFAULT false,
    template_category TEXT CHECK (template_category IN
                      ('research', 'content', 'coding', 'analysis', 'support', 'productivity')),
    run_count         BIGINT NOT NULL DEFAULT 0,
    created_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at        TIMESTAMPTZ NOT NULL DEFAULT now(),
    -- Templates belong to no organization; every other agent to one.
    CHECK (is_template = (org_id IS NULL))
);
CREATE INDEX agents_org_idx ON agents (org_id, created_at DESC);
CREATE INDEX agents_templates_idx ON agents (template_category, name) WHERE is_template;

INSERT INTO agents (id, name, description, icon, system_prompt, model, tools, temperature,
                    max_tokens, max_iterations, is_template, is_public, template_category) VALUES
 ('00000000-0000-7000-8000-000000000001', 'Research Assistant',
  'Searches the web, reads the sources and answers with citations.', 'search',
  'You are a careful research assistant. Search the web for the question, read the most relevant pages with web_fetch, and answer concisely, citing every source URL you used. Say so when sources disagree or are missing.',
  'local/echo', '{web_search,web_fetch}', 0.3, 4000, 8, true, true, 'research'),
 ('00000000-0000-7000-8000-000000000002', 'Content Writer',
  'Drafts articles and social posts with a matching illustration.', 'pen',
  'You are a content writer. Write clear, engaging copy in the tone the user asks for. When an illustration helps, create one with generate_image.',
  'local/echo', '{generate_text,generate_image}', 0.8, 4000, 6, true, true, 'content'),
 ('00000000-0000-7000-8000-000000000003', 'Code Reviewer',
  'Reviews code for bugs, security problems and readability.', 'code',
  'You are a senior software engineer reviewing code. Point out bugs, security problems and unclear code, most important first, and suggest concrete fixes. Fetch referenced documentation with web_fetch when needed.',
  'local/echo', '{web_fetch,create_document}', 0.2, 4000, 5, true, true, 'coding'),
 ('00000000-0000-7000-8000-000000000004', 'Data Analyst',
  'Analyses figures, draws charts and writes up the findings.', 'chart',
  'You are a data analyst. Compute what the user asks from the data given, show the key numbers, draw a chart with generate_chart when it makes the point clearer, and write a short report with create_document on request.',
  'local/echo', '{generate_chart,create_document}', 0.2, 4000, 8, true, true, 'analysis'),
 ('00000000-0000-7000-8000-000000000005', 'Support Agent',
  'Answers customer questions from the knowledge base.', 'headset',
  'You are a friendly customer support agent. Answer from the knowledge base provided in the context; when the answer is not there, say so and offer to escalate. Never invent policies.',
  'local/echo', '{web_fetch}', 0.3, 2000, 4, true, true, 'support'),
 ('00000000-0000-7000-8000-000000000006', 'Meeting Summarizer',
  'Turns notes and screenshots into summaries with action items.', 'clipboard',
  'You summarise meetings: decisions, open questions, and action items with owners and dates. Read screenshots with analyze_image. Offer the summary as a document with create_document.',
  'local/echo', '{analyze_image,create_document}', 0.3, 4000, 5, true, true, 'productivity');
