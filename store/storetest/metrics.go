package storetest

import (
	"cmp"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// metricsTests cover QueueMetrics, the one statement behind the queue
// gauges of /metrics.
func metricsTests() group {
	return group{name: "Metrics", cases: []testCase{
		{"queue metrics count live jobs and the lag of every queue of every tenant in one call", testQueueMetrics},
		{"queue metrics read 0 for known queues that are empty, not nothing", testQueueMetricsKnownEmpty},
		{"queue metrics of an empty store are empty", testQueueMetricsEmpty},
		{"count finished counts the jobs finished in a window by tenant, queue and state", testCountFinished},
		{"list queue policies returns the stored policies by queue, without counts", testListQueuePolicies},
	}}
}

func testQueueMetrics(t *testing.T, h Harness) {
	e := setup(t, h)
	const q, q2, qDead, qDone = "m-main", "m-expiring", "m-dead", "m-done"
	// The oldest job of q is claimed first and stays leased for an hour.
	old := e.mustCreate(tenantA, spec(q), at(-time.Minute))
	e.mustCreate(tenantA, spec(q), base)
	e.mustCreate(tenantA, spec(q), base)
	later := spec(q)
	later.RunAt = at(time.Hour)
	e.mustCreate(tenantA, later, base)
	if c := e.claim(tenantA, workerA, q, 1, time.Hour, at(time.Second)); len(c) != 1 || c[0].Job.ID != old.ID {
		t.Fatalf("claim of the oldest job: %+v", c)
	}
	// A lease of 10s that expires long before the reading.
	short := e.mustCreate(tenantA, spec(q2), base)
	if c := e.claim(tenantA, workerA, q2, 1, 10*time.Second, at(2*time.Second)); len(c) != 1 || c[0].Job.ID != short.ID {
		t.Fatalf("claim of the short lease: %+v", c)
	}
	// Two dead jobs, one of them abandoned: the dead-letter queue holds one.
	e.deadJob(tenantA, qDead, base)
	gone := e.deadJob(tenantA, qDead, base)
	if _, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: gone.ID, Reason: "test", Now: at(time.Minute)}); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	// A queue whose only job succeeded is known: all its gauges read 0.
	done := e.mustCreate(tenantA, spec(qDone), base)
	e.complete(tenantA, e.mustClaim(tenantA, workerA, qDone, done.ID, at(time.Second)).Token, at(2*time.Second))
	// Another tenant's queue of the same name is its own row.
	e.mustCreate(tenantB, spec(q), at(30*time.Second))

	snap, err := e.s.QueueMetrics(e.ctx, store.QueueMetricsParams{Now: at(10 * time.Minute)})
	if err != nil {
		t.Fatalf("queue metrics: %v", err)
	}
	want := []store.QueueMetrics{
		{Tenant: tenantA, Queue: qDead, Dead: 1},
		{Tenant: tenantA, Queue: qDone},
		{Tenant: tenantA, Queue: q2, Leased: 1, LeasesExpired: 1},
		{Tenant: tenantA, Queue: q, Queued: 3, Available: 2, OldestAvailableAge: 10 * time.Minute, Leased: 1},
		{Tenant: tenantB, Queue: q, Queued: 1, Available: 1, OldestAvailableAge: 9*time.Minute + 30*time.Second},
	}
	if len(snap.Queues) != len(want) {
		t.Fatalf("queue metrics returned %d queues, want %d:\n got %+v\nwant %+v", len(snap.Queues), len(want), snap.Queues, want)
	}
	for i := range want {
		if snap.Queues[i] != want[i] {
			t.Errorf("queue %d:\n got %+v\nwant %+v", i, snap.Queues[i], want[i])
		}
	}

	// Before anything is due, nothing is available and there is no lag.
	snap, err = e.s.QueueMetrics(e.ctx, store.QueueMetricsParams{Now: at(-2 * time.Minute)})
	if err != nil {
		t.Fatalf("queue metrics before the jobs are due: %v", err)
	}
	for _, m := range snap.Queues {
		if m.Available != 0 || m.OldestAvailableAge != 0 {
			t.Errorf("%s/%s before anything is due: available %d, lag %s; want 0, 0", m.Tenant, m.Queue, m.Available, m.OldestAvailableAge)
		}
	}
}

func testQueueMetricsEmpty(t *testing.T, h Harness) {
	e := setup(t, h)
	snap, err := e.s.QueueMetrics(e.ctx, store.QueueMetricsParams{})
	if err != nil {
		t.Fatalf("queue metrics of an empty store at the store's clock: %v", err)
	}
	if len(snap.Queues) != 0 {
		t.Fatalf("queue metrics of an empty store: %+v", snap.Queues)
	}
}

