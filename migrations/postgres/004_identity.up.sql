-- +goose Up
-- Identity: principals (API keys and client-certificate subjects), the
-- principal each worker id belongs to, and the audit log of operator
-- actions. Keyed by tenant first like every other table; principals are
-- also found across tenants by the secret's hash or the certificate
-- subject, since those decide the tenant.

CREATE TABLE principals (
    tenant       text COLLATE "C" NOT NULL,
    id           text COLLATE "C" NOT NULL,
    name         text             NOT NULL DEFAULT '',
    role         text             NOT NULL,
    -- Queue patterns ("emails", "billing.*"); empty: every queue.
    queues       text[]           NOT NULL DEFAULT '{}',
    -- SHA-256 of the API key (never the key itself); NULL for a
    -- certificate principal.
    key_hash     bytea,
    -- 'CN=<common name>' of a certificate principal; NULL for an API key.
    cert_subject text COLLATE "C",
    created_at   timestamptz      NOT NULL,
    created_by   text             NOT NULL DEFAULT '',
    last_used_at timestamptz,
    revoked_at   timestamptz,
    PRIMARY KEY (tenant, id),
    CONSTRAINT principals_role_check
        CHECK (role IN ('producer', 'worker', 'operator', 'reader', 'admin')),
    CONSTRAINT principals_credential_check
        CHECK ((key_hash IS NULL) <> (cert_subject IS NULL)),
    CONSTRAINT principals_key_hash_length_check
        CHECK (key_hash IS NULL OR length(key_hash) = 32)
);

-- Authentication looks a key up by its hash, in any tenant.
CREATE UNIQUE INDEX principals_key_hash_idx ON principals (key_hash)
    WHERE key_hash IS NOT NULL;

-- A certificate subject maps to at most one valid principal.
CREATE UNIQUE INDEX principals_cert_subject_idx ON principals (cert_subject)
    WHERE cert_subject IS NOT NULL AND revoked_at IS NULL;

-- The principal that first used a worker id owns it: only it may claim,
-- connect and report as that worker.
CREATE TABLE worker_identities (
    tenant       text COLLATE "C" NOT NULL,
    worker_id    text COLLATE "C" NOT NULL,
    principal_id text COLLATE "C" NOT NULL,
    bound_at     timestamptz      NOT NULL,
    PRIMARY KEY (tenant, worker_id)
);

CREATE TABLE audit_events (
    tenant     text COLLATE "C" NOT NULL,
    id         text COLLATE "C" NOT NULL,
    at         timestamptz      NOT NULL,
    actor      text             NOT NULL,
    actor_name text             NOT NULL DEFAULT '',
    action     text             NOT NULL,
    target     text             NOT NULL DEFAULT '',
    data       jsonb            NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, id)
);

-- The audit listing, newest first.
CREATE INDEX audit_events_list_idx ON audit_events (tenant, at DESC, id DESC);
