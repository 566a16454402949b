-- +goose Up
-- Unique jobs (see the PostgreSQL migration): the unique key of a job, a
-- partial unique index over the live ones, and the period records.
ALTER TABLE jobs ADD COLUMN unique_key TEXT;

CREATE UNIQUE INDEX jobs_unique_live_idx ON jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'leased');

CREATE TABLE unique_keys (
    tenant     TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    job_id     TEXT    NOT NULL,
    expires_at INTEGER NOT NULL,
    PRIMARY KEY (tenant, key)
) STRICT;

CREATE INDEX unique_keys_expires_idx ON unique_keys (expires_at);
