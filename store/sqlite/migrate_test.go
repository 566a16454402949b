package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// TestLeanWritesKeepsHistory migrates a file to version 7, writes a
// finished job's history as that schema stored it, then opens the store
// (migration 8 rebuilds job_events and job_attempts WITHOUT ROWID): the
// history reads back unchanged, the tables are keyed by their primary
// keys, and deleting the job still cascades to its rows.
func TestLeanWritesKeepsHistory(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", path+"?_pragma=foreign_keys(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src, err := migrations.Source(migrations.SQLite)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, db, src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), 7); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`INSERT INTO jobs (tenant, id, queue, kind, payload, state, attempts, max_attempts, lease_owner,
		    lease_generation, created_at, available_at, finished_at, leased_at, last_event_seq)
		 VALUES ('t1', 'j1', 'q', 'k', x'', 'succeeded', 1, 3, 'w1', 1, 10, 10, 30, 20, 3)`,
		`INSERT INTO job_events (tenant, job_id, seq, type, at, data) VALUES
		    ('t1', 'j1', 1, 'queued', 10, '{}'), ('t1', 'j1', 2, 'leased', 20, '{"worker_id":"w1"}'),
		    ('t1', 'j1', 3, 'succeeded', 30, '{}')`,
		`INSERT INTO job_attempts (tenant, job_id, attempt, generation, worker_id, claimed_at, finished_at, outcome)
		 VALUES ('t1', 'j1', 1, 1, 'w1', 20, 30, 'succeeded')`,
	} {
		if _, err := db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	events, err := s.ListEvents(t.Context(), store.ListEventsParams{Tenant: "t1", JobID: "j1", Limit: 10})
	if err != nil || len(events) != 3 || events[1].Type != store.EventLeased || events[1].Data != `{"worker_id":"w1"}` {
		t.Fatalf("events after migration: %+v, %v", events, err)
	}
	attempts, err := s.ListAttempts(t.Context(), "t1", "j1")
	if err != nil || len(attempts) != 1 || attempts[0].Outcome != store.AttemptSucceeded || attempts[0].WorkerID != "w1" {
		t.Fatalf("attempts after migration: %+v, %v", attempts, err)
	}
	for _, table := range []string{"job_events", "job_attempts"} {
		var ddl string
		if err := db.QueryRowContext(t.Context(), `SELECT sql FROM sqlite_schema WHERE name = ?`, table).Scan(&ddl); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(ddl, "WITHOUT ROWID") || !strings.Contains(ddl, "ON DELETE CASCADE") {
			t.Errorf("%s is not a WITHOUT ROWID table cascading from jobs: %s", table, ddl)
		}
	}
	if _, err := db.ExecContext(t.Context(), `DELETE FROM jobs WHERE tenant = 't1' AND id = 'j1'`); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := db.QueryRowContext(t.Context(),
		`SELECT (SELECT count(*) FROM job_events) + (SELECT count(*) FROM job_attempts)`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("rows left after the job was deleted: %d, %v", left, err)
	}
}
