-- +goose Up
-- Fleet-wide circuit breakers (see the PostgreSQL migration). Times are
-- microseconds since the Unix epoch, like every time of this schema.

CREATE TABLE breakers (
    tenant         TEXT    NOT NULL,
    dependency     TEXT    NOT NULL,
    state          TEXT    NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    policy         TEXT    NOT NULL DEFAULT '',
    detail         TEXT    NOT NULL CHECK (json_valid(detail)),
    last_event_seq INTEGER NOT NULL DEFAULT 0,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (tenant, dependency)
) STRICT;

CREATE INDEX breakers_gate_idx ON breakers (tenant, dependency) WHERE state <> 'closed';

CREATE TABLE breaker_events (
    tenant     TEXT    NOT NULL,
    dependency TEXT    NOT NULL,
    seq        INTEGER NOT NULL CHECK (seq >= 1),
    type       TEXT    NOT NULL CHECK (type IN (
        'opened', 'half_opened', 'closed', 'reset', 'forced_open', 'policy_updated')),
    at         INTEGER NOT NULL,
    data       TEXT    NOT NULL DEFAULT '{}' CHECK (json_valid(data)),
    PRIMARY KEY (tenant, dependency, seq),
    FOREIGN KEY (tenant, dependency) REFERENCES breakers (tenant, dependency) ON DELETE CASCADE
) STRICT;
