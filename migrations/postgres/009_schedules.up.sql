-- +goose Up
-- Schedules: durable rows that create a job at each tick. next_tick_at is
-- the high-water mark: the oldest tick not yet handled. Any coordinator
-- fires a due schedule by advancing it with a conditional update in the
-- transaction that inserts the tick's job, so no leader is needed and a
-- tick creates one job. The definition is the store's JSON encoding
-- (store.EncodeScheduleSpec); queue is kept apart for filters and scopes.

CREATE TABLE schedules (
    tenant        text COLLATE "C" NOT NULL,
    id            text COLLATE "C" NOT NULL,
    name          text COLLATE "C" NOT NULL,
    queue         text COLLATE "C" NOT NULL,
    spec          jsonb            NOT NULL,
    paused        boolean          NOT NULL DEFAULT false,
    paused_reason text             NOT NULL DEFAULT '',
    -- NULL when paused or past its end.
    next_tick_at  timestamptz,
    last_tick_at  timestamptz,
    last_job_id   text COLLATE "C" NOT NULL DEFAULT '',
    -- The principal it fires as ('' with --auth none) and its identity.
    owner_id      text COLLATE "C" NOT NULL DEFAULT '',
    owner         text             NOT NULL DEFAULT '',
    -- The sequence of its newest run (schedule_runs.seq).
    run_seq       bigint           NOT NULL DEFAULT 0,
    created_at    timestamptz      NOT NULL,
    updated_at    timestamptz      NOT NULL,
    PRIMARY KEY (tenant, id),
    CONSTRAINT schedules_name_key UNIQUE (tenant, name),
    CONSTRAINT schedules_paused_check CHECK (NOT paused OR next_tick_at IS NULL)
);

-- The scheduler's poll: due schedules of every tenant, oldest tick first.
CREATE INDEX schedules_due_idx ON schedules (next_tick_at) WHERE next_tick_at IS NOT NULL;

-- The newest runs of each schedule (the store keeps store.ScheduleRunsKept
-- per schedule, deleting older ones as it records new ones).
CREATE TABLE schedule_runs (
    tenant       text COLLATE "C" NOT NULL,
    schedule_id  text COLLATE "C" NOT NULL,
    seq          bigint           NOT NULL,
    tick_at      timestamptz      NOT NULL,
    outcome      text             NOT NULL,
    job_id       text COLLATE "C" NOT NULL DEFAULT '',
    missed       bigint           NOT NULL DEFAULT 0,
    reason       text             NOT NULL DEFAULT '',
    recorded_at  timestamptz      NOT NULL,
    PRIMARY KEY (tenant, schedule_id, seq),
    FOREIGN KEY (tenant, schedule_id) REFERENCES schedules (tenant, id) ON DELETE CASCADE,
    CONSTRAINT schedule_runs_outcome_check CHECK (outcome IN ('fired', 'skipped', 'missed', 'triggered'))
);

-- The delay a failed attempt was retried after (0 when it was not), so that
-- decorrelated backoff can grow from the previous delay.
ALTER TABLE job_attempts ADD COLUMN retry_delay_ns bigint NOT NULL DEFAULT 0;
