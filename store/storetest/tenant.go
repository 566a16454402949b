package storetest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// tenantTests cover contract point 9: tenant in every key and predicate.
func tenantTests() group {
	return group{name: "Tenant", cases: []testCase{
		{"every operation by another tenant answers like a missing job and changes nothing", testTenantIsolation},
		{"idempotency keys and queue policies are scoped by tenant", testTenantScopedKeys},
	}}
}

// snapshot is what must not move when another tenant acts.
type snapshot struct {
	job    store.Job
	events int
}

func (e *env) snap(tenant, id string) snapshot {
	e.t.Helper()
	j := e.get(tenant, id)
	return snapshot{job: *j, events: len(e.events(tenant, id))}
}

func (e *env) unchanged(tenant, id string, before snapshot, why string) {
	e.t.Helper()
	now := e.snap(tenant, id)
	b, a := before.job, now.job
	if a.State != b.State || a.LeaseGeneration != b.LeaseGeneration || a.LeaseOwner != b.LeaseOwner || !sameTime(a.LeaseExpiresAt, b.LeaseExpiresAt) ||
		a.Attempts != b.Attempts || a.CancelRequested != b.CancelRequested || !sameTime(a.FinishedAt, b.FinishedAt) ||
		(a.Checkpoint == nil) != (b.Checkpoint == nil) || string(a.Result) != string(b.Result) || now.events != before.events {
		e.t.Fatalf("%s: job %s changed from %+v (%d events) to %+v (%d events)", why, id, b, before.events, a, now.events)
	}
}

func testTenantIsolation(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "shared", Retry: store.RetryPolicy{MaxAttempts: 7}})
	leased := e.mustCreate(tenantA, spec("shared"), base)
	c := e.mustClaim(tenantA, workerA, "shared", leased.ID, at(time.Second))
	if _, _, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: c.Token, Key: "charge", Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	queued := e.mustCreate(tenantA, spec("shared"), base)
	dead := e.deadJob(tenantA, "dlq", base)
	snaps := map[string]snapshot{}
	for _, id := range []string{leased.ID, queued.ID, dead.ID} {
		snaps[id] = e.snap(tenantA, id)
	}
	now := at(5 * time.Second)
	ghost := freshID()

	// Reads: tenant B sees A's jobs exactly as it sees a job that does not exist.
	for _, id := range []string{leased.ID, queued.ID, dead.ID} {
		_, errCross := e.s.GetJob(e.ctx, tenantB, id)
		_, errMissing := e.s.GetJob(e.ctx, tenantB, ghost)
		wantErr(t, errCross, store.ErrNotFound, "tenant B gets A's job")
		if errClass(errCross) != errClass(errMissing) {
			t.Errorf("GetJob: A's job answers %q, a missing job %q", errClass(errCross), errClass(errMissing))
		}
		evCross, errCross := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenantB, JobID: id, Limit: 100})
		evMissing, errMissing := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenantB, JobID: ghost, Limit: 100})
		if len(evCross) != 0 || len(evMissing) != 0 || errClass(errCross) != errClass(errMissing) {
			t.Errorf("ListEvents: A's job answers %d events, %q; a missing job %d events, %q", len(evCross), errClass(errCross), len(evMissing), errClass(errMissing))
		}
		atCross, errCross := e.s.ListAttempts(e.ctx, tenantB, id)
		atMissing, errMissing := e.s.ListAttempts(e.ctx, tenantB, ghost)
		if len(atCross) != 0 || len(atMissing) != 0 || errClass(errCross) != errClass(errMissing) {
			t.Errorf("ListAttempts: A's job answers %d, %q; a missing job %d, %q", len(atCross), errClass(errCross), len(atMissing), errClass(errMissing))
		}
		efCross, errCross := e.s.ListEffects(e.ctx, tenantB, id)
		efMissing, errMissing := e.s.ListEffects(e.ctx, tenantB, ghost)
		if len(efCross) != 0 || len(efMissing) != 0 || errClass(errCross) != errClass(errMissing) {
			t.Errorf("ListEffects: A's job answers %d, %q; a missing job %d, %q", len(efCross), errClass(errCross), len(efMissing), errClass(errMissing))
		}
		_, errCross = e.s.GetDeadJob(e.ctx, tenantB, id)
		_, errMissing = e.s.GetDeadJob(e.ctx, tenantB, ghost)
		wantErr(t, errCross, store.ErrNotFound, "tenant B gets A's job as a dead job")
		if errClass(errCross) != errClass(errMissing) {
			t.Errorf("GetDeadJob: A's job answers %q, a missing job %q", errClass(errCross), errClass(errMissing))
		}
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantB, Limit: 100}); len(jobs) != 0 {
		t.Fatalf("tenant B lists %d of A's jobs", len(jobs))
	}
	if page, err := e.s.ListDeadJobs(e.ctx, store.ListDeadJobsParams{Tenant: tenantB, Limit: 100, IncludeAbandoned: true}); err != nil || len(page.DeadJobs) != 0 {
		t.Fatalf("tenant B lists A's dead jobs: %+v, %v", page, err)
	}

	// Writes: each answers like a missing job and changes nothing.
	_, errCross := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantB, JobID: leased.ID, Now: now})
	_, errMissing := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantB, JobID: ghost, Now: now})
	wantErr(t, errCross, store.ErrNotFound, "tenant B cancels A's leased job")
	if errClass(errCross) != errClass(errMissing) {
		t.Errorf("RequestCancel: %q vs %q", errClass(errCross), errClass(errMissing))
	}
	_, errCross = e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantB, JobID: queued.ID, Now: now})
	wantErr(t, errCross, store.ErrNotFound, "tenant B cancels A's queued job")

	crossErrs := e.leaseBoundCalls(e.s, tenantB, c.Token, now)
	missingErrs := e.leaseBoundCalls(e.s, tenantB, store.LeaseToken{JobID: ghost, Generation: c.Token.Generation, WorkerID: workerA}, now)
	for name, errCross := range crossErrs {
		if errCross == nil {
			t.Errorf("tenant B's %s with A's valid token succeeded", name)
		}
		if errClass(errCross) != errClass(missingErrs[name]) {
			t.Errorf("%s with A's token answers %q, with a missing job %q", name, errClass(errCross), errClass(missingErrs[name]))
		}
	}
	_, _, errCross = e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantB, JobID: dead.ID, Now: now})
	_, _, errMissing = e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantB, JobID: ghost, Now: now})
	wantErr(t, errCross, store.ErrNotFound, "tenant B replays A's dead job")
	if errClass(errCross) != errClass(errMissing) {
		t.Errorf("ReplayDeadJob: %q vs %q", errClass(errCross), errClass(errMissing))
	}
	_, errCross = e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantB, JobID: dead.ID, Now: now})
	_, errMissing = e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantB, JobID: ghost, Now: now})
	wantErr(t, errCross, store.ErrNotFound, "tenant B abandons A's dead job")
	if errClass(errCross) != errClass(errMissing) {
		t.Errorf("AbandonDeadJob: %q vs %q", errClass(errCross), errClass(errMissing))
	}

	// Claims: tenant B's worker on the same queue name gets nothing, even
	// after A's lease expired.
	if got := e.claim(tenantB, workerB, "shared", 10, lease, at(time.Hour)); len(got) != 0 {
		t.Fatalf("tenant B claimed %d of A's jobs", len(got))
	}

	// Queue policies: B sees defaults and its own changes stay its own.
	p, err := e.s.GetQueuePolicy(e.ctx, tenantB, "shared")
	if err != nil || !samePolicy(*p, store.DefaultQueuePolicy("shared")) {
		t.Fatalf("tenant B reads A's policy: %+v, %v", p, err)
	}
	if qs, err := e.s.ListQueues(e.ctx, tenantB); err != nil || len(qs) != 0 {
		t.Fatalf("tenant B lists A's queues: %+v, %v", qs, err)
	}
	st, err := e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantB, Queue: "shared", Now: now})
	if err != nil || *st != (store.QueueStats{Queue: "shared"}) {
		t.Fatalf("tenant B's stats of the shared queue name: %+v, %v", st, err)
	}
	if _, err := e.s.SetQueuePaused(e.ctx, tenantB, "shared", true); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.UpdateQueuePolicy(e.ctx, tenantB, store.QueuePolicy{Queue: "shared", Retry: store.RetryPolicy{MaxAttempts: 1}}); err != nil {
		t.Fatal(err)
	}
	pa, err := e.s.GetQueuePolicy(e.ctx, tenantA, "shared")
	if err != nil || pa.Paused || pa.Retry.MaxAttempts != 7 {
		t.Fatalf("tenant B's pause and update reached A's policy: %+v, %v", pa, err)
	}
	for id, s := range snaps {
		e.unchanged(tenantA, id, s, "after tenant B's calls")
	}
	// A's own work is unaffected by B's paused queue of the same name.
	e.mustClaim(tenantA, workerA, "shared", queued.ID, at(10*time.Second))
}

