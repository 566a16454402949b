-- +goose Up
-- The Leasehold schema on PostgreSQL. Every table is keyed by tenant first:
-- nothing of one tenant is reachable through another tenant's key. Times are
-- timestamptz (microsecond precision, the precision both engines share);
-- durations are bigint nanoseconds so a policy round-trips exactly.
-- Identifier columns use the "C" collation: byte order, as SQLite sorts, so
-- both engines list and claim in the same order whatever the database
-- locale.

CREATE TABLE jobs (
    tenant               text COLLATE "C" NOT NULL,
    id                   text COLLATE "C" NOT NULL,
    queue                text COLLATE "C" NOT NULL,
    kind                 text COLLATE "C" NOT NULL,
    payload              bytea            NOT NULL DEFAULT '\x',
    metadata             jsonb            NOT NULL DEFAULT '{}',
    priority             integer          NOT NULL DEFAULT 0,
    state                text             NOT NULL,
    attempts             integer          NOT NULL DEFAULT 0,
    max_attempts         integer          NOT NULL,
    -- Lease ownership is kept apart from state: the holder is
    -- (lease_owner, lease_generation, lease_expires_at). lease_expires_at is
    -- NULL whenever the job is not leased; owner and generation keep the
    -- last holder so that a repeated terminal report can be recognised.
    lease_owner          text             NOT NULL DEFAULT '',
    lease_generation     bigint           NOT NULL DEFAULT 0,
    lease_expires_at     timestamptz,
    cancel_requested     boolean          NOT NULL DEFAULT false,
    cancel_reason        text             NOT NULL DEFAULT '',
    created_at           timestamptz      NOT NULL,
    available_at         timestamptz      NOT NULL,
    finished_at          timestamptz,
    retry_deadline       timestamptz,
    last_error_code      text,
    last_error_message   text,
    last_error_retryable boolean,
    result               bytea,
    replay_of            text             NOT NULL DEFAULT '',
    replayed_as          text             NOT NULL DEFAULT '',
    abandoned            boolean          NOT NULL DEFAULT false,
    dependency           text             NOT NULL DEFAULT '',
    -- The sequence of the job's newest event. Appending an event bumps it
    -- under the row lock, which serialises appends and keeps them gapless.
    last_event_seq       bigint           NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, id),
    CONSTRAINT jobs_state_check
        CHECK (state IN ('queued', 'leased', 'succeeded', 'failed', 'cancelled', 'dead')),
    CONSTRAINT jobs_lease_check
        CHECK ((state = 'leased') = (lease_expires_at IS NOT NULL)),
    CONSTRAINT jobs_finished_check
        CHECK ((state IN ('succeeded', 'failed', 'cancelled', 'dead')) = (finished_at IS NOT NULL)),
    CONSTRAINT jobs_attempts_check CHECK (attempts >= 0 AND max_attempts >= 1)
);

-- The claim index: a claim walks the queued jobs of one (tenant, queue) in
-- claim order and stops after LIMIT rows, so it stays O(log n) however many
-- jobs are queued or finished. Partial, so finished rows never bloat it.
CREATE INDEX jobs_claim_idx ON jobs (tenant, queue, priority DESC, available_at, id)
    WHERE state = 'queued';

-- Expired-lease recovery and concurrency-limit counting: the leased jobs of
-- a queue by expiry.
CREATE INDEX jobs_lease_expiry_idx ON jobs (tenant, queue, lease_expires_at)
    WHERE state = 'leased';

-- Retention: finished jobs by age, across tenants.
CREATE INDEX jobs_finished_idx ON jobs (finished_at)
    WHERE finished_at IS NOT NULL;

-- Dead-letter listing, newest first.
CREATE INDEX jobs_dead_idx ON jobs (tenant, finished_at DESC, id DESC)
    WHERE state = 'dead';

-- Job listing, newest first.
CREATE INDEX jobs_list_idx ON jobs (tenant, created_at DESC, id DESC);

-- Queue statistics and the queue list.
CREATE INDEX jobs_queue_state_idx ON jobs (tenant, queue, state);

CREATE TABLE job_events (
    tenant text COLLATE "C" NOT NULL,
    job_id text COLLATE "C" NOT NULL,
    seq    bigint           NOT NULL,
    type   text             NOT NULL,
    at     timestamptz      NOT NULL,
    data   jsonb            NOT NULL DEFAULT '{}',
    PRIMARY KEY (tenant, job_id, seq),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE,
    CONSTRAINT job_events_type_check CHECK (type IN (
        'queued', 'leased', 'lease_expired', 'released', 'checkpoint_saved',
        'cancel_requested', 'run_failed', 'succeeded', 'failed', 'cancelled',
        'dead', 'replayed', 'abandoned'))
);

