package storetest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// retentionTests cover pruning: only finished and old enough, with
// everything that hangs off a job, in bounded batches.
func retentionTests() group {
	return group{name: "Retention", cases: []testCase{
		{"prune removes only old finished jobs with all their rows, in batches", testPruneFinishedJobs},
		{"prune removes expired idempotency records and keeps live ones", testPruneIdempotency},
	}}
}

func testPruneFinishedJobs(t *testing.T, h Harness) {
	e := setup(t, h)
	old := at(-10 * 24 * time.Hour)
	// Five old finished jobs, one per terminal path, each with a
	// checkpoint, an effect and an attempt where it ran.
	var pruned []string
	finishOld := func(queue string, end func(c store.ClaimedJob)) {
		t.Helper()
		sp := spec(queue)
		sp.MaxAttempts = 1
		j := e.createIn(e.s, tenantA, sp, "key-"+queue, old)
		c := e.mustClaim(tenantA, workerA, queue, j.ID, old.Add(time.Second))
		if _, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c.Token, Phase: "half", Now: old.Add(2 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		e.reserve(c.Token, "charge", old.Add(2*time.Second))
		end(c)
		pruned = append(pruned, j.ID)
	}
	finishOld("ok", func(c store.ClaimedJob) { e.complete(tenantA, c.Token, old.Add(3*time.Second)) })
	finishOld("bad", func(c store.ClaimedJob) {
		e.retry(tenantA, c.Token, store.JobError{Code: "x", Retryable: false}, 0, old.Add(3*time.Second))
	})
	finishOld("dead", func(c store.ClaimedJob) { e.retry(tenantA, c.Token, errTransient, 0, old.Add(3*time.Second)) })
	finishOld("stop", func(c store.ClaimedJob) {
		if _, err := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: c.Token, Now: old.Add(3 * time.Second)}); err != nil {
			t.Fatal(err)
		}
	})
	cancelled := e.mustCreate(tenantB, spec("cancel"), old) // across tenants
	if _, err := e.requestCancel(e.s, tenantB, cancelled.ID, old.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	pruned = append(pruned, cancelled.ID)

	// Old but not finished: never pruned.
	oldQueued := e.mustCreate(tenantA, spec("waiting"), old)
	oldLeased := e.mustCreate(tenantA, spec("held"), old)
	e.mustClaim(tenantA, workerA, "held", oldLeased.ID, old.Add(time.Second)) // its lease expired long ago
	oldCancelReq := e.mustCreate(tenantA, spec("asked"), old)
	e.mustClaim(tenantA, workerA, "asked", oldCancelReq.ID, old.Add(time.Second))
	if _, err := e.requestCancel(e.s, tenantA, oldCancelReq.ID, old.Add(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Finished but recent: kept.
	recent := e.mustCreate(tenantA, spec("recent"), at(-2*time.Hour))
	c := e.mustClaim(tenantA, workerA, "recent", recent.ID, at(-2*time.Hour))
	e.complete(tenantA, c.Token, at(-2*time.Hour+time.Second))
	kept := []string{oldQueued.ID, oldLeased.ID, oldCancelReq.ID, recent.ID}
	keptSnaps := map[string]snapshot{}
	for _, id := range kept {
		keptSnaps[id] = e.snap(tenantA, id)
	}

	commits := e.f.commits.Load()
	res, err := e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: at(-24 * time.Hour), BatchSize: 2, Now: base})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if res.Jobs != int64(len(pruned)) {
		t.Fatalf("prune removed %d jobs, want %d", res.Jobs, len(pruned))
	}
	// Five jobs in batches of two take at least three transactions.
	if n := e.f.commits.Load() - commits; n < 3 {
		t.Errorf("prune of 5 jobs with batch size 2 committed %d write transactions, want at least 3", n)
	}
	for i, id := range pruned {
		tenant := tenantA
		if id == cancelled.ID {
			tenant = tenantB
		}
		e.missing(tenant, id, "after prune")
		e.noEvents(tenant, id, "after prune")
		if as, err := e.s.ListAttempts(e.ctx, tenant, id); len(as) != 0 {
			t.Errorf("pruned job %d still has attempts %+v (%v)", i, as, err)
		}
		if effs, err := e.s.ListEffects(e.ctx, tenant, id); len(effs) != 0 {
			t.Errorf("pruned job %d still has effects %+v (%v)", i, effs, err)
		}
		for _, kind := range []RowKind{RowsJobs, RowsEvents, RowsAttempts, RowsCheckpoints, RowsEffects, RowsIdempotency} {
			if n := e.rows(kind, id); n != 0 {
				t.Errorf("pruned job %d left %d %s rows", i, n, kind)
			}
		}
	}
	for _, id := range kept {
		e.unchanged(tenantA, id, keptSnaps[id], "after prune")
	}
	if n := e.rows(RowsEvents, ""); n == 0 {
		t.Fatal("Harness.Rows counts no events at all; it does not see the store's tables")
	}
	// The idempotency key of a pruned job is free again.
	j := e.createIn(e.s, tenantA, spec("ok"), "key-ok", base)
	for _, id := range pruned {
		if j.ID == id {
			t.Fatal("the key of a pruned job replayed the pruned job")
		}
	}
	// Nothing more is old enough.
	res, err = e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: at(-24 * time.Hour), BatchSize: 2, Now: base})
	if err != nil || res.Jobs != 0 {
		t.Fatalf("second prune: %+v, %v; want nothing", res, err)
	}
}

func testPruneIdempotency(t *testing.T, h Harness) {
	e := setup(t, h)
	var expired []*store.Job
	for _, key := range []string{"k1", "k2", "k3"} {
		r, err := e.createWithKey(e.s, tenantA, spec("q"), key, time.Hour, base)
		if err != nil {
			t.Fatal(err)
		}
		expired = append(expired, r.Job)
	}
	live, err := e.createWithKey(e.s, tenantA, spec("q"), "live", 48*time.Hour, base)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: at(-24 * time.Hour), BatchSize: 2, Now: at(2 * time.Hour)})
	if err != nil {
		t.Fatalf("prune: %v", err)
	}
	if res.IdempotencyRecords != 3 || res.Jobs != 0 {
		t.Fatalf("prune removed %d idempotency records and %d jobs, want 3 and 0", res.IdempotencyRecords, res.Jobs)
	}
	for _, j := range expired {
		if n := e.rows(RowsIdempotency, j.ID); n != 0 {
			t.Errorf("expired idempotency record of %s survived prune", j.ID)
		}
		// The queued jobs themselves are untouched.
		if got := e.get(tenantA, j.ID); got.State != store.JobStateQueued {
			t.Errorf("job %s is %s after prune", j.ID, got.State)
		}
	}
	if n := e.rows(RowsIdempotency, live.Job.ID); n != 1 {
		t.Errorf("the live idempotency record: %d rows, want 1", n)
	}
	r, err := e.createWithKey(e.s, tenantA, spec("q"), "live", 48*time.Hour, at(3*time.Hour))
	if err != nil || !r.Replayed || r.Job.ID != live.Job.ID {
		t.Fatalf("the live key after prune: %+v, %v; want a replay", r, err)
	}
	res, err = e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: at(-24 * time.Hour), Now: at(3 * time.Hour)})
	if err != nil || res.IdempotencyRecords != 0 {
		t.Fatalf("second prune: %+v, %v; want nothing", res, err)
	}
}
