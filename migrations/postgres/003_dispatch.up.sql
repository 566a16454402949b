-- +goose Up
-- Dispatch at fleet scale: claims take only queued jobs, a reaper ends
-- expired leases, and an attempt row is written once, when the attempt
-- ends.

-- When the current (or last) lease began: the running attempt is read from
-- the job row (holder, generation, attempt, leased_at) instead of a row
-- written at every claim and rewritten at every finish.
ALTER TABLE jobs ADD COLUMN leased_at timestamptz;
UPDATE jobs j SET leased_at = a.claimed_at
FROM job_attempts a
WHERE j.state = 'leased' AND a.tenant = j.tenant AND a.job_id = j.id AND a.generation = j.lease_generation;
DELETE FROM job_attempts WHERE outcome = 'running';

-- The reaper finds expired leases across tenants by expiry, and the
-- earliest expiry to sleep until; counting a queue's leases for its
-- concurrency limit walks the (fleet-sized) leased set.
DROP INDEX jobs_lease_expiry_idx;
CREATE INDEX jobs_leased_idx ON jobs (lease_expires_at) WHERE state = 'leased';

-- The longest lease a claim or renewal of the queue may ask for.
ALTER TABLE queue_policies ADD COLUMN max_lease_ns bigint NOT NULL DEFAULT 600000000000;
