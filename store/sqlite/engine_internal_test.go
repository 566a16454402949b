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
func claimPlan(t *testing.T, s *Store, query, queues string) []string {
	t.Helper()
	rows, err := s.rdb.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+query,
		"t1", int64(0), queues, 10, "w", `{"q":30000000}`)
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

// TestClaimPlanUsesTheClaimIndexes: the claim statements must find QUEUED
// jobs through jobs_claim_idx and expired leases through jobs_leased_idx,
// never by scanning the jobs table, or claims slow down with every live
// lease and every finished job kept for retention. For one queue the QUEUED
// walk is in claim order: no sort of the candidates.
func TestClaimPlanUsesTheClaimIndexes(t *testing.T) {
	t.Parallel()
	s, err := Open(t.Context(), Config{Path: filepath.Join(t.TempDir(), "plan.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, c := range []struct {
		name, query, queues string
		sortOK              bool
	}{
		{"one queue", qClaimOneQueue, "q", false},
		{"several queues", qClaim, `["q","r"]`, true},
	} {
		plan := claimPlan(t, s, c.query, c.queues)
		text := strings.Join(plan, "\n")
		for _, idx := range []string{"INDEX jobs_claim_idx", "INDEX jobs_leased_idx"} {
			if !strings.Contains(text, idx) {
				t.Errorf("%s: claim plan does not use %s:\n%s", c.name, idx, text)
			}
		}
		for i, line := range plan {
			if strings.HasPrefix(line, "SCAN jobs") {
				t.Errorf("%s: claim plan scans the jobs table:\n%s", c.name, text)
			}
			if !c.sortOK && strings.Contains(line, "jobs_claim_idx") && i+1 < len(plan) && strings.Contains(plan[i+1], "TEMP B-TREE") {
				t.Errorf("%s: claim plan sorts the queued candidates:\n%s", c.name, text)
			}
		}
	}
}
