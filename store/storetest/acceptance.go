package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// acceptanceTests cover contract point 1: creating a job is one transaction
// (job row, QUEUED event with sequence 1, idempotency record).
func acceptanceTests() group {
	return group{name: "Acceptance", cases: []testCase{
		{"migrations apply twice and the first event is visible with the job", testMigrationsTwice},
		{"a created job has the requested fields and is available at once", testCreateFields},
		{"a duplicate job id fails and rolls the whole create back", testDuplicateID},
		{"a failed commit leaves neither the job nor its event nor its request id", testCreateAtomic},
		{"a failed commit of a batch leaves nothing of any item", testBatchCreateAtomic},
		{"a batch with one invalid item creates nothing", testBatchInvalid},
		{"a failed commit of a transition changes neither state nor events", testTransitionAtomic},
		{"no job ever has orphan events or events that do not start at 1", testNoOrphanEvents},
		{"the store clock is used when Now is zero", testStoreClock},
	}}
}

func testMigrationsTwice(t *testing.T, h Harness) {
	e := setup(t, h)
	for i := range 2 {
		if err := h.Remigrate(t, e.s); err != nil {
			t.Fatalf("applying the migrations again (run %d): %v", i+1, err)
		}
	}
	j := e.mustCreate(tenantA, spec("default"), base)
	if j.State != store.JobStateQueued || j.Attempts != 0 || j.LeaseGeneration != 0 {
		t.Fatalf("new job is %s with attempts %d, generation %d; want queued, 0, 0", j.State, j.Attempts, j.LeaseGeneration)
	}
	evs := e.events(tenantA, j.ID)
	wantEvents(t, evs, store.EventQueued)
	if evs[0].Sequence != 1 {
		t.Fatalf("first event has sequence %d, want 1", evs[0].Sequence)
	}
	wantTime(t, "the queued event's time", evs[0].Time, base)
}

func testCreateFields(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := spec("default")
	sp.Priority = 7
	sp.MaxAttempts = 3
	sp.Dependency = "payments-api"
	sp.Metadata = map[string]string{"a": "1", "b": "two", "empty": ""}
	j := e.mustCreate(tenantA, sp, base)
	got := e.get(tenantA, j.ID)
	for _, g := range []*store.Job{j, got} {
		if g.Tenant != tenantA || g.Queue != sp.Queue || g.Kind != sp.Kind || string(g.Payload) != string(sp.Payload) ||
			g.Priority != 7 || g.MaxAttempts != 3 || g.Dependency != "payments-api" {
			t.Fatalf("job %+v does not carry the spec %+v", g, sp)
		}
		if len(g.Metadata) != 3 || g.Metadata["b"] != "two" || g.Metadata["empty"] != "" {
			t.Fatalf("job metadata %v, want %v", g.Metadata, sp.Metadata)
		}
		wantTime(t, "created_at", g.CreatedAt, base)
		wantTime(t, "available_at", g.AvailableAt, base)
		if !g.FinishedAt.IsZero() || !g.LeaseExpiresAt.IsZero() || g.LastError != nil || g.Checkpoint != nil || g.CancelRequested {
			t.Fatalf("new job has finish/lease/error/checkpoint/cancel fields set: %+v", g)
		}
	}

	// Without an override the budget comes from the queue policy.
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "budgeted", Retry: store.RetryPolicy{MaxAttempts: 9}})
	j2 := e.mustCreate(tenantA, spec("budgeted"), base)
	if j2.MaxAttempts != 9 {
		t.Fatalf("job in a queue with max attempts 9 has max attempts %d", j2.MaxAttempts)
	}
	j3 := e.mustCreate(tenantA, spec("unconfigured"), base)
	if j3.MaxAttempts != store.MaxAttemptsDefault {
		t.Fatalf("job in a queue without policy has max attempts %d, want %d", j3.MaxAttempts, store.MaxAttemptsDefault)
	}

	// RunAt and RunAfter schedule the job; RunAfter wins.
	later := spec("default")
	later.RunAt = at(time.Hour)
	if j := e.mustCreate(tenantA, later, base); !sameTime(j.AvailableAt, at(time.Hour)) {
		t.Fatalf("run_at job available at %s, want %s", j.AvailableAt, at(time.Hour))
	}
	later.RunAfter = 10 * time.Minute
	if j := e.mustCreate(tenantA, later, base); !sameTime(j.AvailableAt, at(10*time.Minute)) {
		t.Fatalf("run_after job available at %s, want %s", j.AvailableAt, at(10*time.Minute))
	}
}

