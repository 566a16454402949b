-- +goose Up
-- Schedules and their runs (see the PostgreSQL migration), with SQLite's
-- types: times INTEGER unix microseconds, JSON TEXT, STRICT.

CREATE TABLE schedules (
    tenant        TEXT    NOT NULL,
    id            TEXT    NOT NULL,
    name          TEXT    NOT NULL,
    queue         TEXT    NOT NULL,
    spec          TEXT    NOT NULL CHECK (json_valid(spec)),
    paused        INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    paused_reason TEXT    NOT NULL DEFAULT '',
    next_tick_at  INTEGER,
    last_tick_at  INTEGER,
    last_job_id   TEXT    NOT NULL DEFAULT '',
    owner_id      TEXT    NOT NULL DEFAULT '',
    owner         TEXT    NOT NULL DEFAULT '',
    run_seq       INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    PRIMARY KEY (tenant, id),
    UNIQUE (tenant, name),
    CHECK (paused = 0 OR next_tick_at IS NULL)
) STRICT;

CREATE INDEX schedules_due_idx ON schedules (next_tick_at) WHERE next_tick_at IS NOT NULL;

CREATE TABLE schedule_runs (
    tenant       TEXT    NOT NULL,
    schedule_id  TEXT    NOT NULL,
    seq          INTEGER NOT NULL,
    tick_at      INTEGER NOT NULL,
    outcome      TEXT    NOT NULL CHECK (outcome IN ('fired', 'skipped', 'missed', 'triggered')),
    job_id       TEXT    NOT NULL DEFAULT '',
    missed       INTEGER NOT NULL DEFAULT 0,
    reason       TEXT    NOT NULL DEFAULT '',
    recorded_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant, schedule_id, seq),
    FOREIGN KEY (tenant, schedule_id) REFERENCES schedules (tenant, id) ON DELETE CASCADE
) STRICT;

-- The delay a failed attempt was retried after (see the PostgreSQL migration).
ALTER TABLE job_attempts ADD COLUMN retry_delay_ns INTEGER NOT NULL DEFAULT 0;
