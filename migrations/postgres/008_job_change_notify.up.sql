-- +goose Up
-- Every change of a job appends to its history, so a trigger on job_events
-- tells the coordinators sharing the database which jobs changed: a
-- WatchJob stream on any of them wakes for its own job only, with no
-- polling. One notification per job per statement (PostgreSQL also folds
-- duplicates within a transaction), delivered at commit, so a woken
-- watcher reads the committed events.
--
-- Notifications are not free (every listening backend of the cluster
-- processes the queue they go through), so they are sent only while some
-- coordinator has watchers: it announces itself in watch_presence first,
-- refreshes its row while its watchers last, and deletes it when they are
-- gone. A row outlives a crashed coordinator by its expiry at most.
--
-- The channel is per schema, like the job wake-ups' (deployments or tests
-- side by side in one database never wake each other): leasehold_changes_
-- and the first 8 hex digits of the md5 of the schema's name. The payload
-- is tenant 0x1f job_id.
CREATE TABLE watch_presence (
    coordinator_id text COLLATE "C" PRIMARY KEY,
    until          timestamptz      NOT NULL
);

-- +goose StatementBegin
CREATE FUNCTION leasehold_notify_job_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    watched boolean;
BEGIN
    EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.watch_presence WHERE until > now())', TG_TABLE_SCHEMA)
    INTO watched;
    IF watched THEN
        PERFORM pg_notify('leasehold_changes_' || substr(md5(TG_TABLE_SCHEMA), 1, 8),
                          c.tenant || chr(31) || c.job_id)
        FROM (SELECT DISTINCT tenant, job_id FROM new_events) c;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER job_events_notify_changes AFTER INSERT ON job_events
REFERENCING NEW TABLE AS new_events
FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_job_changes();
