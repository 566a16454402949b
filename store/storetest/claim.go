package storetest

import (
	"cmp"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// claimTests cover Claim: order, availability, the lease it grants and the
// queue rules it obeys.
func claimTests() group {
	return group{name: "Claim", cases: []testCase{
		{"jobs are claimed by priority, then available_at, then id", testClaimOrder},
		{"a job scheduled in the future is not claimable until Now reaches it", testClaimFuture},
		{"a claim sets owner, expiry, generation and attempts and records the attempt", testClaimSetsLease},
		{"a zero lease duration uses the queue's default lease", testClaimDefaultLease},
		{"a claim takes at most Max jobs across the named queues only", testClaimMaxAndQueues},
		{"a claim skips paused queues until they are resumed", testClaimPaused},
		{"a claim honours the queue's concurrency limit", testClaimConcurrencyLimit},
	}}
}

func testClaimOrder(t *testing.T, h Harness) {
	e := setup(t, h)
	// Ids that do not sort by creation, so "then id" is observable.
	e.f.randomIDs.Store(true)
	type item struct {
		prio  int32
		runAt time.Duration
	}
	items := []item{
		{0, -3 * time.Minute}, {5, -time.Minute}, {5, -2 * time.Minute}, {0, -3 * time.Minute},
		{-5, -10 * time.Minute}, {0, -3 * time.Minute}, {1000, time.Hour}, {-1000, -time.Hour},
	}
	var jobs []*store.Job
	for _, it := range items {
		sp := spec("ordered")
		sp.Priority = it.prio
		sp.RunAt = at(it.runAt)
		jobs = append(jobs, e.mustCreate(tenantA, sp, base))
	}
	available := slices.DeleteFunc(slices.Clone(jobs), func(j *store.Job) bool { return j.AvailableAt.After(base) })
	slices.SortFunc(available, func(a, b *store.Job) int {
		return cmp.Or(cmp.Compare(b.Priority, a.Priority), a.AvailableAt.Compare(b.AvailableAt), cmp.Compare(a.ID, b.ID))
	})
	for i, want := range available {
		c := e.mustClaim(tenantA, workerA, "ordered", "", base)
		if c.Job.ID != want.ID {
			t.Fatalf("claim %d returned job %s (priority %d, available %s), want %s (priority %d, available %s)",
				i+1, c.Job.ID, c.Job.Priority, c.Job.AvailableAt, want.ID, want.Priority, want.AvailableAt)
		}
	}
	e.claimNothing(tenantA, "ordered", base, "the priority-1000 job is scheduled an hour ahead")
	e.mustClaim(tenantA, workerA, "ordered", jobs[6].ID, at(time.Hour))
}

func testClaimFuture(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := spec("later")
	sp.RunAt = at(time.Hour)
	j := e.mustCreate(tenantA, sp, base)
	sp2 := spec("later")
	sp2.RunAfter = 2 * time.Hour
	j2 := e.mustCreate(tenantA, sp2, base)
	e.claimNothing(tenantA, "later", at(time.Hour-time.Second), "one second before run_at")
	c := e.mustClaim(tenantA, workerA, "later", j.ID, at(time.Hour))
	e.complete(tenantA, c.Token, at(time.Hour+time.Second))
	e.claimNothing(tenantA, "later", at(2*time.Hour-time.Second), "one second before run_after elapses")
	e.mustClaim(tenantA, workerA, "later", j2.ID, at(2*time.Hour))
}

func testClaimSetsLease(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	got := e.get(tenantA, j.ID)
	for _, g := range []*store.Job{c.Job, got} {
		if g.State != store.JobStateLeased || g.LeaseOwner != workerA || g.LeaseGeneration != 1 || g.Attempts != 1 {
			t.Fatalf("claimed job is %s, owner %q, generation %d, attempts %d; want leased, %s, 1, 1", g.State, g.LeaseOwner, g.LeaseGeneration, g.Attempts, workerA)
		}
		wantTime(t, "lease expiry", g.LeaseExpiresAt, at(time.Second+lease))
	}
	if c.Token != (store.LeaseToken{JobID: j.ID, Generation: 1, WorkerID: workerA}) {
		t.Fatalf("token %+v", c.Token)
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased)
	as := e.attempts(tenantA, j.ID)
	if len(as) != 1 || as[0].LeaseGeneration != 1 || as[0].WorkerID != workerA || as[0].Outcome != store.AttemptRunning || as[0].Attempt != 1 {
		t.Fatalf("attempt history %+v, want one running attempt 1 of %s at generation 1", as, workerA)
	}
	wantTime(t, "attempt claimed_at", as[0].ClaimedAt, at(time.Second))
	// A leased job is not claimable again while its lease runs.
	e.claimNothing(tenantA, "default", at(lease), "the lease has not expired")
}

func testClaimDefaultLease(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "slow", DefaultLeaseDuration: 2 * time.Minute})
	slow := e.mustCreate(tenantA, spec("slow"), base)
	plain := e.mustCreate(tenantA, spec("plain"), base)
	got := e.claim(tenantA, workerA, "slow", 1, 0, at(time.Second))
	if len(got) != 1 || got[0].Job.ID != slow.ID {
		t.Fatalf("claim from slow: %d jobs", len(got))
	}
	wantTime(t, "lease expiry with the queue's default lease", got[0].Job.LeaseExpiresAt, at(time.Second+2*time.Minute))
	got = e.claim(tenantA, workerA, "plain", 1, 0, at(time.Second))
	if len(got) != 1 || got[0].Job.ID != plain.ID {
		t.Fatalf("claim from plain: %d jobs", len(got))
	}
	wantTime(t, "lease expiry without a policy", got[0].Job.LeaseExpiresAt, at(time.Second+store.LeaseDurationDefault))
	// An explicit duration wins over the queue's default.
	other := e.mustCreate(tenantA, spec("slow"), base)
	got = e.claim(tenantA, workerA, "slow", 1, 10*time.Second, at(time.Second))
	if len(got) != 1 || got[0].Job.ID != other.ID {
		t.Fatalf("second claim from slow: %d jobs", len(got))
	}
	wantTime(t, "lease expiry with an explicit lease", got[0].Job.LeaseExpiresAt, at(11*time.Second))
}