func testDuplicateID(t *testing.T, h Harness) {
	e := setup(t, h)
	orig := e.createIn(e.s, tenantA, spec("default"), "req-original", base)

	// A second create whose generated id collides must fail as a whole.
	e.f.forceID(orig.ID)
	other := spec("other")
	_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: at(time.Second),
		Requests: []store.CreateRequest{{Spec: other, RequestID: "req-second"}},
	})
	if err == nil {
		t.Fatal("create with a duplicate job id succeeded")
	}
	e.f.freeIDs()

	got := e.get(tenantA, orig.ID)
	if got.Queue != "default" || got.State != store.JobStateQueued {
		t.Fatalf("the original job changed: queue %q, state %s", got.Queue, got.State)
	}
	wantEvents(t, e.events(tenantA, orig.ID), store.EventQueued)

	// No idempotency record survived: the same request id now creates a job.
	res, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: at(2 * time.Second),
		Requests: []store.CreateRequest{{Spec: other, RequestID: "req-second"}},
	})
	if err != nil {
		t.Fatalf("retrying the request after the failed create: %v", err)
	}
	if res[0].Replayed || res[0].Job.ID == orig.ID || res[0].Job.Queue != "other" {
		t.Fatalf("retry after the failed create returned %+v (replayed %v), want a new job in queue other", res[0].Job, res[0].Replayed)
	}

	// Inside one batch: the second item collides with the first, so neither
	// may remain.
	e.f.forceID(freshID())
	dupID := *e.f.forcedID.Load()
	_, err = e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: at(3 * time.Second),
		Requests: []store.CreateRequest{{Spec: spec("batch"), RequestID: "b1"}, {Spec: spec("batch"), RequestID: "b2"}},
	})
	e.f.freeIDs()
	if err == nil {
		t.Fatal("a batch whose items share an id succeeded")
	}
	e.missing(tenantA, dupID, "after a batch with duplicate ids")
	e.noEvents(tenantA, dupID, "after a batch with duplicate ids")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Queue: "batch", Limit: 100}); len(jobs) != 0 {
		t.Fatalf("a failed batch left %d jobs", len(jobs))
	}
}

func testCreateAtomic(t *testing.T, h Harness) {
	e := setup(t, h)
	id := freshID()
	e.f.forceID(id)
	e.f.failCommits("create")
	_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: base,
		Requests: []store.CreateRequest{{Spec: spec("default"), RequestID: "req-1"}},
	})
	e.f.healCommits()
	e.f.freeIDs()
	if err == nil {
		t.Fatal("create succeeded although its commit failed")
	}
	e.missing(tenantA, id, "after a failed create")
	e.noEvents(tenantA, id, "after a failed create")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 0 {
		t.Fatalf("a failed create left %d jobs", len(jobs))
	}
	e.claimNothing(tenantA, "default", at(time.Minute), "after a failed create")

	// The request id is free: the same request creates a job, not a replay.
	j := e.createIn(e.s, tenantA, spec("default"), "req-1", at(time.Second))
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued)
}

func testBatchCreateAtomic(t *testing.T, h Harness) {
	e := setup(t, h)
	e.f.failCommits("*")
	_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: base,
		Requests: []store.CreateRequest{
			{Spec: spec("q1"), RequestID: "r1"},
			{Spec: spec("q2"), RequestID: "r2"},
			{Spec: spec("q3")},
		},
	})
	e.f.healCommits()
	if err == nil {
		t.Fatal("batch create succeeded although its commit failed")
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 0 {
		t.Fatalf("a failed batch left %d jobs", len(jobs))
	}
	for _, q := range []string{"q1", "q2", "q3"} {
		e.claimNothing(tenantA, q, at(time.Minute), "after a failed batch")
	}
	// Every request id is free again.
	res, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: at(time.Second),
		Requests: []store.CreateRequest{{Spec: spec("q1"), RequestID: "r1"}, {Spec: spec("q2"), RequestID: "r2"}},
	})
	if err != nil {
		t.Fatalf("retrying the batch: %v", err)
	}
	for i, r := range res {
		if r.Replayed {
			t.Fatalf("item %d of the retried batch was a replay of a rolled-back create", i)
		}
		wantEvents(t, e.events(tenantA, r.Job.ID), store.EventQueued)
	}
}

func testBatchInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	bad := spec("q2")
	bad.Kind = ""
	_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenantA, Now: base,
		Requests: []store.CreateRequest{{Spec: spec("q1"), RequestID: "r1"}, {Spec: bad, RequestID: "r2"}},
	})
	wantErr(t, err, store.ErrInvalid, "a batch with an empty kind in item 2")
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field == "" {
		t.Errorf("the error %v does not name the invalid field", err)
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 0 {
		t.Fatalf("an invalid batch left %d jobs", len(jobs))
	}
	// The valid item's request id was not consumed.
	j := e.createIn(e.s, tenantA, spec("q1"), "r1", at(time.Second))
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued)
}

