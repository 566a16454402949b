-- +goose Up
-- The Leasehold schema for the embedded SQLite engine. It mirrors the
-- PostgreSQL schema table for table. The differences are SQLite's types:
-- times are INTEGER unix microseconds (UTC), booleans are INTEGER 0/1 with a
-- CHECK, JSON is TEXT, and every table is STRICT so a wrongly typed bind fails
-- instead of being stored. Foreign keys are enforced because every connection
-- runs PRAGMA foreign_keys=ON.

-- jobs is the hot table: one row per job. Lease ownership
-- (lease_owner, lease_generation, lease_expires_at) is kept apart from state,
-- lease_expires_at is NULL exactly when the job is not leased, and
-- finished_at is set exactly when the job is terminal. last_event_seq is the
-- sequence of the job's newest event: appending an event bumps it first, so
-- sequences are gapless per job.
CREATE TABLE jobs (
    tenant               TEXT    NOT NULL,
    id                   TEXT    NOT NULL,
    queue                TEXT    NOT NULL,
    kind                 TEXT    NOT NULL,
    payload              BLOB    NOT NULL,
    metadata             TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),
    priority             INTEGER NOT NULL DEFAULT 0,
    state                TEXT    NOT NULL
        CHECK (state IN ('queued', 'leased', 'succeeded', 'failed', 'cancelled', 'dead')),
    attempts             INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts         INTEGER NOT NULL CHECK (max_attempts >= 1),
    lease_owner          TEXT    NOT NULL DEFAULT '',
    lease_generation     INTEGER NOT NULL DEFAULT 0 CHECK (lease_generation >= 0),
    lease_expires_at     INTEGER,
    cancel_requested     INTEGER NOT NULL DEFAULT 0 CHECK (cancel_requested IN (0, 1)),
    cancel_reason        TEXT    NOT NULL DEFAULT '',
    created_at           INTEGER NOT NULL,
    available_at         INTEGER NOT NULL,
    finished_at          INTEGER,
    retry_deadline       INTEGER,
    last_error_code      TEXT,
    last_error_message   TEXT,
    last_error_retryable INTEGER CHECK (last_error_retryable IN (0, 1)),
    result               BLOB,
    replay_of            TEXT    NOT NULL DEFAULT '',
    replayed_as          TEXT    NOT NULL DEFAULT '',
    abandoned            INTEGER NOT NULL DEFAULT 0 CHECK (abandoned IN (0, 1)),
    dependency           TEXT    NOT NULL DEFAULT '',
    last_event_seq       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id),
    CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL)),
    CHECK ((state IN ('succeeded', 'failed', 'cancelled', 'dead')) = (finished_at IS NOT NULL)),
    CHECK (abandoned = 0 OR state = 'dead')
) STRICT;

-- Claims of QUEUED jobs: the planner walks this index in claim order
-- (priority desc, available_at, id) within one tenant and queue and stops
-- after LIMIT rows. Leased and finished jobs are not in it, so a claim never
-- steps over them. The claim query repeats the WHERE clause below verbatim,
-- which is what SQLite requires before it uses a partial index.
-- Cancel-requested jobs are never claimable, so they are left out.
CREATE INDEX jobs_claim_idx ON jobs (tenant, queue, priority DESC, available_at, id)
    WHERE state = 'queued' AND cancel_requested = 0;

-- Leased jobs by expiry: claims of expired leases (a range scan up to now)
-- and concurrency-limit counts (unexpired leases).
CREATE INDEX jobs_leased_idx ON jobs (tenant, queue, lease_expires_at)
    WHERE state = 'leased';

-- Leases whose cancel was requested: every claim looks for expired ones to
-- finish, and this index is almost always empty, so the look costs nothing.
CREATE INDEX jobs_cancel_requested_idx ON jobs (tenant, queue, lease_expires_at)
    WHERE state = 'leased' AND cancel_requested = 1;

-- Retention: terminal jobs oldest first, across tenants.
CREATE INDEX jobs_retention_idx ON jobs (finished_at, tenant, id)
    WHERE finished_at IS NOT NULL;

-- Dead-letter listing, newest first.
CREATE INDEX jobs_dead_idx ON jobs (tenant, finished_at DESC, id DESC)
    WHERE state = 'dead';

-- Job listing, newest first, and per-queue stats.
CREATE INDEX jobs_list_idx ON jobs (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_queue_state_idx ON jobs (tenant, queue, state);

-- job_events is the audit trail: gapless seq per job, starting at 1 with
-- the queued event. data is a small JSON object, never payload or result.
CREATE TABLE job_events (
    tenant TEXT    NOT NULL,
    job_id TEXT    NOT NULL,
    seq    INTEGER NOT NULL CHECK (seq >= 1),
    type   TEXT    NOT NULL CHECK (type IN (
        'queued', 'leased', 'lease_expired', 'released', 'checkpoint_saved',
        'cancel_requested', 'run_failed', 'succeeded', 'failed', 'cancelled',
        'dead', 'replayed', 'abandoned')),
    at     INTEGER NOT NULL,
    data   TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(data)),
    PRIMARY KEY (tenant, job_id, seq),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE
) STRICT;