func testClaimMaxAndQueues(t *testing.T, h Harness) {
	e := setup(t, h)
	for range 4 {
		e.mustCreate(tenantA, spec("q1"), base)
		e.mustCreate(tenantA, spec("q2"), base)
		e.mustCreate(tenantA, spec("q3"), base)
	}
	got, err := e.s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{"q1", "q2"}, Max: 5, LeaseDuration: lease, Now: at(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 {
		t.Fatalf("claim with max 5 returned %d jobs", len(got))
	}
	seen := map[string]bool{}
	for _, c := range got {
		if c.Job.Queue == "q3" {
			t.Fatalf("a claim from q1 and q2 returned a job of q3")
		}
		if seen[c.Job.ID] {
			t.Fatalf("one claim returned job %s twice", c.Job.ID)
		}
		seen[c.Job.ID] = true
	}
	got, err = e.s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{"q1", "q2"}, Max: 10, LeaseDuration: lease, Now: at(time.Second)})
	if err != nil || len(got) != 3 {
		t.Fatalf("second claim: %d jobs, %v; want the remaining 3", len(got), err)
	}
	e.claimNothing(tenantA, "q1", at(2*time.Second), "q1 is drained")
	if got := e.claim(tenantA, workerA, "q3", 10, lease, at(2*time.Second)); len(got) != 4 {
		t.Fatalf("q3 has %d claimable jobs, want 4", len(got))
	}
}

func testClaimPaused(t *testing.T, h Harness) {
	e := setup(t, h)
	paused := e.mustCreate(tenantA, spec("paused"), base)
	open := e.mustCreate(tenantA, spec("open"), base)
	p, err := e.s.SetQueuePaused(e.ctx, tenantA, "paused", true)
	if err != nil || !p.Paused {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	got, err := e.s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{"paused", "open"}, Max: 10, LeaseDuration: lease, Now: at(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Job.ID != open.ID {
		t.Fatalf("claim from a paused and an open queue returned %d jobs, want only the open queue's", len(got))
	}
	// Pausing twice is harmless; a pause survives a policy update.
	if _, err := e.s.SetQueuePaused(e.ctx, tenantA, "paused", true); err != nil {
		t.Fatal(err)
	}
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "paused", Retry: store.RetryPolicy{MaxAttempts: 3}})
	e.claimNothing(tenantA, "paused", at(2*time.Second), "the queue is paused")
	if qs, err := e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantA, Queue: "paused", Now: at(2 * time.Second)}); err != nil || !qs.Paused || qs.Queued != 1 {
		t.Fatalf("stats of the paused queue: %+v, %v", qs, err)
	}
	p, err = e.s.SetQueuePaused(e.ctx, tenantA, "paused", false)
	if err != nil || p.Paused || p.Retry.MaxAttempts != 3 {
		t.Fatalf("resume: %+v, %v; want unpaused with the updated policy", p, err)
	}
	e.mustClaim(tenantA, workerA, "paused", paused.ID, at(3*time.Second))
}

func testClaimConcurrencyLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "limited", ConcurrencyLimit: 2})
	for range 5 {
		e.mustCreate(tenantA, spec("limited"), base)
	}
	first := e.claim(tenantA, workerA, "limited", 5, lease, at(time.Second))
	if len(first) != 2 {
		t.Fatalf("claim from a queue limited to 2 returned %d jobs", len(first))
	}
	e.claimNothing(tenantA, "limited", at(2*time.Second), "two jobs are leased under a limit of 2")
	e.complete(tenantA, first[0].Token, at(3*time.Second))
	if got := e.claim(tenantA, workerB, "limited", 5, lease, at(4*time.Second)); len(got) != 1 {
		t.Fatalf("after one completion the claim returned %d jobs, want 1", len(got))
	}
	// Raising the limit lets the rest through.
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "limited", ConcurrencyLimit: 0})
	if got := e.claim(tenantA, workerB, "limited", 5, lease, at(5*time.Second)); len(got) != 2 {
		t.Fatalf("without a limit the claim returned %d jobs, want the remaining 2", len(got))
	}
}
