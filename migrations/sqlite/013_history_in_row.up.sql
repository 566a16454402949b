-- +goose Up
-- One row per job with its history in the row (see
-- migrations/postgres/013_history_in_row.up.sql): the claim's expiry and
-- LEASED sequence, the create's available_at (NULL: created_at), the log
-- of ended attempts (JSON text the store encodes; NULL: none), and the
-- sequence up to which a row's events are all in job_events.
ALTER TABLE jobs ADD COLUMN leased_until INTEGER;
ALTER TABLE jobs ADD COLUMN leased_seq INTEGER;
ALTER TABLE jobs ADD COLUMN queued_available_at INTEGER;
ALTER TABLE jobs ADD COLUMN attempt_log TEXT;
ALTER TABLE jobs ADD COLUMN events_stored_through INTEGER NOT NULL DEFAULT 0;
ALTER TABLE job_attempts ADD COLUMN record TEXT;

-- Rows written before this migration have every event stored.
UPDATE jobs SET events_stored_through = 9223372036854775807;
