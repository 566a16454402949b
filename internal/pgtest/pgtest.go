// Package pgtest gives each test its own PostgreSQL schema on the test
// database, so tests run in parallel without seeing each other's rows.
//
// The database comes from LEASEHOLD_TEST_DATABASE_URL, defaulting to the
// local test database. PostgreSQL is required: when it cannot be reached the
// test fails with instructions, it is never skipped, so a green run always
// means the PostgreSQL tests ran.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable with the test database URL.
const EnvURL = "LEASEHOLD_TEST_DATABASE_URL"

// DefaultURL is used when EnvURL is unset: the local server's "test"
// database with trust auth, as on the development machines and in CI.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

// BaseURL returns the test database URL.
func BaseURL() string {
	if u := os.Getenv(EnvURL); u != "" {
		return u
	}
	return DefaultURL
}

// Schema creates a fresh schema, drops it when the test ends, and returns a
// connection URL whose search_path is that schema. Every connection opened
// with the URL (pgx pools, database/sql) works inside the schema only.
func Schema(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL is required for this test and could not be reached at %s (set %s): %v", redact(base), EnvURL, err)
	}
	defer conn.Close(ctx)

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "lh_test_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("create test schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop test schema %s: %v", schema, err)
		}
	})

	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Database creates a database of its own, drops it when the test ends,
// and returns its URL. Tests that read database-wide statistics (commit
// counts in pg_stat_database) use it, so that other tests running at the
// same time do not count.
func Database(t testing.TB) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL is required for this test and could not be reached at %s (set %s): %v", redact(base), EnvURL, err)
	}
	defer conn.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "lh_test_db_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	u.Path = "/" + name
	return u.String()
}