CREATE TABLE job_attempts (
    tenant          text COLLATE "C" NOT NULL,
    job_id          text COLLATE "C" NOT NULL,
    attempt         integer          NOT NULL,
    generation      bigint           NOT NULL,
    worker_id       text             NOT NULL,
    claimed_at      timestamptz      NOT NULL,
    finished_at     timestamptz,
    outcome         text             NOT NULL,
    error_code      text,
    error_message   text,
    error_retryable boolean,
    PRIMARY KEY (tenant, job_id, generation),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE,
    CONSTRAINT job_attempts_outcome_check CHECK (outcome IN (
        'running', 'succeeded', 'failed', 'lease_expired', 'released', 'cancelled'))
);

CREATE TABLE job_checkpoints (
    tenant     text COLLATE "C" NOT NULL,
    id         text COLLATE "C" NOT NULL,
    job_id     text COLLATE "C" NOT NULL,
    -- seq orders a job's checkpoints: created_at can repeat under an
    -- injected clock, and ids are only time-ordered by default.
    seq        bigint           GENERATED ALWAYS AS IDENTITY,
    phase      text             NOT NULL,
    state      bytea            NOT NULL DEFAULT '\x',
    generation bigint           NOT NULL,
    parent_id  text             NOT NULL DEFAULT '',
    created_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE
);

CREATE INDEX job_checkpoints_job_idx ON job_checkpoints (tenant, job_id, seq DESC);

CREATE TABLE job_effects (
    tenant                text COLLATE "C" NOT NULL,
    job_id                text COLLATE "C" NOT NULL,
    effect_key            text COLLATE "C" NOT NULL,
    status                text             NOT NULL,
    generation            bigint           NOT NULL,
    provider_operation_id text             NOT NULL DEFAULT '',
    result                bytea,
    created_at            timestamptz      NOT NULL,
    updated_at            timestamptz      NOT NULL,
    PRIMARY KEY (tenant, job_id, effect_key),
    FOREIGN KEY (tenant, job_id) REFERENCES jobs (tenant, id) ON DELETE CASCADE,
    CONSTRAINT job_effects_status_check
        CHECK (status IN ('reserved', 'succeeded', 'failed', 'unknown'))
);

-- Idempotency records have no foreign key to jobs: retention deletes (and
-- counts) a pruned job's records itself, and a record whose job is gone is
-- treated as expired. The key is (tenant, operation, key).
CREATE TABLE idempotency_keys (
    tenant      text COLLATE "C" NOT NULL,
    operation   text COLLATE "C" NOT NULL,
    key         text COLLATE "C" NOT NULL,
    fingerprint text             NOT NULL,
    job_id      text COLLATE "C" NOT NULL,
    expires_at  timestamptz      NOT NULL,
    PRIMARY KEY (tenant, operation, key),
    CONSTRAINT idempotency_keys_operation_check CHECK (operation IN ('create_job'))
);

-- Expiry sweeps.
CREATE INDEX idempotency_keys_expires_idx ON idempotency_keys (expires_at);
-- Removing the records of pruned jobs.
CREATE INDEX idempotency_keys_job_idx ON idempotency_keys (tenant, job_id);

CREATE TABLE queue_policies (
    tenant                  text COLLATE "C" NOT NULL,
    queue                   text COLLATE "C" NOT NULL,
    max_attempts            integer          NOT NULL,
    initial_delay_ns        bigint           NOT NULL,
    max_delay_ns            bigint           NOT NULL,
    multiplier              double precision NOT NULL,
    jitter_fraction         double precision NOT NULL,
    retryable_codes         text[]           NOT NULL DEFAULT '{}',
    non_retryable_codes     text[]           NOT NULL DEFAULT '{}',
    total_retry_deadline_ns bigint           NOT NULL DEFAULT 0,
    default_lease_ns        bigint           NOT NULL,
    concurrency_limit       integer          NOT NULL DEFAULT 0,
    paused                  boolean          NOT NULL DEFAULT false,
    updated_at              timestamptz      NOT NULL,
    PRIMARY KEY (tenant, queue)
);
