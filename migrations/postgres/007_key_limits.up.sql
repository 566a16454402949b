-- +goose Up
-- Per-key concurrency and start-rate limits. A job may carry a concurrency
-- key (a customer id, say); a queue policy may cap the leases per key and
-- the starts per interval (per queue or per key), fleet-wide. Adding a
-- column with a constant default rewrites nothing.

ALTER TABLE jobs ADD COLUMN concurrency_key text NOT NULL DEFAULT '';

-- The policy's per-key and rate limits, as JSON the store encodes.
ALTER TABLE queue_policies ADD COLUMN limits text NOT NULL DEFAULT '{}';

-- Starts per fixed rate window: key '' counts the queue as a whole. Only
-- the current window of a queue is read; claims delete older ones.
CREATE TABLE rate_windows (
    tenant       text COLLATE "C" NOT NULL,
    queue        text COLLATE "C" NOT NULL,
    key          text COLLATE "C" NOT NULL,
    window_start timestamptz      NOT NULL,
    starts       bigint           NOT NULL,
    PRIMARY KEY (tenant, queue, window_start, key)
);
