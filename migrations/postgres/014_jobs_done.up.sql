-- +goose Up
-- Finished jobs move out of the hot table (issue 23, items 3 and 4).
--
-- jobs becomes a table partitioned by state:
--   jobs_live  queued and leased jobs: the table jobs was, with its hot
--              indexes (claim, leased, dependency, unique, listing).
--   jobs_dead  dead jobs, apart so that replay and abandon update them in
--              place and retention treats them on their own.
--   jobs_done  succeeded, failed and cancelled jobs, written once by the
--              move and never updated, partitioned again by RANGE (id):
--              ids are UUIDv7, whose first 48 bits are the creation time in
--              milliseconds, so a day of creation is a range of ids and a
--              lookup by id prunes to one partition. Ids that are not
--              UUIDv7 (an injected generator), and days with no partition,
--              go to jobs_done_default, which retention prunes in batches.
--
-- The move is PostgreSQL's row movement: the statement that ends a job
-- (a report batch, the reaper, a cancel) updates its state, and that one
-- statement deletes the row from jobs_live and inserts it into jobs_done,
-- so an id is in exactly one partition at every commit. Ids are created
-- only in jobs_live, whose primary key refuses a live duplicate; jobs_done's
-- primary key refuses a finished duplicate; an id in both would need the
-- id generator to repeat itself, which UUIDv7 does not. Every statement
-- that names jobs reads all three partitions, so reads see every job.
ALTER TABLE jobs RENAME TO jobs_live;

CREATE TABLE jobs (LIKE jobs_live INCLUDING DEFAULTS INCLUDING CONSTRAINTS)
    PARTITION BY LIST (state);

CREATE TABLE jobs_dead PARTITION OF jobs FOR VALUES IN ('dead');
ALTER TABLE jobs_dead ADD PRIMARY KEY (tenant, id);
CREATE INDEX jobs_dead_list_idx ON jobs_dead (tenant, finished_at DESC, id DESC);
CREATE INDEX jobs_dead_created_idx ON jobs_dead (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_dead_finished_idx ON jobs_dead (finished_at);

-- One b-tree besides the key (listing newest first), and a BRIN on
-- finished_at: rows arrive in finishing order, so it is a few pages, and
-- it lets retention ask whether a partition still holds a recent finish.
CREATE TABLE jobs_done PARTITION OF jobs
    FOR VALUES IN ('succeeded', 'failed', 'cancelled') PARTITION BY RANGE (id);
ALTER TABLE jobs_done ADD PRIMARY KEY (tenant, id);
CREATE INDEX jobs_done_list_idx ON jobs_done (tenant, created_at DESC, id DESC);
CREATE INDEX jobs_done_finished_brin ON jobs_done USING brin (finished_at);
CREATE TABLE jobs_done_default PARTITION OF jobs_done DEFAULT;

-- A day partition for every creation day of the finished jobs there are,
-- and for today and the next two days; the maintenance service keeps
-- creating them ahead (coordinator/retention).
-- +goose StatementBegin
DO $$
DECLARE
    d bigint;
    lo text;
    hi text;
BEGIN
    FOR d IN
        SELECT DISTINCT (('x' || replace(left(id, 13), '-', ''))::bit(48)::bigint / 86400000)
        FROM jobs_live
        WHERE state IN ('succeeded', 'failed', 'cancelled')
          AND id ~ '^[0-9a-f]{8}-[0-9a-f]{4}-7'
        UNION
        SELECT (extract(epoch FROM now())::bigint / 86400) + g FROM generate_series(0, 2) g
    LOOP
        lo := lpad(to_hex(d * 86400000), 12, '0');
        hi := lpad(to_hex((d + 1) * 86400000), 12, '0');
        EXECUTE format('CREATE TABLE %I PARTITION OF jobs_done FOR VALUES FROM (%L) TO (%L)',
            'jobs_done_' || to_char(to_timestamp(d * 86400) AT TIME ZONE 'UTC', 'YYYYMMDD'),
            left(lo, 8) || '-' || right(lo, 4), left(hi, 8) || '-' || right(hi, 4));
    END LOOP;
END
$$;
-- +goose StatementEnd

-- Existing finished and dead jobs move now, in this migration: one pass
-- over the table, no longer than the rewrite a column type change costs.
INSERT INTO jobs SELECT * FROM jobs_live WHERE state IN ('succeeded', 'failed', 'cancelled', 'dead');
DELETE FROM jobs_live WHERE state IN ('succeeded', 'failed', 'cancelled', 'dead');

-- Indexes over finished rows have nothing to hold in jobs_live any more.
DROP INDEX jobs_finished_idx;
DROP INDEX jobs_dead_idx;

ALTER TABLE jobs_live ADD CONSTRAINT jobs_live_state_check CHECK (state IN ('queued', 'leased'));
ALTER TABLE jobs ATTACH PARTITION jobs_live FOR VALUES IN ('queued', 'leased');
ALTER TABLE jobs_live DROP CONSTRAINT jobs_live_state_check;

-- WatchJob wake-ups (migration 013): statement triggers fire for the table
-- a statement names, so both jobs and jobs_live have them (013's stay on
-- jobs_live). Claims and renewals name jobs_live, which they never move a
-- row out of; every statement that may end a job names jobs, and a row it
-- moves to jobs_done is in its transition tables.
CREATE TRIGGER jobs_notify_inserts AFTER INSERT ON jobs
REFERENCING NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_job_rows();

CREATE TRIGGER jobs_notify_updates AFTER UPDATE ON jobs
REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
FOR EACH STATEMENT EXECUTE FUNCTION leasehold_notify_job_rows();
