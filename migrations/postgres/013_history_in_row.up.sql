-- +goose Up
-- One row per job with its history in the row (issue 23, items 1 and 2).
-- A successful job inserts its row and nothing else: its events are
-- derived from the row (store.DeriveEvents) instead of inserted into
-- job_events, and its ended attempts are records in the row instead of
-- rows of job_attempts.
--
-- The running attempt is in columns. leased_until (the expiry the claim
-- gave) and leased_seq (its LEASED event's sequence) are written by the
-- claim and never by a renewal, and no index holds them, so renewals stay
-- HOT updates.
ALTER TABLE jobs ADD COLUMN leased_until timestamptz;
ALTER TABLE jobs ADD COLUMN leased_seq bigint;

-- The create's available_at, for the QUEUED event; NULL: created_at (every
-- job created to run now).
ALTER TABLE jobs ADD COLUMN queued_available_at timestamptz;

-- Ended attempts (store.AttemptRecord, encoded by the store), appended by
-- the statement that ends each attempt; NULL: none yet. Past
-- store.AttemptLogCap records the oldest moves to job_attempts, with its
-- record, so job_attempts is written only for such jobs.
ALTER TABLE jobs ADD COLUMN attempt_log jsonb;
ALTER TABLE job_attempts ADD COLUMN record jsonb;

-- Events with a sequence at or below events_stored_through are read from
-- job_events only. Rows written before this migration have every event
-- stored: they get the largest bigint (a constant default rewrites no
-- row), which the first statement that derives an event for the row
-- lowers to its last stored sequence. New rows start at 0: only their
-- rare events (checkpoints, cancel requests, replays, abandons, client
-- cancels) are stored.
ALTER TABLE jobs ADD COLUMN events_stored_through bigint NOT NULL DEFAULT 9223372036854775807;
ALTER TABLE jobs ALTER COLUMN events_stored_through SET DEFAULT 0;

-- WatchJob wake-ups (migration 008) came from the inserts into job_events,
-- which most changes no longer make. They now come from the job rows:
-- every change that makes an event raises last_event_seq, and a create
-- inserts the row. Statement-level triggers with transition tables, so a
-- batch of 50 jobs costs one check of watch_presence, and nothing is sent
-- while no coordinator has watchers.
DROP TRIGGER job_events_notify_changes ON job_events;

-- +goose StatementBegin
CREATE FUNCTION leasehold_notify_job_rows() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    watched boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.watch_presence WHERE until > now())', TG_TABLE_SCHEMA)
    INTO watched;
    IF NOT watched THEN
        RETURN NULL;
    END IF;
    IF TG_OP = 'INSERT' THEN
        PERFORM pg_notify('leasehold_changes_' || substr(md5(TG_TABLE_SCHEMA), 1, 8),
                          c.tenant || chr(31) || c.id)
        FROM (SELECT DISTINCT tenant, id FROM new_rows) c;
    ELSE
        PERFORM pg_notify('leasehold_changes_' || substr(md5(TG_TABLE_SCHEMA), 1, 8),
                          c.tenant || chr(31) || c.id)
        FROM (SELECT DISTINCT n.tenant, n.id FROM new_rows n JOIN old_rows o ON o.tenant = n.tenant AND o.id = n.id
              WHERE n.last_event_seq <> o.last_event_seq) c;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER jobs_notify_inserts AFTER INSERT ON jobs
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_job_rows();

CREATE TRIGGER jobs_notify_updates AFTER UPDATE ON jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_job_rows();