-- job_attempts has one row per claim (lease generation).
CREATE TABLE job_attempts (
    tenant          TEXT    NOT NULL,
    job_id          TEXT    NOT NULL,
    attempt         INTEGER NOT NULL CHECK (attempt >= 1),
    generation      INTEGER NOT NULL CHECK (generation >= 1),
    worker_id       TEXT    NOT NULL,
    claimed_at      INTEGER NOT NULL,
    finished_at     INTEGER,
    outcome         TEXT    NOT NULL CHECK (outcome IN (
        'running', 'succeeded', 'failed', 'lease_expired', 'released', 'cancelled')),
    error_code      TEXT,
    error_message   TEXT,
    error_retryable INTEGER CHECK (error_retryable IN (0, 1)),
    PRIMARY KEY (tenant, job_id, generation),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE,
    CHECK ((outcome = 'running') = (finished_at IS NULL))
) STRICT;

-- job_checkpoints keeps the newest checkpoints of each job. seq is the
-- sequence of the checkpoint_saved event that recorded it, so "latest" is
-- well defined even when two checkpoints share a timestamp. parent_id is
-- lineage only (the parent may have been trimmed), hence no foreign key.
CREATE TABLE job_checkpoints (
    tenant     TEXT    NOT NULL,
    id         TEXT    NOT NULL,
    job_id     TEXT    NOT NULL,
    seq        INTEGER NOT NULL,
    phase      TEXT    NOT NULL,
    state      BLOB    NOT NULL,
    generation INTEGER NOT NULL CHECK (generation >= 1),
    parent_id  TEXT    NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, job_id, seq),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE
) STRICT;

-- job_effects is the effect ledger, one row per (job, effect_key).
CREATE TABLE job_effects (
    tenant                TEXT    NOT NULL,
    job_id                TEXT    NOT NULL,
    effect_key            TEXT    NOT NULL,
    status                TEXT    NOT NULL
        CHECK (status IN ('reserved', 'succeeded', 'failed', 'unknown')),
    generation            INTEGER NOT NULL CHECK (generation >= 1),
    provider_operation_id TEXT    NOT NULL DEFAULT '',
    result                BLOB,
    created_at            INTEGER NOT NULL,
    updated_at            INTEGER NOT NULL,
    PRIMARY KEY (tenant, job_id, effect_key),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE
) STRICT;

-- idempotency_keys maps (tenant, operation, key) to a request fingerprint and
-- the job it created, until expires_at. It cascades with its job so that
-- retention never leaves a record pointing at nothing.
CREATE TABLE idempotency_keys (
    tenant      TEXT    NOT NULL,
    operation   TEXT    NOT NULL CHECK (operation IN ('create_job')),
    key         TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    job_id      TEXT    NOT NULL,
    expires_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, operation, key),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE
) STRICT;

CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at);
CREATE INDEX idempotency_keys_job_idx ON idempotency_keys (tenant, job_id);

-- queue_policies stores a queue's policy in explicit columns. Durations are
-- INTEGER nanoseconds so a policy reads back exactly as it was written.
CREATE TABLE queue_policies (
    tenant                      TEXT    NOT NULL,
    queue                       TEXT    NOT NULL,
    max_attempts                INTEGER NOT NULL CHECK (max_attempts >= 1),
    initial_delay_ns            INTEGER NOT NULL CHECK (initial_delay_ns > 0),
    max_delay_ns                INTEGER NOT NULL CHECK (max_delay_ns > 0),
    multiplier                  REAL    NOT NULL,
    jitter_fraction             REAL    NOT NULL,
    retryable_error_codes       TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(retryable_error_codes)),
    non_retryable_error_codes   TEXT    NOT NULL DEFAULT '[]' CHECK (json_valid(non_retryable_error_codes)),
    total_retry_deadline_ns     INTEGER NOT NULL DEFAULT 0 CHECK (total_retry_deadline_ns >= 0),
    default_lease_duration_ns   INTEGER NOT NULL CHECK (default_lease_duration_ns > 0),
    concurrency_limit           INTEGER NOT NULL DEFAULT 0 CHECK (concurrency_limit >= 0),
    paused                      INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    updated_at                  INTEGER NOT NULL,
    PRIMARY KEY (tenant, queue)
) STRICT;
