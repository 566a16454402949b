-- +goose Up
-- Dispatch at fleet scale: claims take only queued jobs, a reaper ends
-- expired leases, and an attempt row is written once, when the attempt
-- ends (see migrations/postgres/003_dispatch.up.sql).

ALTER TABLE jobs ADD COLUMN leased_at INTEGER;
UPDATE jobs SET leased_at = (
    SELECT a.claimed_at FROM job_attempts a
    WHERE a.tenant = jobs.tenant AND a.job_id = jobs.id AND a.generation = jobs.lease_generation)
WHERE state = 'leased';
DELETE FROM job_attempts WHERE outcome = 'running';

DROP INDEX jobs_leased_idx;
DROP INDEX jobs_cancel_requested_idx;
CREATE INDEX jobs_leased_idx ON jobs (lease_expires_at) WHERE state = 'leased';

ALTER TABLE queue_policies ADD COLUMN max_lease_duration_ns INTEGER NOT NULL DEFAULT 600000000000
    CHECK (max_lease_duration_ns > 0);