// A queue is known while it has a policy or any job the table still holds
// (finished ones until retention prunes them): its gauges read 0 when it
// has no live job, so that an alert on it sees 0 rather than no series.
// A pruned queue without a policy is forgotten.
func testQueueMetricsKnownEmpty(t *testing.T, h Harness) {
	e := setup(t, h)
	// Only a policy: never had a job.
	if _, err := e.s.SetQueuePaused(e.ctx, tenantA, "k-policy", false); err != nil {
		t.Fatalf("set a policy: %v", err)
	}
	// Drained: its one job succeeded.
	j := e.mustCreate(tenantA, spec("k-drained"), base)
	e.complete(tenantA, e.mustClaim(tenantA, workerA, "k-drained", j.ID, at(time.Second)).Token, at(2*time.Second))
	// Live, in another tenant.
	e.mustCreate(tenantB, spec("k-live"), base)

	snap, err := e.s.QueueMetrics(e.ctx, store.QueueMetricsParams{Now: at(time.Minute)})
	if err != nil {
		t.Fatalf("queue metrics: %v", err)
	}
	want := []store.QueueMetrics{
		{Tenant: tenantA, Queue: "k-drained"},
		{Tenant: tenantA, Queue: "k-policy"},
		{Tenant: tenantB, Queue: "k-live", Queued: 1, Available: 1, OldestAvailableAge: time.Minute},
	}
	if len(snap.Queues) != len(want) {
		t.Fatalf("queue metrics returned %d queues, want %d:\n got %+v\nwant %+v", len(snap.Queues), len(want), snap.Queues, want)
	}
	for i := range want {
		if snap.Queues[i] != want[i] {
			t.Errorf("queue %d:\n got %+v\nwant %+v", i, snap.Queues[i], want[i])
		}
	}
}

func testCountFinished(t *testing.T, h Harness) {
	e := setup(t, h)
	const q, q2 = "f-main", "f-other"
	done := func(tenant, queue string, finish time.Time) {
		j := e.mustCreate(tenant, spec(queue), finish.Add(-2*time.Second))
		e.complete(tenant, e.mustClaim(tenant, workerA, queue, j.ID, finish.Add(-time.Second)).Token, finish)
	}
	done(tenantA, q, at(10*time.Second))
	done(tenantA, q, at(19*time.Second))
	done(tenantA, q, at(20*time.Second)) // the window's end: the next window's
	done(tenantA, q, at(9*time.Second))  // before the window
	done(tenantB, q, at(15*time.Second))
	e.deadJob(tenantA, q2, at(10*time.Second)) // dies at 12s
	e.mustCreate(tenantA, spec(q), at(11*time.Second))

	got, err := e.s.CountFinished(e.ctx, store.CountFinishedParams{From: at(10 * time.Second), To: at(20 * time.Second)})
	if err != nil {
		t.Fatalf("count finished: %v", err)
	}
	slices.SortFunc(got, func(a, b store.FinishedCount) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Queue, b.Queue), cmp.Compare(a.State, b.State))
	})
	want := []store.FinishedCount{
		{Tenant: tenantA, Queue: q, State: store.JobStateSucceeded, N: 2},
		{Tenant: tenantA, Queue: q2, State: store.JobStateDead, N: 1},
		{Tenant: tenantB, Queue: q, State: store.JobStateSucceeded, N: 1},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("count finished in [10s, 20s):\n got %+v\nwant %+v", got, want)
	}
	if got, err := e.s.CountFinished(e.ctx, store.CountFinishedParams{From: at(time.Hour), To: at(2 * time.Hour)}); err != nil || len(got) != 0 {
		t.Fatalf("count finished of a window without jobs: %+v, %v; want nothing", got, err)
	}
	if _, err := e.s.CountFinished(e.ctx, store.CountFinishedParams{From: at(time.Minute), To: at(time.Minute)}); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("count finished of an empty window: %v, want ErrInvalid", err)
	}
}

func testListQueuePolicies(t *testing.T, h Harness) {
	e := setup(t, h)
	if got, err := e.s.ListQueuePolicies(e.ctx, tenantA); err != nil || len(got) != 0 {
		t.Fatalf("policies of a tenant without any: %+v, %v", got, err)
	}
	e.mustCreate(tenantA, spec("p-jobs-only"), base)
	if _, err := e.s.SetQueuePaused(e.ctx, tenantA, "p-zeta", true); err != nil {
		t.Fatal(err)
	}
	pol := store.DefaultQueuePolicy("p-alpha")
	pol.ConcurrencyLimit = 7
	if _, err := e.s.UpdateQueuePolicy(e.ctx, tenantA, pol); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.SetQueuePaused(e.ctx, tenantB, "p-other-tenant", true); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.ListQueuePolicies(e.ctx, tenantA)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Queue != "p-alpha" || got[0].ConcurrencyLimit != 7 || got[0].Paused ||
		got[1].Queue != "p-zeta" || !got[1].Paused {
		t.Fatalf("policies of tenant A: %+v; want p-alpha (concurrency 7) then p-zeta (paused)", got)
	}
}