func testTransitionAtomic(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)

	// A failed claim leaves the job queued, at generation 0.
	e.f.failCommits("*")
	_, err := e.s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{"default"}, Max: 1, LeaseDuration: lease, Now: at(time.Second)})
	e.f.healCommits()
	if err == nil {
		t.Fatal("claim succeeded although its commit failed")
	}
	if got := e.get(tenantA, j.ID); got.State != store.JobStateQueued || got.LeaseGeneration != 0 || got.Attempts != 0 {
		t.Fatalf("after a failed claim the job is %s, generation %d, attempts %d", got.State, got.LeaseGeneration, got.Attempts)
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued)
	if as := e.attempts(tenantA, j.ID); len(as) != 0 {
		t.Fatalf("a failed claim left %d attempt rows", len(as))
	}

	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(2*time.Second))
	before := e.events(tenantA, j.ID)

	// A failed complete, retry or cancel leaves the job leased with the same
	// events: a terminal state never commits without its event, nor the
	// event without the state.
	e.f.failCommits("*")
	_, errComplete := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c.Token, Result: []byte("x"), Now: at(3 * time.Second)})
	_, errRetry := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: c.Token, Error: store.JobError{Code: "x", Retryable: false}, Now: at(3 * time.Second)})
	_, errCancel := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: c.Token, Now: at(3 * time.Second)})
	_, errCheckpoint := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c.Token, Phase: "p", Now: at(3 * time.Second)})
	e.f.healCommits()
	for name, err := range map[string]error{"complete": errComplete, "retry": errRetry, "cancel": errCancel, "checkpoint": errCheckpoint} {
		if err == nil {
			t.Errorf("%s succeeded although its commit failed", name)
		}
	}
	got := e.get(tenantA, j.ID)
	if got.State != store.JobStateLeased || !got.FinishedAt.IsZero() || got.Result != nil || got.LastError != nil || got.Checkpoint != nil {
		t.Fatalf("after failed commits the job is %s (finished %v, result %q, error %v, checkpoint %v)", got.State, got.FinishedAt, got.Result, got.LastError, got.Checkpoint)
	}
	if after := e.events(tenantA, j.ID); len(after) != len(before) {
		t.Fatalf("failed commits changed the events from %v to %v", eventTypes(before), eventTypes(after))
	}
	// The lease is intact: the holder finishes normally.
	if done := e.complete(tenantA, c.Token, at(4*time.Second)); done.State != store.JobStateSucceeded {
		t.Fatalf("complete after the failed commits: state %s", done.State)
	}
	evs := e.events(tenantA, j.ID)
	if n := terminalEvents(evs); n != 1 {
		t.Fatalf("%d terminal events, want 1: %v", n, eventTypes(evs))
	}
}

func testNoOrphanEvents(t *testing.T, h Harness) {
	e := setup(t, h)
	// Failed creates of known ids.
	for i := range 3 {
		id := freshID()
		e.f.forceID(id)
		e.f.failCommits("create")
		_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: at(time.Duration(i) * time.Second),
			Requests: []store.CreateRequest{{Spec: spec("default")}}})
		e.f.healCommits()
		e.f.freeIDs()
		if err == nil {
			t.Fatal("create succeeded although its commit failed")
		}
		e.noEvents(tenantA, id, "after a failed create")
	}
	// A job id that never existed.
	e.noEvents(tenantA, freshID(), "a job id that never existed")

	// Jobs through their whole life, then pruned.
	for i := range 4 {
		j := e.mustCreate(tenantA, spec("default"), at(time.Duration(i)*time.Second))
		c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Minute))
		e.complete(tenantA, c.Token, at(time.Minute+time.Second))
	}
	for _, j := range e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}) {
		evs := e.events(tenantA, j.ID) // checks: starts at 1 with queued, gapless
		wantEvents(t, evs, store.EventQueued, store.EventLeased, store.EventSucceeded)
	}
	jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100})
	res, err := e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: at(time.Hour), Now: at(2 * time.Hour)})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if res.Jobs != int64(len(jobs)) {
		t.Fatalf("prune removed %d jobs, want %d", res.Jobs, len(jobs))
	}
	for _, j := range jobs {
		e.missing(tenantA, j.ID, "after prune")
		e.noEvents(tenantA, j.ID, "after prune")
	}
}

func testStoreClock(t *testing.T, h Harness) {
	e := setup(t, h)
	before, err := e.s.Now(e.ctx)
	if err != nil {
		t.Fatalf("store clock: %v", err)
	}
	j := e.mustCreate(tenantA, spec("default"), time.Time{})
	claimed, err := e.s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{"default"}, Max: 1, LeaseDuration: lease})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim on the store clock: %d jobs, %v", len(claimed), err)
	}
	done, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: claimed[0].Token})
	if err != nil {
		t.Fatalf("complete on the store clock: %v", err)
	}
	after, err := e.s.Now(e.ctx)
	if err != nil {
		t.Fatalf("store clock: %v", err)
	}
	// Allow for the rounding of stored timestamps.
	lo, hi := before.Add(-time.Second), after.Add(time.Second)
	within := func(what string, ts time.Time) {
		if ts.Before(lo) || ts.After(hi) {
			t.Errorf("%s %s is outside the store clock's [%s, %s]", what, ts, before, after)
		}
	}
	within("created_at", j.CreatedAt)
	within("available_at", j.AvailableAt)
	within("finished_at", done.FinishedAt)
	exp := claimed[0].Job.LeaseExpiresAt
	if exp.Before(lo.Add(lease)) || exp.After(hi.Add(lease)) {
		t.Errorf("lease expires at %s, want the store clock plus %s", exp, lease)
	}
	if done.State != store.JobStateSucceeded {
		t.Errorf("job is %s, want succeeded", done.State)
	}
}
