-- +goose Up
-- Per-key concurrency and start-rate limits (see the PostgreSQL migration).

ALTER TABLE jobs ADD COLUMN concurrency_key TEXT NOT NULL DEFAULT '';

ALTER TABLE queue_policies ADD COLUMN limits TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(limits));

CREATE TABLE rate_windows (
    tenant       TEXT    NOT NULL,
    queue        TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    window_start INTEGER NOT NULL,
    starts       INTEGER NOT NULL,
    PRIMARY KEY (tenant, queue, window_start, key)
) STRICT;
