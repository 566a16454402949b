package e2e

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// A WatchJob on one coordinator wakes for a change made through another
// that shares the PostgreSQL database, carried by the store's change
// notifications: watchers do not poll, so without them it would never
// see the change.
func TestWatchOnOneCoordinatorSeesChangesMadeThroughAnother(t *testing.T) {
	t.Parallel()
	a := testserver.Start(t, testserver.Options{Postgres: true})
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.DatabaseURL})
	ca, cb := newClients(a.Dial(t)), newClients(b.Dial(t))
	ctx := ctxT(t)
	created, err := ca.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("watched", "")})
	if err != nil {
		t.Fatal(err)
	}
	ws, err := cb.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: created.GetJob().GetId()})
	if err != nil {
		t.Fatal(err)
	}
	if ev, err := ws.Recv(); err != nil || ev.GetEvent().GetType() != leaseholdv1.EventType_EVENT_TYPE_QUEUED {
		t.Fatalf("first event %v, %v; want QUEUED", ev, err)
	}
	claimed, err := ca.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"watched"}})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("claim on a: %v, %v", claimed, err)
	}
	if _, err := ca.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claimed.GetJobs()[0].GetToken()}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for _, want := range []leaseholdv1.EventType{leaseholdv1.EventType_EVENT_TYPE_LEASED, leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED} {
		ev, err := ws.Recv()
		if err != nil || ev.GetEvent().GetType() != want {
			t.Fatalf("event %v, %v; want %v", ev, err, want)
		}
	}
	if _, err := ws.Recv(); !isEOF(err) {
		t.Fatalf("after the terminal event: %v; want the stream to end", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the watcher on b saw a's changes after %v", d)
	}
}

// Watchers are capped per connection and per coordinator:
// RESOURCE_EXHAUSTED, reason WATCH_LIMIT; a watch that ends frees its slot.
func TestWatchersAreCappedPerConnectionAndInTotal(t *testing.T) {
	t.Parallel()
	s, c := setup(t, false, func(cfg *coordinator.Config) {
		cfg.WatchersPerConnectionMax, cfg.WatchersMax = 2, 3
	})
	ctx := ctxT(t)
	created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("capped", "")})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetJob().GetId()
	watch := func(cl clients) (leaseholdv1.JobService_WatchJobClient, error) {
		t.Helper()
		ws, err := cl.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		_, err = ws.Recv() // QUEUED, or the refusal
		return ws, err
	}
	for range 2 {
		if _, err := watch(c); err != nil {
			t.Fatalf("a watch within the caps: %v", err)
		}
	}
	_, err = watch(c)
	wantReason(t, err, codes.ResourceExhausted, coordinator.ReasonWatchLimit)
	other := newClients(s.Dial(t))
	if _, err := watch(other); err != nil {
		t.Fatalf("a watch on another connection: %v", err)
	}
	_, err = watch(other)
	wantReason(t, err, codes.ResourceExhausted, coordinator.ReasonWatchLimit) // the total of 3
	// Completing the job ends the three watches and frees their slots.
	claimed, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"capped"}})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if _, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claimed.GetJobs()[0].GetToken()}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		ws, err := c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		if _, err = ws.Recv(); err == nil {
			break // a slot is free again: the finished job's history replays
		}
		if time.Now().After(deadline) {
			t.Fatalf("no watch slot freed 10s after the job finished: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
