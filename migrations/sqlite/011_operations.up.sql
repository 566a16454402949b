-- +goose Up
-- Bulk operations and their frozen matches (see the PostgreSQL migration),
-- with SQLite's types: times INTEGER unix microseconds, STRICT.

CREATE TABLE operations (
    tenant               TEXT    NOT NULL,
    id                   TEXT    NOT NULL,
    kind                 TEXT    NOT NULL,
    state                TEXT    NOT NULL CHECK (state IN ('running', 'succeeded', 'cancelled', 'failed')),
    filter               TEXT    NOT NULL,
    reason               TEXT    NOT NULL DEFAULT '',
    priority             INTEGER NOT NULL DEFAULT 0,
    actor                TEXT    NOT NULL DEFAULT '',
    actor_name           TEXT    NOT NULL DEFAULT '',
    queue_scope          TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(queue_scope)),
    created_at           INTEGER NOT NULL,
    updated_at           INTEGER,
    finished_at          INTEGER,
    matched              INTEGER NOT NULL DEFAULT 0,
    acted                INTEGER NOT NULL DEFAULT 0,
    skipped_changed      INTEGER NOT NULL DEFAULT 0,
    skipped_out_of_scope INTEGER NOT NULL DEFAULT 0,
    failed               INTEGER NOT NULL DEFAULT 0,
    error                TEXT    NOT NULL DEFAULT '',
    cancel_requested     INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    lease_owner          TEXT    NOT NULL DEFAULT '',
    lease_expires_at     INTEGER,
    PRIMARY KEY (tenant, id),
    CHECK ((state = 'running') = (finished_at IS NULL))
) STRICT;

CREATE INDEX operations_running_idx ON operations (created_at) WHERE state = 'running';
CREATE INDEX operations_list_idx ON operations (tenant, created_at DESC, id DESC);
CREATE INDEX operations_finished_idx ON operations (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE operation_items (
    tenant       TEXT    NOT NULL,
    operation_id TEXT    NOT NULL,
    job_id       TEXT    NOT NULL,
    result       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, operation_id, job_id),
    FOREIGN KEY (tenant, operation_id) REFERENCES operations (tenant, id) ON DELETE CASCADE
) STRICT;

CREATE INDEX operation_items_pending_idx ON operation_items (tenant, operation_id, job_id) WHERE result = 0;
