-- +goose Up
-- The leased set is indexed by queue, not by expiry, so that a renewal,
-- which writes only lease_expires_at, updates no index (see
-- migrations/postgres/013_hot_renewals.up.sql).
DROP INDEX jobs_leased_idx;
CREATE INDEX jobs_leased_idx ON jobs (tenant, queue) WHERE state = 'leased';
