-- +goose Up
-- Identity: principals (API keys and client-certificate subjects), the
-- principal each worker id belongs to, and the audit log of operator
-- actions. It mirrors the PostgreSQL migration table for table, with
-- SQLite's types (times INTEGER unix microseconds, JSON TEXT, STRICT).

CREATE TABLE principals (
    tenant       TEXT    NOT NULL,
    id           TEXT    NOT NULL,
    name         TEXT    NOT NULL DEFAULT '',
    role         TEXT    NOT NULL
        CHECK (role IN ('producer', 'worker', 'operator', 'reader', 'admin')),
    -- Queue patterns as a JSON array; empty: every queue.
    queues       TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(queues)),
    -- SHA-256 of the API key (never the key itself); NULL for a
    -- certificate principal.
    key_hash     BLOB    CHECK (key_hash IS NULL OR length(key_hash) = 32),
    -- 'CN=<common name>' of a certificate principal; NULL for an API key.
    cert_subject TEXT,
    created_at   INTEGER NOT NULL,
    created_by   TEXT    NOT NULL DEFAULT '',
    last_used_at INTEGER,
    revoked_at   INTEGER,
    PRIMARY KEY (tenant, id),
    CHECK ((key_hash IS NULL) <> (cert_subject IS NULL))
) STRICT;

CREATE UNIQUE INDEX principals_key_hash_idx ON principals (key_hash)
    WHERE key_hash IS NOT NULL;

CREATE UNIQUE INDEX principals_cert_subject_idx ON principals (cert_subject)
    WHERE cert_subject IS NOT NULL AND revoked_at IS NULL;

CREATE TABLE worker_identities (
    tenant       TEXT    NOT NULL,
    worker_id    TEXT    NOT NULL,
    principal_id TEXT    NOT NULL,
    bound_at     INTEGER NOT NULL,
    PRIMARY KEY (tenant, worker_id)
) STRICT;

CREATE TABLE audit_events (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    at         INTEGER NOT NULL,
    actor      TEXT    NOT NULL,
    actor_name TEXT    NOT NULL DEFAULT '',
    action     TEXT    NOT NULL,
    target     TEXT    NOT NULL DEFAULT '',
    data       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(data)),
    PRIMARY KEY (tenant, id)
) STRICT;

CREATE INDEX audit_events_list_idx ON audit_events (tenant, at DESC, id DESC);
