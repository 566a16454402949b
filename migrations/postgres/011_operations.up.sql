-- +goose Up
-- Bulk operations (store/operation.go). An operation's match is fixed when
-- it starts: one item per matching job, inserted by the statement that
-- inserts the operation. Chunks mark items with their result (0 pending,
-- 1 acted, 2 skipped as changed, 3 skipped out of scope, 4 failed) in
-- the transaction that acts on their jobs, so a resumed operation never
-- acts twice. A coordinator works on an operation while it holds its
-- lease (lease_owner, lease_expires_at).
CREATE TABLE operations (
    tenant              text COLLATE "C" NOT NULL,
    id                  text COLLATE "C" NOT NULL,
    kind                text             NOT NULL,
    state               text             NOT NULL,
    filter              text             NOT NULL,
    reason              text             NOT NULL DEFAULT '',
    priority            integer          NOT NULL DEFAULT 0,
    actor               text             NOT NULL DEFAULT '',
    actor_name          text             NOT NULL DEFAULT '',
    queue_scope         text             NOT NULL DEFAULT '[]',
    created_at          timestamptz      NOT NULL,
    updated_at          timestamptz,
    finished_at         timestamptz,
    matched             bigint           NOT NULL DEFAULT 0,
    acted               bigint           NOT NULL DEFAULT 0,
    skipped_changed     bigint           NOT NULL DEFAULT 0,
    skipped_out_of_scope bigint          NOT NULL DEFAULT 0,
    failed              bigint           NOT NULL DEFAULT 0,
    error               text             NOT NULL DEFAULT '',
    cancel_requested    boolean          NOT NULL DEFAULT false,
    lease_owner         text             NOT NULL DEFAULT '',
    lease_expires_at    timestamptz,
    PRIMARY KEY (tenant, id),
    CONSTRAINT operations_state_check
        CHECK (state IN ('running', 'succeeded', 'cancelled', 'failed')),
    CONSTRAINT operations_finished_check
        CHECK ((state = 'running') = (finished_at IS NULL))
);

-- Claiming: running operations, oldest first.
CREATE INDEX operations_running_idx ON operations (created_at) WHERE state = 'running';
-- Listing, newest first.
CREATE INDEX operations_list_idx ON operations (tenant, created_at DESC, id DESC);
-- Retention: finished operations by age.
CREATE INDEX operations_finished_idx ON operations (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE operation_items (
    tenant       text COLLATE "C" NOT NULL,
    operation_id text COLLATE "C" NOT NULL,
    job_id       text COLLATE "C" NOT NULL,
    result       smallint         NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant, operation_id, job_id),
    FOREIGN KEY (tenant, operation_id) REFERENCES operations (tenant, id) ON DELETE CASCADE
);

-- A chunk reads the next pending items in job id order.
CREATE INDEX operation_items_pending_idx ON operation_items (tenant, operation_id, job_id) WHERE result = 0;
