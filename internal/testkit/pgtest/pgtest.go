// Package pgtest gives each test its own PostgreSQL schema on the test
// database, so tests run in parallel without seeing each other's rows.
//
// Schema is an empty schema (for tests of migrating itself);
// MigratedSchema holds the current migrations. Migrating a schema runs
// goose: a version table, an advisory lock and a transaction per
// migration. MigratedSchema pays that once per test binary, in a template
// schema, and gives each test a copy made in one round trip (see
// template.go).
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
	"errors"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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

// Schema creates a fresh, empty schema, drops it when the test ends, and
// returns a connection URL whose search_path is that schema. Every
// connection opened with the URL (pgx pools, database/sql) works inside the
// schema only.
func Schema(t testing.TB) string {
	t.Helper()
	return newSchema(t, "lh_test_", "")
}

// MigratedSchema is Schema holding every migration, as postgres.Migrate
// leaves it (goose's version table included, so migrating it again is a
// no-op). The schema is a copy of a template migrated once per test
// binary, made in one round trip.
func MigratedSchema(t testing.TB) string {
	t.Helper()
	tmpl := loadTemplate(t)
	if tmpl.script == "" {
		// The migrations cannot be replayed as one script (see
		// replayable): migrate this schema with goose, as the template was.
		u := Schema(t)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := migrate(ctx, u); err != nil {
			t.Fatalf("pgtest: migrate a test schema: %v", err)
		}
		return u
	}
	return newSchema(t, "lh_test_", tmpl.script)
}

// newSchema creates a schema named prefix + random hex, runs script in it
// in the same transaction (one round trip), registers the drop, and
// returns the schema's URL.
func newSchema(t testing.TB, prefix, script string) string {
	t.Helper()
	base := BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := randomName(prefix)
	err := withConn(ctx, base, func(conn *pgx.Conn) error {
		_, err := conn.PgConn().Exec(ctx, createScript(schema, script)).ReadAll()
		return err
	})
	if err != nil {
		if isConnectError(err) {
			t.Fatalf("PostgreSQL is required for this test and could not be reached at %s (set %s): %v", redact(base), EnvURL, err)
		}
		t.Fatalf("pgtest: create test schema: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := withConn(ctx, base, func(conn *pgx.Conn) error {
			_, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			return err
		})
		if err != nil {
			t.Errorf("pgtest: drop test schema %s: %v", schema, err)
		}
	})
	return schemaURL(t, base, schema)
}

// idleConns keeps a few connections for creating and dropping schemas
// between tests: a new PostgreSQL backend costs tens of milliseconds of
// server CPU here, two per test otherwise. A pgx.Conn runs no goroutine
// of its own, so nothing shows up in the packages' goleak checks; the
// connections close when the test binary exits.
var idleConns struct {
	sync.Mutex // guards conns
	conns      []*pgx.Conn
}

// idleConnsMax bounds idleConns (about the tests that run at once).
const idleConnsMax = 4

// connectError is a failure to reach the server at all.
type connectError struct{ err error }

func (e *connectError) Error() string { return e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

func isConnectError(err error) bool {
	var ce *connectError
	return errors.As(err, &ce)
}

// withConn runs fn on an idle connection to base, or a new one, and keeps
// the connection for the next call unless fn failed. A kept connection
// found dead (the server restarted, say) is replaced once.
func withConn(ctx context.Context, base string, fn func(*pgx.Conn) error) error {
	idleConns.Lock()
	var conn *pgx.Conn
	if n := len(idleConns.conns); n > 0 {
		conn, idleConns.conns = idleConns.conns[n-1], idleConns.conns[:n-1]
	}
	idleConns.Unlock()
	kept := conn != nil
	if !kept {
		var err error
		if conn, err = pgx.Connect(ctx, base); err != nil {
			return &connectError{err}
		}
	}
	if err := fn(conn); err != nil {
		dead := conn.IsClosed()
		_ = conn.Close(ctx) // its state is unknown
		if kept && dead {
			return withConn(ctx, base, fn)
		}
		return err
	}
	idleConns.Lock()
	defer idleConns.Unlock()
	if len(idleConns.conns) < idleConnsMax {
		idleConns.conns = append(idleConns.conns, conn)
		return nil
	}
	return conn.Close(ctx)
}

// createScript creates schema and runs script inside it. A multi-statement
// simple query is one implicit transaction, so SET LOCAL holds for it and
// a failure leaves nothing behind.
func createScript(schema, script string) string {
	id := pgx.Identifier{schema}.Sanitize()
	if script == "" {
		return "CREATE SCHEMA " + id
	}
	return "CREATE SCHEMA " + id + ";\nSET LOCAL search_path TO " + id + ";\n" + script
}

func randomName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// schemaURL is base with search_path set to schema.
func schemaURL(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := withSearchPath(base, schema)
	if err != nil {
		t.Fatalf("parse %s: %v", EnvURL, err)
	}
	return u
}

func withSearchPath(base, schema string) (string, error) {
	u, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
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
		// DROP DATABASE waits for a checkpoint, which on a loaded server
		// (other tests writing) took over 30 s. A database left behind is
		// the harness's litter, not the test's failure: it is logged.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, base)
		if err != nil {
			t.Errorf("drop test database %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
		switch {
		case errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err):
			t.Logf("drop test database %s: still not done after 2 minutes (%v); it is left behind", name, err)
		case err != nil:
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
