-- +goose Up
-- Fleet-wide circuit breakers, one row per (tenant, dependency). The row is
-- the breaker: every report of its dependency locks it (after the jobs,
-- never before), a claim reads its state to skip the dependency's jobs
-- while it is not closed, and a half-open claim locks it to admit exactly
-- its probes. detail (window, probes, holds) and policy (empty: the
-- default policy) are JSON the store encodes; the engine never reads them.

CREATE TABLE breakers (
    tenant         text COLLATE "C" NOT NULL,
    dependency     text COLLATE "C" NOT NULL,
    state          text             NOT NULL,
    policy         text             NOT NULL DEFAULT '',
    detail         text             NOT NULL,
    last_event_seq bigint           NOT NULL DEFAULT 0,
    updated_at     timestamptz      NOT NULL,
    PRIMARY KEY (tenant, dependency),
    CONSTRAINT breakers_state_check CHECK (state IN ('closed', 'open', 'half_open'))
);

-- Claims look up only the breakers that are not closed, on every round:
-- this index holds just those, so the look-up costs nothing while every
-- breaker is closed.
CREATE INDEX breakers_gate_idx ON breakers (tenant, dependency) WHERE state <> 'closed';

-- Breaker transitions: gapless seq per breaker from 1.
CREATE TABLE breaker_events (
    tenant     text COLLATE "C" NOT NULL,
    dependency text COLLATE "C" NOT NULL,
    seq        bigint           NOT NULL,
    type       text             NOT NULL,
    at         timestamptz      NOT NULL,
    data       jsonb            NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, dependency, seq),
    FOREIGN KEY (tenant, dependency) REFERENCES breakers (tenant, dependency) ON DELETE CASCADE,
    CONSTRAINT breaker_events_type_check CHECK (type IN (
        'opened', 'half_opened', 'closed', 'reset', 'forced_open', 'policy_updated'))
);

-- Half-open probe claims walk the queued jobs of one dependency in claim
-- order. Only jobs that name a dependency are in it, so jobs without one
-- (most, and every job of a deployment with no breakers) cost it nothing.
CREATE INDEX jobs_dependency_claim_idx ON jobs (tenant, dependency, queue, priority DESC, available_at, id)
    WHERE state = 'queued' AND dependency <> '';
