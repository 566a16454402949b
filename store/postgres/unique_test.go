package postgres_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestUniqueHolderFinishingAfterTheConflictIsRetried: a unique create
// whose insert found the key held, and whose holder then finished before
// the holder was read, inserts again and creates the job (the key is
// free), instead of answering a job that no longer holds the key or
// failing. The hook finishes the holder through a second store in that
// gap.
func TestUniqueHolderFinishingAfterTheConflictIsRetried(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	other := open(t, url, store.EngineOptions{})
	var (
		holder  store.ClaimedJob
		fired   atomic.Int32
		hookErr atomic.Value
	)
	s := open(t, url, store.EngineOptions{UniqueHeld: func(keys []string) {
		if fired.Add(1) != 1 {
			return
		}
		// Another coordinator finishes the holder now.
		if _, err := other.Complete(t.Context(), store.CompleteParams{Tenant: "t", Token: holder.Token, Now: epoch.Add(2 * time.Second)}); err != nil {
			hookErr.Store(err)
		}
	}})
	u := &store.UniqueOptions{Key: "report-7"}
	first, err := other.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Now: epoch,
		Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}, Unique: u}}})
	if err != nil {
		t.Fatalf("create the holder: %v", err)
	}
	holder = mustClaimOne(t, other, "t", "w1", "q", epoch.Add(time.Second))
	res, err := s.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Now: epoch.Add(3 * time.Second),
		Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}, Unique: u}}})
	if err != nil {
		t.Fatalf("create with the key: %v", err)
	}
	if e := hookErr.Load(); e != nil {
		t.Fatalf("complete the holder in the gap: %v", e)
	}
	if fired.Load() != 1 {
		t.Fatalf("the conflict hook ran %d times, want once (the first insert conflicted, the second did not)", fired.Load())
	}
	if res[0].Duplicate || res[0].Job.ID == first[0].Job.ID {
		t.Fatalf("the create answered %s (duplicate %v), want a new job: the holder finished before it was read", res[0].Job.ID, res[0].Duplicate)
	}
	wantTypes(t, eventTypes(t, s, "t", res[0].Job.ID), store.EventQueued)
	done, err := s.GetJob(t.Context(), "t", first[0].Job.ID)
	if err != nil || done.State != store.JobStateSucceeded {
		t.Fatalf("the holder is %v (%v), want succeeded", done, err)
	}
}

// TestUniqueCreatesFromManyConnections: 64 creates with one unique key,
// from four stores (coordinators) of eight connections each, all at once,
// make exactly one job, and every other create answers it as a duplicate.
func TestUniqueCreatesFromManyConnections(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	stores := []*postgres.Store{}
	for range 4 {
		stores = append(stores, open(t, url, store.EngineOptions{}))
	}
	const n = 64
	start := make(chan struct{})
	results := make(chan store.CreateResult, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			<-start
			res, err := stores[i%len(stores)].CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Now: epoch,
				Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k", Payload: []byte{byte(i)}},
					Unique: &store.UniqueOptions{Key: "one"}}}})
			if err != nil {
				errs <- err
				return
			}
			results <- res[0]
		}()
	}
	close(start)
	ids := map[string]bool{}
	fresh := 0
	for range n {
		select {
		case err := <-errs:
			t.Fatalf("a concurrent unique create failed: %v", err)
		case r := <-results:
			ids[r.Job.ID] = true
			if !r.Duplicate {
				fresh++
			}
		}
	}
	if len(ids) != 1 || fresh != 1 {
		t.Fatalf("%d creates with one key gave %d jobs and %d new ones, want 1 and 1", n, len(ids), fresh)
	}
	page, err := stores[0].ListJobs(t.Context(), store.ListJobsParams{Tenant: "t", Limit: 100})
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("list: %v, %d jobs, want 1", err, len(page.Jobs))
	}
}

// TestUniqueCreateWithHandoff: a unique create that hands its job to a
// waiting worker leases the new job; a second create with the key (the
// job is now leased, so live) answers it as a duplicate and leases
// nothing; a refused (FAIL) create with a handoff leaves nothing.
func TestUniqueCreateWithHandoff(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	req := func(fail bool) []store.CreateRequest {
		u := &store.UniqueOptions{Key: "handed"}
		if fail {
			u.OnConflict = store.UniqueFail
		}
		return []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}, Unique: u}}
	}
	res, leased, err := s.CreateJobsHandoff(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: req(false)}, handoffClaim("q", "w1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(leased) != 1 || leased[0].Job.ID != res[0].Job.ID || res[0].Duplicate {
		t.Fatalf("leased %d jobs (duplicate %v), want the new job leased", len(leased), res[0].Duplicate)
	}
	again, leased2, err := s.CreateJobsHandoff(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: req(false)}, handoffClaim("q", "w2"))
	if err != nil {
		t.Fatal(err)
	}
	if !again[0].Duplicate || again[0].Job.ID != res[0].Job.ID || len(leased2) != 0 {
		t.Fatalf("second create: duplicate %v of %s, leased %d; want the leased job as a duplicate and no lease", again[0].Duplicate, again[0].Job.ID, len(leased2))
	}
	if _, _, err := s.CreateJobsHandoff(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: req(true)}, handoffClaim("q", "w3")); !errors.Is(err, store.ErrUniqueConflict) {
		t.Fatalf("a FAIL duplicate with a handoff: %v, want ErrUniqueConflict", err)
	}
	page, err := s.ListJobs(t.Context(), store.ListJobsParams{Tenant: "t", Limit: 10})
	if err != nil || len(page.Jobs) != 1 {
		t.Fatalf("jobs: %d (%v), want 1", len(page.Jobs), err)
	}
	wantTypes(t, eventTypes(t, s, "t", res[0].Job.ID), store.EventQueued, store.EventLeased)
}
