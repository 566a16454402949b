package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// Engine-specific behaviour the conformance suite does not pin down.

var epoch = time.Date(2030, 6, 1, 0, 0, 0, 0, time.UTC)

func mustCreateAt(t *testing.T, s store.Store, tenant, queue string, now time.Time) *store.Job {
	t.Helper()
	res, err := s.CreateJobs(t.Context(), store.CreateJobsParams{
		Tenant:   tenant,
		Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: queue, Kind: "k"}}},
		Now:      now,
	})
	if err != nil {
		t.Fatalf("create in %q: %v", queue, err)
	}
	return res[0].Job
}

func mustClaimOne(t *testing.T, s store.Store, tenant, worker, queue string, now time.Time) store.ClaimedJob {
	t.Helper()
	got, err := s.Claim(t.Context(), store.ClaimParams{
		Tenant: tenant, Worker: worker, Queues: []string{queue}, Max: 1, LeaseDuration: 30 * time.Second, Now: now,
	})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim from %q: %v (%d jobs)", queue, err, len(got))
	}
	return got[0]
}

func eventTypes(t *testing.T, s store.Store, tenant, id string) []store.EventType {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), store.ListEventsParams{Tenant: tenant, JobID: id})
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	out := make([]store.EventType, len(evs))
	for i, e := range evs {
		if e.Sequence != int64(i+1) {
			t.Fatalf("events of %s are not gapless: event %d has sequence %d", id, i, e.Sequence)
		}
		out[i] = e.Type
	}
	return out
}

func wantTypes(t *testing.T, got []store.EventType, want ...store.EventType) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events are %v, want %v", got, want)
	}
}

// TestRetryOfCancelRequestedJobCancelsIt: a retryable failure of a job whose
// cancellation was requested does not queue it again (it could never be
// claimed); it ends CANCELLED after its RUN_FAILED event.
func TestRetryOfCancelRequestedJobCancelsIt(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	j := mustCreateAt(t, s, "t", "q", epoch)
	c := mustClaimOne(t, s, "t", "w1", "q", epoch)
	if _, err := s.RequestCancel(t.Context(), store.RequestCancelParams{Tenant: "t", JobID: j.ID, Now: epoch.Add(time.Second)}); err != nil {
		t.Fatalf("request cancel: %v", err)
	}
	job, err := s.Retry(t.Context(), store.RetryParams{Tenant: "t", Token: c.Token,
		Error: store.JobError{Code: "timeout", Retryable: true}, Now: epoch.Add(2 * time.Second)})
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if job.State != store.JobStateCancelled || job.LastError == nil || job.LastError.Code != "timeout" {
		t.Fatalf("job after retry is %s with last error %+v, want cancelled with the error kept", job.State, job.LastError)
	}
	wantTypes(t, eventTypes(t, s, "t", j.ID), store.EventQueued, store.EventLeased, store.EventCancelRequested,
		store.EventRunFailed, store.EventCancelled)
	// The same report again is answered with the same job.
	again, err := s.Retry(t.Context(), store.RetryParams{Tenant: "t", Token: c.Token,
		Error: store.JobError{Code: "timeout", Retryable: true}, Now: epoch.Add(3 * time.Second)})
	if err != nil || again.State != store.JobStateCancelled {
		t.Fatalf("repeated retry: %+v, %v; want the cancelled job", again, err)
	}
}

// TestConcurrencyLimitHoldsAcrossStores: two coordinators (pools) claiming
// from one queue with a concurrency limit never lease more than the limit
// together; the advisory lock serialises their counts.
func TestConcurrencyLimitHoldsAcrossStores(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	a := open(t, url, store.EngineOptions{})
	b := open(t, url, store.EngineOptions{})
	const limit = 5
	if _, err := a.UpdateQueuePolicy(t.Context(), "t", store.QueuePolicy{Queue: "limited", ConcurrencyLimit: limit}); err != nil {
		t.Fatal(err)
	}
	reqs := make([]store.CreateRequest, 60)
	for i := range reqs {
		reqs[i] = store.CreateRequest{Spec: store.JobSpec{Queue: "limited", Kind: "k"}}
	}
	if _, err := a.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: reqs, Now: epoch}); err != nil {
		t.Fatal(err)
	}

	start := make(chan struct{})
	var (
		mu      sync.Mutex
		claimed int
		errs    []error
		wg      sync.WaitGroup
	)
	for i := range 16 {
		s := a
		if i%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := s.Claim(context.Background(), store.ClaimParams{
				Tenant: "t", Worker: fmt.Sprintf("w%d", i), Queues: []string{"limited"}, Max: 3, Now: epoch.Add(time.Second),
			})
			mu.Lock()
			defer mu.Unlock()
			claimed += len(got)
			if err != nil {
				errs = append(errs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("claims failed: %v", errs)
	}
	if claimed != limit {
		t.Fatalf("16 concurrent claims leased %d jobs, want exactly the limit %d", claimed, limit)
	}
	st, err := a.QueueStats(t.Context(), store.QueueStatsParams{Tenant: "t", Queue: "limited", Now: epoch.Add(time.Second)})
	if err != nil || st.Leased != limit {
		t.Fatalf("queue stats: %+v, %v; want %d leased", st, err, limit)
	}
}

// TestNotificationsStayInTheirSchema: stores in two schemas of one database
// (side-by-side deployments) do not wake each other.
func TestNotificationsStayInTheirSchema(t *testing.T) {
	t.Parallel()
	mine := open(t, migrated(t), store.EngineOptions{})
	other := open(t, migrated(t), store.EngineOptions{})
	ch, err := mine.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	// Had the other schema's notification reached us it would arrive first:
	// notifications are delivered in commit order.
	if err := createJob(t, other, "t", "elsewhere"); err != nil {
		t.Fatal(err)
	}
	if err := createJob(t, mine, "t", "here"); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, ch, "after creates in two schemas"); got != (store.QueueRef{Tenant: "t", Queue: "here"}) {
		t.Fatalf("got %+v, want only this schema's queue", got)
	}
}

