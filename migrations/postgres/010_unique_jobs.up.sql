-- +goose Up
-- Unique jobs. A job may carry a unique key (given by the producer, or
-- derived from its kind and chosen metadata values: store.UniqueKey).
-- While a job with the key is live (queued, which includes scheduled and
-- retry-waiting jobs, or leased: store.UniqueLiveStates), the partial
-- unique index below refuses a second one: a create inserts with
-- ON CONFLICT (tenant, unique_key) WHERE <this predicate> DO NOTHING and
-- answers the job that holds the key. No advisory lock is taken. The key
-- is per tenant, not per queue.
ALTER TABLE jobs ADD COLUMN unique_key text COLLATE "C";

CREATE UNIQUE INDEX jobs_unique_live_idx ON jobs (tenant, unique_key)
    WHERE unique_key IS NOT NULL AND state IN ('queued', 'leased');

-- A create with a period holds its key here until expires_at, finished
-- or not (at most one job per key per period), like idempotency records.
-- Retention deletes expired records; a record whose job retention removed
-- counts as expired.
CREATE TABLE unique_keys (
    tenant     text COLLATE "C" NOT NULL,
    key        text COLLATE "C" NOT NULL,
    job_id     text COLLATE "C" NOT NULL,
    expires_at timestamptz      NOT NULL,
    PRIMARY KEY (tenant, key)
);

CREATE INDEX unique_keys_expires_idx ON unique_keys (expires_at);