func testTenantScopedKeys(t *testing.T, h Harness) {
	e := setup(t, h)
	a := e.createIn(e.s, tenantA, spec("q"), "same-key", base)
	// The same key in another tenant is another operation, even with
	// another request: no replay, no conflict.
	other := spec("q")
	other.Payload = []byte("B's payload")
	b := e.createIn(e.s, tenantB, other, "same-key", base)
	if a.ID == b.ID || b.Tenant != tenantB {
		t.Fatalf("tenant B's create with A's key returned %+v", b)
	}
	// Each replays its own.
	for _, tc := range []struct {
		tenant string
		sp     store.JobSpec
		want   string
	}{{tenantA, spec("q"), a.ID}, {tenantB, other, b.ID}} {
		r, err := e.createWithKey(e.s, tc.tenant, tc.sp, "same-key", 0, at(time.Second))
		if err != nil || !r.Replayed || r.Job.ID != tc.want {
			t.Fatalf("%s replay: %+v, %v", tc.tenant, r, err)
		}
	}
	// Jobs of one queue name are claimed per tenant.
	got := e.claim(tenantB, workerB, "q", 10, lease, at(time.Second))
	if len(got) != 1 || got[0].Job.ID != b.ID {
		t.Fatalf("tenant B claimed %d jobs, want only its own", len(got))
	}
	if st, err := e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantA, Queue: "q", Now: at(time.Second)}); err != nil || st.Queued != 1 || st.Leased != 0 {
		t.Fatalf("tenant A's stats after B's claim: %+v, %v", st, err)
	}
}
