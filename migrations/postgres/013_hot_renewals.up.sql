-- +goose Up
-- Renewals become HOT updates. A renewal writes only lease_expires_at;
-- while an index held that column, each renewal wrote a new entry into
-- every index of jobs. The leased set is now indexed by queue, which a
-- renewal never changes: the reaper walks the (fleet-sized) leased set
-- and filters by expiry, and counting a queue's leases for its
-- concurrency limit reads only that queue's entries.
DROP INDEX jobs_leased_idx;
CREATE INDEX jobs_leased_idx ON jobs (tenant, queue) WHERE state = 'leased';

