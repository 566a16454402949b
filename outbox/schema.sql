-- The Leasehold outbox, schema version 2, for the application's
-- own PostgreSQL (13 or later). Generated from Go constants by
-- outbox.SchemaSQL: edit schema.sql.tmpl, never the rendered schema.sql.
--
-- Every CHECK below refuses at insert what the coordinator would refuse
-- when the relay hands the row over; the limits come from the same
-- constants the coordinator validates with (package store).

CREATE SCHEMA IF NOT EXISTS leasehold_outbox;

CREATE TABLE IF NOT EXISTS leasehold_outbox.schema_version (
    version      integer PRIMARY KEY,
    installed_at timestamptz NOT NULL DEFAULT now()
);

-- A queue, kind or dependency name: store.ValidName.
CREATE OR REPLACE FUNCTION leasehold_outbox.valid_name(s text) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT s ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$'
$$;

-- Metadata: a JSON object of at most 64 string entries,
-- keys 1-128 bytes, values at most 4096 bytes
-- (store.ValidateMetadata).
CREATE OR REPLACE FUNCTION leasehold_outbox.valid_metadata(m jsonb) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT jsonb_typeof(m) = 'object'
       AND (SELECT count(*) FROM jsonb_each(m)) <= 64
       AND NOT EXISTS (
           SELECT 1 FROM jsonb_each(m) AS e(key, value)
            WHERE octet_length(e.key) NOT BETWEEN 1 AND 128
               OR jsonb_typeof(e.value) <> 'string'
               OR octet_length(e.value #>> '{}') > 4096)
$$;

-- One row per job to create. The relay deletes a row once the coordinator
-- has the job; request_id is the job's idempotency key, so a row sent
-- twice (a relay killed between the call and its DELETE) is one job.
-- There is no tenant column: the relay's credential decides the tenant.
CREATE TABLE IF NOT EXISTS leasehold_outbox.outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    request_id      text NOT NULL DEFAULT gen_random_uuid()::text,
    queue           text NOT NULL,
    kind            text NOT NULL,
    payload         bytea NOT NULL DEFAULT '\x',
    metadata        jsonb NOT NULL DEFAULT '{}',
    priority        integer NOT NULL DEFAULT 0,
    run_at          timestamptz,
    max_attempts    integer NOT NULL DEFAULT 0,
    dependency      text NOT NULL DEFAULT '',
    concurrency_key text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT outbox_request_id_key UNIQUE (request_id),
    CONSTRAINT outbox_request_id_check CHECK (octet_length(request_id) BETWEEN 1 AND 256),
    CONSTRAINT outbox_queue_check CHECK (leasehold_outbox.valid_name(queue)),
    CONSTRAINT outbox_kind_check CHECK (leasehold_outbox.valid_name(kind)),
    CONSTRAINT outbox_payload_check CHECK (octet_length(payload) <= 1048576),
    CONSTRAINT outbox_metadata_check CHECK (leasehold_outbox.valid_metadata(metadata)),
    CONSTRAINT outbox_priority_check CHECK (priority BETWEEN -1000 AND 1000),
    CONSTRAINT outbox_run_at_check CHECK (run_at IS NULL OR (run_at >= '1970-01-01 00:00:00+00'
        AND run_at <= now() + interval '8784 hours')),
    CONSTRAINT outbox_max_attempts_check CHECK (max_attempts BETWEEN 0 AND 1000),
    CONSTRAINT outbox_dependency_check CHECK (dependency = '' OR leasehold_outbox.valid_name(dependency)),
    CONSTRAINT outbox_concurrency_key_check CHECK (octet_length(concurrency_key) <= 128)
) WITH (
    -- Every row is inserted once and deleted once: vacuum on a row count,
    -- not a fraction of a table whose size swings from 0 to a backlog, and
    -- without throttling, so dead tuples never pile up under the relay's
    -- index scans.
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 5000,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 5000,
    autovacuum_vacuum_cost_delay = 0
);

-- Rows the coordinator refused for good (invalid, out of the relay's
-- scope, an idempotency conflict), with the refusal. Nothing reads them
-- but people: fix the cause, then move them back (docs/outbox.md).
CREATE TABLE IF NOT EXISTS leasehold_outbox.outbox_dead (
    id              bigint PRIMARY KEY,
    request_id      text NOT NULL,
    queue           text NOT NULL,
    kind            text NOT NULL,
    payload         bytea NOT NULL,
    metadata        jsonb NOT NULL,
    priority        integer NOT NULL,
    run_at          timestamptz,
    max_attempts    integer NOT NULL,
    dependency      text NOT NULL,
    concurrency_key text NOT NULL,
    created_at      timestamptz NOT NULL,
    error_code      text NOT NULL,
    error_message   text NOT NULL,
    dead_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Version 2: the job's unique key (docs/unique-jobs.md), NULL for none.
-- While a job with the key is live the coordinator answers that job
-- instead of creating another, and the relay deletes the row as
-- delivered. Added by ALTER so that installing over version 1 upgrades
-- it; store.ValidateUnique's rules for a given key.
ALTER TABLE leasehold_outbox.outbox ADD COLUMN IF NOT EXISTS unique_key text
    CONSTRAINT outbox_unique_key_check CHECK (unique_key IS NULL OR (octet_length(unique_key) BETWEEN 1 AND 256
        AND left(unique_key, 8) <> 'derived:'));
ALTER TABLE leasehold_outbox.outbox_dead ADD COLUMN IF NOT EXISTS unique_key text;

-- One notification per inserting statement wakes every relay at once;
-- PostgreSQL folds identical notifications of one transaction into one.
CREATE OR REPLACE FUNCTION leasehold_outbox.notify_relay() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('leasehold_outbox', '');
    RETURN NULL;
END
$$;

DROP TRIGGER IF EXISTS outbox_notify_relay ON leasehold_outbox.outbox;
CREATE TRIGGER outbox_notify_relay AFTER INSERT ON leasehold_outbox.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION leasehold_outbox.notify_relay();

INSERT INTO leasehold_outbox.schema_version (version) VALUES (2) ON CONFLICT DO NOTHING;
