-- +goose Up
-- Fewer b-tree writes per job on the hot path (see the PostgreSQL
-- migration of the same name for that engine's side).
--
-- job_events and job_attempts become WITHOUT ROWID tables: every claim
-- appends an event, and every finished attempt an event and an attempt
-- row, and a rowid table writes each such row twice, once in the table
-- and once in its primary-key index (one more b-tree page dirtied, and
-- written to the WAL, per table per commit). Keyed by their primary keys
-- instead, each row is written once. Columns, checks and foreign keys
-- are unchanged; the primary key's (tenant, job_id) prefix still serves
-- ON DELETE CASCADE from jobs.

CREATE TABLE job_events_new (
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
) STRICT, WITHOUT ROWID;
INSERT INTO job_events_new (tenant, job_id, seq, type, at, data)
    SELECT tenant, job_id, seq, type, at, data FROM job_events;
DROP TABLE job_events;
ALTER TABLE job_events_new RENAME TO job_events;

CREATE TABLE job_attempts_new (
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
) STRICT, WITHOUT ROWID;
INSERT INTO job_attempts_new (tenant, job_id, attempt, generation, worker_id, claimed_at, finished_at,
        outcome, error_code, error_message, error_retryable)
    SELECT tenant, job_id, attempt, generation, worker_id, claimed_at, finished_at,
        outcome, error_code, error_message, error_retryable FROM job_attempts;
DROP TABLE job_attempts;
ALTER TABLE job_attempts_new RENAME TO job_attempts;
