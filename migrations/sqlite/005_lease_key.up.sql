-- +goose Up
-- The key that signs lease secrets (see the PostgreSQL migration).

CREATE TABLE lease_keys (
    id         INTEGER PRIMARY KEY CHECK (id = 1),
    key        BLOB    NOT NULL,
    created_at INTEGER NOT NULL
) STRICT;
