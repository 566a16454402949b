-- +goose Up
-- Every change of a job appends to its history, so a trigger on job_events
-- tells the coordinators sharing the database which jobs changed: a
-- WatchJob stream on any of them wakes for its own job only, with no
-- polling. One notification per job per statement (PostgreSQL also folds
-- duplicates within a transaction), delivered at commit, so a woken
-- watcher reads the committed events.
--
-- The channel is per schema, like the job wake-ups' (deployments or tests
-- side by side in one database never wake each other): leasehold_changes_
-- and the first 8 hex digits of the md5 of the schema's name. The payload
-- is tenant 0x1f job_id.
-- +goose StatementBegin
CREATE FUNCTION leasehold_notify_job_changes() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('leasehold_changes_' || substr(md5(TG_TABLE_SCHEMA), 1, 8),
                      c.tenant || chr(31) || c.job_id)
    FROM (SELECT DISTINCT tenant, job_id FROM new_events) c;
    RETURN NULL;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER job_events_notify_changes AFTER INSERT ON job_events
REFERENCING NEW TABLE AS new_events
FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_job_changes();
