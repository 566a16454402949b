package retention

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup returns a real SQLite store with one job finished at t0 and one
// still queued.
func setup(t *testing.T, t0 time.Time) (st store.Store, finished, queued string) {
	t.Helper()
	ctx := context.Background()
	s, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	res, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t", Now: t0, Requests: []store.CreateRequest{
		{Spec: store.JobSpec{Queue: "q", Kind: "k"}, RequestID: "r1"},
		{Spec: store.JobSpec{Queue: "later", Kind: "k"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"q"}, Max: 1, Now: t0})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if _, err := s.Complete(ctx, store.CompleteParams{Tenant: "t", Token: claimed[0].Token, Now: t0}); err != nil {
		t.Fatal(err)
	}
	return s, res[0].Job.ID, res[1].Job.ID
}

func TestRunOncePrunesOnlyFinishedJobsPastRetention(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	st, finished, queued := setup(t, t0)
	ctx := context.Background()
	now := t0.Add(24 * time.Hour)
	p := New(Config{Store: st, Retention: 7 * 24 * time.Hour, Now: func() time.Time { return now }})

	if res, err := p.runOnce(ctx); err != nil || res.Jobs != 0 {
		t.Fatalf("within retention: %+v, %v; want nothing pruned", res, err)
	}
	now = t0.Add(8 * 24 * time.Hour)
	res, err := p.runOnce(ctx)
	if err != nil || res.Jobs != 1 {
		t.Fatalf("past retention: %+v, %v; want 1 job pruned", res, err)
	}
	if _, err := st.GetJob(ctx, "t", finished); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("finished job after pruning: %v", err)
	}
	if j, err := st.GetJob(ctx, "t", queued); err != nil || j.State != store.JobStateQueued {
		t.Fatalf("queued job after pruning: %v, %v", j, err)
	}
	// A second coordinator running the same pass finds nothing to do.
	if res, err := p.runOnce(ctx); err != nil || res.Jobs != 0 {
		t.Fatalf("second pass: %+v, %v", res, err)
	}
}

func TestNegativeRetentionKeepsFinishedJobs(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	st, finished, _ := setup(t, t0)
	p := New(Config{Store: st, Retention: -1, Now: func() time.Time { return t0.Add(365 * 24 * time.Hour) }})
	if _, err := p.runOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetJob(context.Background(), "t", finished); err != nil {
		t.Fatalf("finished job with pruning disabled: %v", err)
	}
}

func TestStartStopIsSafeTwice(t *testing.T) {
	t.Parallel()
	st, _, _ := setup(t, time.Now())
	p := New(Config{Store: st, Interval: time.Hour})
	p.Stop() // before Start
	p.Start(context.Background())
	p.Start(context.Background())
	<-p.Started()
	p.Stop()
	select {
	case <-p.Stopped():
	default:
		t.Fatal("Stop returned before the pruning loop ended")
	}
	p.Stop()
}
