-- +goose Up
-- The key that signs lease secrets. One row, shared by every coordinator
-- of the database, so a lease claimed through one coordinator can be
-- reported through another. The first coordinator to start stores it.

CREATE TABLE lease_keys (
    id         smallint    PRIMARY KEY CHECK (id = 1),
    key        bytea       NOT NULL,
    created_at timestamptz NOT NULL
);
