package bulk

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestRunOnceRunsAnOperationToTheEnd: RunOnce claims the operation, runs
// its chunks (reporting each) and reports it finished; the next RunOnce
// finds nothing.
func TestRunOnceRunsAnOperationToTheEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := openStore(t)
	var reqs []store.CreateRequest
	for range 5 {
		reqs = append(reqs, store.CreateRequest{Spec: store.JobSpec{Queue: "q", Kind: "k"}})
	}
	if _, err := st.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t", Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	op, err := st.StartOperation(ctx, store.StartOperationParams{Tenant: "t", Kind: store.OperationSetPriority, Priority: 9,
		Filter: store.JobFilter{Queues: []string{"q"}}, FilterText: "queue = q"})
	if err != nil {
		t.Fatal(err)
	}
	var chunks, running atomic.Int64
	var finished atomic.Pointer[store.Operation]
	r := New(Config{Store: st, Owner: "c1", Chunk: 2, Rate: -1,
		Chunked:  func(context.Context, store.ChunkResult, time.Duration) { chunks.Add(1) },
		Finished: func(_ context.Context, op *store.Operation) { finished.Store(op) },
		Running:  func(d int) { running.Add(int64(d)) },
	})
	worked, err := r.RunOnce(ctx)
	if err != nil || !worked {
		t.Fatalf("RunOnce: %v, %v", worked, err)
	}
	got := finished.Load()
	if got == nil || got.ID != op.ID || got.State != store.OperationSucceeded || got.Counts.Acted != 5 {
		t.Fatalf("finished %+v", got)
	}
	if chunks.Load() != 3 || running.Load() != 0 {
		t.Errorf("%d chunks (want 3 of at most 2), running %d after", chunks.Load(), running.Load())
	}
	if worked, err := r.RunOnce(ctx); err != nil || worked {
		t.Errorf("second RunOnce: %v, %v; want nothing to do", worked, err)
	}
}

func TestPauseKeepsTheRate(t *testing.T) {
	t.Parallel()
	r := New(Config{Store: nil, Owner: "c", Rate: 1000})
	for _, tc := range []struct {
		n    int
		took time.Duration
		want time.Duration
	}{
		{1000, 0, time.Second},
		{1000, 300 * time.Millisecond, 700 * time.Millisecond},
		{1000, 2 * time.Second, 0},
		{0, 0, 0},
	} {
		if got := r.pause(tc.n, tc.took); got != tc.want {
			t.Errorf("pause(%d, %s) = %s, want %s", tc.n, tc.took, got, tc.want)
		}
	}
	if got := New(Config{Owner: "c", Rate: -1}).pause(1000, 0); got != 0 {
		t.Errorf("unpaced pause %s", got)
	}
}

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	r := New(Config{Store: openStore(t), Owner: "c", PollInterval: time.Millisecond})
	r.Start(context.Background())
	r.Start(context.Background()) // no-op
	<-r.Started()
	r.Wake()
	r.Stop()
	r.Stop() // safe twice
}
