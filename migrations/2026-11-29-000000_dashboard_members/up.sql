-- Dashboard team members, their sessions, and failed sign-ins per email.

-- A member signs in with an email alone (no organization to pick), so an
-- email belongs to one member. The application stores it lowercased and
-- trimmed (unigen_db::queries::members::normalize_email) and looks it up in
-- the same form.
CREATE TABLE members (
    id uuid PRIMARY KEY,
    org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
    email text NOT NULL UNIQUE CHECK (length(email) BETWEEN 3 AND 254),
    -- argon2id, PHC string.
    password_hash text NOT NULL,
    role text NOT NULL CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX members_org_idx ON members (org_id, email);

-- The cookie holds a random value; only its SHA-256 is stored. Removing a
-- member removes its sessions (every API process reads them here).
CREATE TABLE dashboard_sessions (
    id_hash bytea PRIMARY KEY,
    member_id uuid NOT NULL REFERENCES members (id) ON DELETE CASCADE,
    csrf_token text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    -- The absolute end; idleness ends a session earlier.
    expires_at timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_member_idx ON dashboard_sessions (member_id);
CREATE INDEX dashboard_sessions_expiry_idx ON dashboard_sessions (expires_at);

-- Failed sign-ins of one email (whether or not a member has it) in the
-- current window, and until when further attempts are refused.
CREATE TABLE login_failures (
    email text PRIMARY KEY,
    failures integer NOT NULL,
    window_started_at timestamptz NOT NULL,
    locked_until timestamptz
);