// TestDuplicateJobIDLeavesNothing: when the id generator repeats an id the
// whole batch fails and leaves no job, event or idempotency record.
func TestDuplicateJobIDLeavesNothing(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{NewID: func() string { return "same-id" }})
	_, err := s.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Now: epoch, Requests: []store.CreateRequest{
		{Spec: store.JobSpec{Queue: "q", Kind: "k"}, RequestID: "r1"},
		{Spec: store.JobSpec{Queue: "q", Kind: "k"}, RequestID: "r2"},
	}})
	if err == nil {
		t.Fatal("a batch with a repeated job id succeeded")
	}
	var n int
	if err := postgres.Pool(s).QueryRow(t.Context(),
		`SELECT (SELECT count(*) FROM jobs) + (SELECT count(*) FROM job_events) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d rows left behind by a failed batch", n)
	}
}

// TestDeadlockedCreatesAreRetried: two batches taking the same two
// idempotency keys in opposite orders deadlock; PostgreSQL aborts one, the
// engine runs it again, and it replays the other's jobs. Both calls
// succeed and exactly two jobs exist.
func TestDeadlockedCreatesAreRetried(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	// NewID runs right before each request takes its key. The second
	// request of each batch's first run waits until the other batch has
	// taken its first key too, which forces the deadlock.
	tookFirst := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
	newID := func(me int) func() string {
		calls := 0
		return func() string {
			calls++ // one transaction at a time per store: no race
			if calls == 2 {
				close(tookFirst[me])
				<-tookFirst[1-me]
			}
			return store.NewID()
		}
	}
	a := open(t, url, store.EngineOptions{NewID: newID(0)})
	b := open(t, url, store.EngineOptions{NewID: newID(1)})
	batch := func(keys ...string) store.CreateJobsParams {
		p := store.CreateJobsParams{Tenant: "t", Now: epoch}
		for _, k := range keys {
			p.Requests = append(p.Requests, store.CreateRequest{Spec: store.JobSpec{Queue: "q", Kind: k}, RequestID: k})
		}
		return p
	}
	var (
		wg     sync.WaitGroup
		res    [2][]store.CreateResult
		errs   [2]error
		starts = make(chan struct{})
	)
	for i, s := range []store.Store{a, b} {
		keys := []string{"k1", "k2"}
		if i == 1 {
			keys = []string{"k2", "k1"}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-starts
			res[i], errs[i] = s.CreateJobs(context.Background(), batch(keys...))
		}()
	}
	close(starts)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("batch %d: %v", i, err)
		}
	}
	ids := map[string]string{}
	replays := 0
	for _, rs := range res {
		for _, r := range rs {
			if prev, ok := ids[r.Job.Kind]; ok && prev != r.Job.ID {
				t.Fatalf("key %s made two jobs: %s and %s", r.Job.Kind, prev, r.Job.ID)
			}
			ids[r.Job.Kind] = r.Job.ID
			if r.Replayed {
				replays++
			}
		}
	}
	if replays != 2 {
		t.Fatalf("%d results were replays, want 2 (the retried batch replays both keys)", replays)
	}
	var jobs int
	if err := postgres.Pool(a).QueryRow(t.Context(), "SELECT count(*) FROM jobs").Scan(&jobs); err != nil || jobs != 2 {
		t.Fatalf("%d jobs exist (%v), want 2", jobs, err)
	}
}
