package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

func oneRequest(queue, dependency string) []store.CreateRequest {
	return []store.CreateRequest{{Spec: store.JobSpec{Queue: queue, Kind: "k", Dependency: dependency}}}
}

func handoffClaim(queue string, workers ...string) []store.ClaimManyParams {
	c := store.ClaimManyParams{Tenant: "t", Queues: []string{queue}}
	for _, w := range workers {
		c.Waiters = append(c.Waiters, store.ClaimWaiter{Worker: w, Max: 1, LeaseDuration: 30 * time.Second})
	}
	return []store.ClaimManyParams{c}
}

// nextNotification is the queue of the next job notification on ch.
func nextNotification(t *testing.T, ch <-chan store.QueueRef) string {
	t.Helper()
	select {
	case q := <-ch:
		return q.Queue
	case <-time.After(10 * time.Second):
		t.Fatal("no job notification within 10s")
		return ""
	}
}

// TestHandoffLeasesInTheCreatesTransaction: a create with a handoff claim
// returns the new job already leased to the waiter. The lease was taken
// in the create's own transaction (leased_at is its start, as created_at
// is), the history is QUEUED then LEASED, and since nothing is left to
// claim the queue is not notified: the next notification on the channel
// is the one of a later plain create.
func TestHandoffLeasesInTheCreatesTransaction(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	ch, err := s.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, leased, err := s.CreateJobsHandoff(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: oneRequest("q", "")}, handoffClaim("q", "w1"))
	if err != nil {
		t.Fatalf("create with handoff: %v", err)
	}
	if len(leased) != 1 || leased[0].Job.ID != res[0].Job.ID || leased[0].Token.WorkerID != "w1" || leased[0].Token.Generation != 1 {
		t.Fatalf("leased = %+v, want the new job %s leased to w1, generation 1", leased, res[0].Job.ID)
	}
	job, err := s.GetJob(t.Context(), "t", res[0].Job.ID)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != store.JobStateLeased || job.LeaseOwner != "w1" || !job.LeasedAt.Equal(job.CreatedAt) {
		t.Fatalf("job = state %s owner %q leased_at %v created_at %v; want leased by w1 in the create's transaction",
			job.State, job.LeaseOwner, job.LeasedAt, job.CreatedAt)
	}
	wantTypes(t, eventTypes(t, s, "t", job.ID), store.EventQueued, store.EventLeased)
	// The lease is a real one: its holder completes it.
	if _, err := s.Complete(t.Context(), store.CompleteParams{Tenant: "t", Token: leased[0].Token}); err != nil {
		t.Fatalf("complete the handed-off lease: %v", err)
	}
	if _, err := s.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: oneRequest("later", "")}); err != nil {
		t.Fatal(err)
	}
	if q := nextNotification(t, ch); q != "later" {
		t.Fatalf("first notification is for %q; the handed-off queue q must not be notified", q)
	}
}

// TestHandoffLeavesWhatARoundMustDecide: the handoff claim leases nothing
// from a paused queue, a queue with a concurrency limit (counted under
// the claim's queue lock, which creates do not take) or a job whose
// breaker is open; the job stays QUEUED and its queue is notified.
func TestHandoffLeavesWhatARoundMustDecide(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	ctx := t.Context()
	if _, err := s.SetQueuePaused(ctx, "t", "paused", true); err != nil {
		t.Fatal(err)
	}
	limited := store.DefaultQueuePolicy("limited")
	limited.ConcurrencyLimit = 5
	if _, err := s.UpdateQueuePolicy(ctx, "t", limited); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ForceOpenBreaker(ctx, store.ForceOpenBreakerParams{Tenant: "t", Dependency: "dep", Reason: "test", Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	ch, err := s.SubscribeJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, queue, dependency string }{
		{"paused queue", "paused", ""},
		{"concurrency limit", "limited", ""},
		{"open breaker", "open", "dep"},
	} {
		res, leased, err := s.CreateJobsHandoff(ctx, store.CreateJobsParams{Tenant: "t", Requests: oneRequest(c.queue, c.dependency)}, handoffClaim(c.queue, "w1"))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(leased) != 0 {
			t.Errorf("%s: leased %d jobs, want none", c.name, len(leased))
		}
		job, err := s.GetJob(ctx, "t", res[0].Job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if job.State != store.JobStateQueued {
			t.Errorf("%s: job is %s, want queued", c.name, job.State)
		}
		if q := nextNotification(t, ch); q != c.queue {
			t.Errorf("%s: notification for %q, want %q", c.name, q, c.queue)
		}
	}
}

// TestHandoffClaimThatFailsLeavesTheCreate: when the handoff claim fails
// in the database (here a trigger refuses the lease), only the claim is
// rolled back (the pipelined create is rolled back whole and made again
// with a savepoint): the create commits, the job is QUEUED with its QUEUED
// event alone, and its queue is notified for a round to claim it.
func TestHandoffClaimThatFailsLeavesTheCreate(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `CREATE FUNCTION refuse_lease() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'lease refused by the test'; END $$;
		CREATE TRIGGER refuse_lease BEFORE UPDATE ON jobs FOR EACH ROW
		WHEN (NEW.lease_owner = 'w-refused') EXECUTE FUNCTION refuse_lease()`); err != nil {
		t.Fatal(err)
	}
	s := open(t, url, store.EngineOptions{})
	ch, err := s.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	res, leased, err := s.CreateJobsHandoff(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: oneRequest("q", "")}, handoffClaim("q", "w-refused"))
	if err != nil {
		t.Fatalf("a failed handoff claim failed the create: %v", err)
	}
	if len(leased) != 0 {
		t.Fatalf("leased = %+v, want none", leased)
	}
	job, err := s.GetJob(t.Context(), "t", res[0].Job.ID)
	if err != nil {
		t.Fatalf("the job was not created: %v", err)
	}
	if job.State != store.JobStateQueued {
		t.Fatalf("job is %s, want queued", job.State)
	}
	wantTypes(t, eventTypes(t, s, "t", job.ID), store.EventQueued)
	// The pipelined attempt that the claim failed left nothing.
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
	if q := nextNotification(t, ch); q != "q" {
		t.Fatalf("notification for %q, want q", q)
	}
	// A round claims it as usual.
	mustClaimOne(t, s, "t", "w2", "q", time.Time{})
}

// TestHandoffSharesABatchOfCreates: two claims of one create batch (the
// committer joins concurrent calls) each lease to their own waiters, and
// every job is leased once.
func TestHandoffSharesABatchOfCreates(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	const calls = 8
	type answer struct {
		leased []store.ClaimedJob
		err    error
	}
	answers := make(chan answer, calls)
	for i := range calls {
		go func() {
			w := []string{"wa", "wb", "wc", "wd", "we", "wf", "wg", "wh"}[i]
			_, leased, err := s.CreateJobsHandoff(t.Context(), store.CreateJobsParams{Tenant: "t", Requests: oneRequest("q", "")}, handoffClaim("q", w))
			for _, l := range leased {
				if l.Token.WorkerID != w {
					err = fmt.Errorf("call of %s got a lease of %s", w, l.Token.WorkerID)
				}
			}
			answers <- answer{leased, err}
		}()
	}
	seen := map[string]bool{}
	for range calls {
		a := <-answers
		if a.err != nil {
			t.Fatal(a.err)
		}
		for _, l := range a.leased {
			if seen[l.Job.ID] {
				t.Fatalf("job %s leased twice", l.Job.ID)
			}
			seen[l.Job.ID] = true
		}
	}
	if len(seen) != calls {
		t.Fatalf("%d of %d jobs leased by their creates' claims", len(seen), calls)
	}
}
