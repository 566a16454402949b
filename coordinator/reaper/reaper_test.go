package reaper

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is real time plus an offset the test moves.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func setup(t *testing.T, clk *clock, n int, lease time.Duration) store.Store {
	t.Helper()
	st, err := sqlite.Open(t.Context(), sqlite.Config{Path: filepath.Join(t.TempDir(), "r.db"), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if n == 0 {
		return st
	}
	reqs := make([]store.CreateRequest, n)
	for i := range reqs {
		reqs[i] = store.CreateRequest{Spec: store.JobSpec{Queue: "q", Kind: "k"}}
	}
	if _, err := st.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Claim(t.Context(), store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"q"}, Max: n, LeaseDuration: lease}); err != nil || len(got) != n {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	return st
}

func TestRunOnceReapsInBatchesAndPlansTheNextLook(t *testing.T) {
	clk := &clock{}
	st := setup(t, clk, 5, time.Minute)
	var reaped []store.ReapResult
	r := New(Config{Store: st, Batch: 2, Reaped: func(res store.ReapResult) { reaped = append(reaped, res) }})
	// Nothing expired: the next look is at the expiry, bounded.
	if d := r.runOnce(t.Context()); d != IntervalMaxDefault {
		t.Fatalf("sleep %s with leases expiring in a minute, want the %s bound", d, IntervalMaxDefault)
	}
	clk.Advance(2 * time.Minute)
	d := r.runOnce(t.Context())
	total := 0
	for _, res := range reaped {
		total += len(res.Jobs)
		if len(res.Jobs) > 2 {
			t.Errorf("a pass ended %d leases, more than the batch of 2", len(res.Jobs))
		}
	}
	if total != 5 || len(reaped) != 3 {
		t.Fatalf("ended %d leases in %d passes, want 5 in 3 (2+2+1)", total, len(reaped))
	}
	if d != IntervalMaxDefault {
		t.Fatalf("sleep %s with nothing leased, want %s", d, IntervalMaxDefault)
	}
}

func TestExpectWakesTheReaperAtAnEarlierExpiry(t *testing.T) {
	clk := &clock{}
	st := setup(t, clk, 0, time.Second)
	looked := make(chan struct{}, 1)
	done := make(chan store.ReapResult, 1)
	// With nothing leased and an hour between looks, only Expect can bring
	// the reaper back in time.
	r := New(Config{Store: observed{st, looked}, IntervalMax: time.Hour, Reaped: func(res store.ReapResult) { done <- res }})
	r.Start(context.Background())
	defer r.Stop()
	<-looked // its first look found nothing leased
	if _, err := st.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}}}}); err != nil {
		t.Fatal(err)
	}
	got, err := st.Claim(t.Context(), store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"q"}, Max: 1, LeaseDuration: time.Second})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim: %d, %v", len(got), err)
	}
	r.Expect(got[0].Job.LeaseExpiresAt)
	select {
	case res := <-done:
		if len(res.Jobs) != 1 || res.Jobs[0].State != store.JobStateQueued {
			t.Fatalf("reaped %+v, want the job queued again", res.Jobs)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the reaper did not wake at the expiry it was told of")
	}
	r.Stop()
	r.Stop() // safe twice
}

// observed signals each ReapExpired call.
type observed struct {
	store.Store
	looked chan<- struct{}
}

func (o observed) ReapExpired(ctx context.Context, p store.ReapParams) (store.ReapResult, error) {
	res, err := o.Store.ReapExpired(ctx, p)
	select {
	case o.looked <- struct{}{}:
	default:
	}
	return res, err
}

func TestStopBeforeStartIsSafe(t *testing.T) {
	New(Config{}).Stop()
}
