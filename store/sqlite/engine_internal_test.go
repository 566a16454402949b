package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// TestPersistentLockIsUnavailable holds the file's write lock from a
// foreign connection (another process, as far as the engine can tell) and
// checks that a write waits, retries, then reports store.ErrUnavailable with
// a redacted message, commits nothing, and works again once the lock is
// gone.
func TestPersistentLockIsUnavailable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "busy.db")
	var commits atomic.Int32
	s, err := open(t.Context(), Config{Path: path, Options: store.EngineOptions{
		BeforeCommit: func(string) error { commits.Add(1); return nil },
	}}, lockWait{busyTimeout: 20 * time.Millisecond, retries: 2, backoff: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	other, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn, err := other.Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}

	req := store.CreateJobsParams{Tenant: "t1", Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}}}}
	_, err = s.CreateJobs(t.Context(), req)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("create under a foreign write lock: got %v, want ErrUnavailable", err)
	}
	for _, leak := range []string{"INSERT", "UPDATE", "jobs", "SELECT"} {
		if strings.Contains(err.Error(), leak) {
			t.Fatalf("error %q leaks SQL (%q)", err, leak)
		}
	}
	if n := commits.Load(); n != 0 {
		t.Fatalf("BeforeCommit ran %d times for a transaction that never began", n)
	}
	// Reads are not blocked by a writer in WAL mode.
	if _, err := s.ListJobs(t.Context(), store.ListJobsParams{Tenant: "t1"}); err != nil {
		t.Fatalf("read under a foreign write lock: %v", err)
	}

	if _, err := conn.ExecContext(t.Context(), "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	res, err := s.CreateJobs(t.Context(), req)
	if err != nil || len(res) != 1 {
		t.Fatalf("create after the lock was released: %v", err)
	}
}

// TestCanceledContextIsReportedAsSuch: a write given a done context fails
// with the context's error, not a driver error.
func TestCanceledContextIsReportedAsSuch(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "ctx.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t1", Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}}}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("create with a canceled context: got %v, want context.Canceled", err)
	}
}

// claimPlan returns SQLite's plan for a claim statement.
func queryPlan(t *testing.T, s *Store, query string, args ...any) []string {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, notused int
		var detail string
		if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestClaimAndReapPlansUseTheirIndexes: the claim finds QUEUED jobs through
// jobs_claim_idx, in claim order (no sort), and the reaper finds expired
// leases and the next expiry through jobs_leased_idx, never by scanning
// the jobs table, or claims and reaps slow down with every finished job
// kept for retention.
func TestClaimAndReapPlansUseTheirIndexes(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name, query, index string
		args               []any
	}{
		{"claim", qClaimCandidates, "INDEX jobs_claim_idx", []any{"t1", "q", int64(0), 10}},
		{"expired leases", qLockExpired, "INDEX jobs_leased_idx", []any{int64(0), 10}},
		{"next expiry", qNextExpiry, "INDEX jobs_leased_idx", nil},
		{"active leases", qActiveLeases, "INDEX jobs_leased_idx", []any{"t1", "q", int64(0)}},
	} {
		plan := queryPlan(t, s, c.query, c.args...)
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, c.index) {
			t.Errorf("%s: plan does not use %s:\n%s", c.name, c.index, text)
		}
		for _, line := range plan {
			if strings.HasPrefix(line, "SCAN jobs") && !strings.Contains(line, "INDEX") {
				t.Errorf("%s: plan scans the jobs table:\n%s", c.name, text)
			}
			if c.name == "claim" && strings.Contains(line, "TEMP B-TREE") {
				t.Errorf("claim plan sorts the queued candidates:\n%s", text)
			}
		}
	}
}
