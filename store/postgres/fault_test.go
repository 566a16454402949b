package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
)

// TestConnectionLostBeforeCommitAnswersUnavailable: the database goes away
// under a report batch after its statements ran and before its COMMIT —
// here its backend is terminated, as a PostgreSQL restart would. Every
// caller of the batch gets ErrUnavailable (which the API answers as
// UNAVAILABLE: retry), nothing of the batch is stored, and the same
// reports succeed once the database answers again.
func TestConnectionLostBeforeCommitAnswersUnavailable(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A name of its own, so that only this test's backends are ended.
	app := fmt.Sprintf("lh_fault_%d", time.Now().UnixNano())
	url := migrated(t) + "&application_name=" + app
	admin, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())

	var (
		armed  atomic.Bool
		killed atomic.Int64
	)
	s := open(t, url, store.EngineOptions{BeforeCommit: func(op string) error {
		if op != "report" || !armed.CompareAndSwap(true, false) {
			return nil
		}
		// This transaction is the store's only one idle in a transaction:
		// end its backend, as a restart would.
		var n int64
		err := admin.QueryRow(context.Background(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE state = 'idle in transaction' AND application_name = $1`, app).Scan(&n)
		if err != nil {
			return err
		}
		killed.Store(n)
		return nil
	}})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var toks []store.LeaseToken
	for range 3 {
		if _, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t", Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}}}, Now: now}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"q"}, Max: 3, Now: now})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claim: %d, %v", len(claimed), err)
	}
	for _, c := range claimed {
		toks = append(toks, c.Token)
	}
	reports := []store.Report{
		{Kind: store.ReportComplete, Tenant: "t", Token: toks[0], Now: now.Add(time.Second)},
		{Kind: store.ReportRetry, Tenant: "t", Token: toks[1], Error: store.JobError{Code: "x", Retryable: true}, Now: now.Add(time.Second)},
		{Kind: store.ReportRelease, Tenant: "t", Token: toks[2], Now: now.Add(time.Second)},
	}
	armed.Store(true)
	// Three callers, one batch.
	var wg sync.WaitGroup
	errs := make([]error, len(reports))
	gate := make(chan struct{})
	for i := range reports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			_, errs[i] = s.ApplyReports(ctx, reports[i:i+1])
		}()
	}
	close(gate)
	wg.Wait()
	if killed.Load() == 0 {
		t.Fatal("no backend was terminated: the fault was not injected")
	}
	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if !errors.Is(err, store.ErrUnavailable) {
				t.Errorf("report %d in the broken batch: %v, want ErrUnavailable", i, err)
			}
		}
	}
	if failed == 0 {
		t.Fatal("every report was acknowledged although its commit was cut off")
	}
	// What was refused is not stored; what was acknowledged (a report
	// flushed in a later, healthy batch) is.
	for i, tok := range toks {
		j, err := s.GetJob(ctx, "t", tok.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if errs[i] != nil && j.State != store.JobStateLeased {
			t.Errorf("job %d after a refused report is %s, want still leased", i, j.State)
		}
		if errs[i] == nil && j.State == store.JobStateLeased {
			t.Errorf("job %d: its report was acknowledged but the job is still leased", i)
		}
	}
	// The database answers again: the refused reports go through.
	for i, err := range errs {
		if err == nil {
			continue
		}
		if _, err := s.ApplyReports(ctx, reports[i:i+1]); err != nil {
			t.Errorf("report %d again: %v", i, err)
		}
	}
}
