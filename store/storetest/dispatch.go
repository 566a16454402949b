package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// dispatchTests cover claims for many waiters at once, lease bounds, and
// the reaper that ends expired leases.
func dispatchTests() group {
	return group{name: "Dispatch", cases: []testCase{
		{"one claim serves several waiters, each within its share", testClaimManyShares},
		{"when jobs are short, waiters share them in proportion to what they asked", testClaimManyProportional},
		{"a queue's maximum lease bounds what claims and renewals ask for", testMaxLease},
		{"an expired lease is not claimable until the reaper ends it", testExpiredNotClaimableUntilReaped},
		{"the reaper reports the earliest expiry still pending", testReaperNextExpiry},
		{"two stores reaping at once end each expired lease exactly once", testConcurrentReapers},
	}}
}

func (e *env) claimMany(queue string, waiters []store.ClaimWaiter, now time.Time) map[string][]store.ClaimedJob {
	e.t.Helper()
	got, err := e.s.ClaimMany(e.ctx, store.ClaimManyParams{Tenant: tenantA, Queues: []string{queue}, Waiters: waiters, Now: now})
	if err != nil {
		e.t.Fatalf("claim for %d waiters: %v", len(waiters), err)
	}
	out := map[string][]store.ClaimedJob{}
	for _, c := range got {
		if c.Token.WorkerID != c.Job.LeaseOwner {
			e.t.Fatalf("job %s is leased to %s but its token names %s", c.Job.ID, c.Job.LeaseOwner, c.Token.WorkerID)
		}
		out[c.Token.WorkerID] = append(out[c.Token.WorkerID], c)
	}
	return out
}

func testClaimManyShares(t *testing.T, h Harness) {
	e := setup(t, h)
	var ids []string
	for i := range 10 {
		ids = append(ids, e.mustCreate(tenantA, spec("shared"), at(time.Duration(i)*time.Millisecond)).ID)
	}
	got := e.claimMany("shared", []store.ClaimWaiter{
		{Worker: workerA, Max: 2}, {Worker: workerB, Max: 3, LeaseDuration: time.Minute}, {Worker: workerC, Max: 1},
	}, at(time.Second))
	if len(got[workerA]) != 2 || len(got[workerB]) != 3 || len(got[workerC]) != 1 {
		t.Fatalf("shares: A %d, B %d, C %d; want 2, 3, 1", len(got[workerA]), len(got[workerB]), len(got[workerC]))
	}
	var claimed []string
	for _, w := range []string{workerA, workerB, workerC} {
		for _, c := range got[w] {
			claimed = append(claimed, c.Job.ID)
			want := at(time.Second + lease)
			if w == workerB {
				want = at(time.Second + time.Minute)
			}
			wantTime(t, "lease expiry of "+w, c.Job.LeaseExpiresAt, want)
			if c.Token.Generation != 1 || c.Job.Attempts != 1 {
				t.Errorf("%s's job %s: generation %d, attempts %d", w, c.Job.ID, c.Token.Generation, c.Job.Attempts)
			}
			evs := e.events(tenantA, c.Job.ID)
			wantEvents(t, evs, store.EventQueued, store.EventLeased)
			wantData(t, evs[1], map[string]any{"worker_id": w, "lease_generation": float64(1), "attempt": float64(1)})
		}
	}
	// The six oldest jobs, each exactly once.
	slices.Sort(claimed)
	if want := slices.Sorted(slices.Values(ids[:6])); !slices.Equal(claimed, want) {
		t.Fatalf("claimed %v, want the six oldest %v", claimed, want)
	}
	if rest := e.claim(tenantA, workerA, "shared", 10, lease, at(2*time.Second)); len(rest) != 4 {
		t.Fatalf("the next claim got %d jobs, want the 4 left", len(rest))
	}
}

func testClaimManyProportional(t *testing.T, h Harness) {
	e := setup(t, h)
	for range 5 {
		e.mustCreate(tenantA, spec("short"), base)
	}
	got := e.claimMany("short", []store.ClaimWaiter{{Worker: workerA, Max: 40}, {Worker: workerB, Max: 10}}, at(time.Second))
	if len(got[workerA]) != 4 || len(got[workerB]) != 1 {
		t.Fatalf("5 jobs among waiters asking 40 and 10: %d and %d, want 4 and 1", len(got[workerA]), len(got[workerB]))
	}
	// Equal asks split evenly.
	for range 6 {
		e.mustCreate(tenantA, spec("even"), base)
	}
	got = e.claimMany("even", []store.ClaimWaiter{{Worker: workerA, Max: 5}, {Worker: workerB, Max: 5}, {Worker: workerC, Max: 5}}, at(time.Second))
	for _, w := range []string{workerA, workerB, workerC} {
		if len(got[w]) != 2 {
			t.Errorf("6 jobs among three equal waiters: %s got %d, want 2", w, len(got[w]))
		}
	}
}

func testMaxLease(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "bounded", DefaultLeaseDuration: time.Minute, MaxLeaseDuration: 2 * time.Minute})
	if p, err := e.s.GetQueuePolicy(e.ctx, tenantA, "bounded"); err != nil || p.MaxLeaseDuration != 2*time.Minute {
		t.Fatalf("stored policy: %+v, %v", p, err)
	}
	if d := store.DefaultQueuePolicy("q").MaxLeaseDuration; d != store.MaxLeaseDurationDefault {
		t.Fatalf("default max lease %s, want %s", d, store.MaxLeaseDurationDefault)
	}
	e.mustCreate(tenantA, spec("bounded"), base)
	e.mustCreate(tenantA, spec("bounded"), base)
	long := e.claim(tenantA, workerA, "bounded", 1, time.Hour, at(time.Second))
	wantTime(t, "an hour asked of a queue with a 2m maximum", long[0].Job.LeaseExpiresAt, at(time.Second+2*time.Minute))
	def := e.claim(tenantA, workerB, "bounded", 1, 0, at(time.Second))
	wantTime(t, "the queue's default lease", def[0].Job.LeaseExpiresAt, at(time.Second+time.Minute))
	res, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{long[0].Token}, LeaseDuration: time.Hour, Now: at(time.Minute)})
	if err != nil || res[0].Status != store.RenewRenewed {
		t.Fatalf("renew: %+v, %v", res, err)
	}
	wantTime(t, "a renewal asking an hour", res[0].ExpiresAt, at(3*time.Minute))
	// A default longer than the maximum is refused.
	_, err = e.s.UpdateQueuePolicy(e.ctx, tenantA, store.QueuePolicy{Queue: "bad", DefaultLeaseDuration: time.Hour, MaxLeaseDuration: time.Minute})
	wantErr(t, err, store.ErrInvalid, "a default lease above the maximum")
}

func testExpiredNotClaimableUntilReaped(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second)) // expires at 31s
	e.claimNothing(tenantA, "default", at(time.Minute), "an expired lease before the reaper ran")
	if got := e.get(tenantA, j.ID); got.State != store.JobStateLeased || got.LeaseGeneration != 1 {
		t.Fatalf("a claim touched the expired lease: %s at generation %d", got.State, got.LeaseGeneration)
	}
	r := e.reap(at(time.Minute))
	if len(r.Jobs) != 1 || r.Jobs[0].ID != j.ID || r.Jobs[0].State != store.JobStateQueued ||
		!slices.Equal(r.Requeued, []store.QueueRef{{Tenant: tenantA, Queue: "default"}}) {
		t.Fatalf("reap: %+v", r)
	}
	got := e.get(tenantA, j.ID)
	if got.State != store.JobStateQueued || got.Attempts != 1 || !got.LeaseExpiresAt.IsZero() {
		t.Fatalf("reaped job: %s, %d attempts, lease expiry %v; want queued with its attempt spent", got.State, got.Attempts, got.LeaseExpiresAt)
	}
	wantTime(t, "reaped job's available_at (its old place)", got.AvailableAt, base)
	as := e.attempts(tenantA, j.ID)
	if len(as) != 1 || as[0].Outcome != store.AttemptLeaseExpired || as[0].WorkerID != workerA {
		t.Fatalf("attempts %+v, want A's ended lease_expired", as)
	}
	wantTime(t, "reaped attempt's claimed_at", as[0].ClaimedAt, at(time.Second))
	wantTime(t, "reaped attempt's finished_at", as[0].FinishedAt, at(time.Minute))
	// Reaping again finds nothing; the next claim takes the job.
	if r := e.reap(at(time.Minute)); len(r.Jobs) != 0 {
		t.Fatalf("a second reap ended %d leases", len(r.Jobs))
	}
	e.mustClaim(tenantA, workerB, "default", j.ID, at(time.Minute))
}

func testReaperNextExpiry(t *testing.T, h Harness) {
	e := setup(t, h)
	if r := e.reap(base); !r.NextExpiry.IsZero() || len(r.Jobs) != 0 {
		t.Fatalf("reap with no leases: %+v", r)
	}
	for range 2 {
		e.mustCreate(tenantA, spec("a"), base)
	}
	e.mustCreate(tenantB, spec("b"), base)
	e.claim(tenantA, workerA, "a", 1, 10*time.Second, at(time.Second)) // expires at 11s
	e.claim(tenantA, workerA, "a", 1, 20*time.Second, at(time.Second)) // expires at 21s
	e.claim(tenantB, workerB, "b", 1, 5*time.Second, at(time.Second))  // expires at 6s
	r := e.reap(at(2 * time.Second))
	if len(r.Jobs) != 0 {
		t.Fatalf("reaped %d live leases", len(r.Jobs))
	}
	wantTime(t, "next expiry across tenants", r.NextExpiry, at(6*time.Second))
	r = e.reap(at(12 * time.Second))
	if len(r.Jobs) != 2 {
		t.Fatalf("reaped %d leases at 12s, want the two expired", len(r.Jobs))
	}
	wantTime(t, "next expiry after reaping", r.NextExpiry, at(21*time.Second))
}

func testConcurrentReapers(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	const n = 60
	for range n {
		e.mustCreate(tenantA, spec("many"), base)
	}
	if got := e.claim(tenantA, workerA, "many", n, lease, at(time.Second)); len(got) != n {
		t.Fatalf("claimed %d", len(got))
	}
	start := make(barrier)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		reaped  = map[string]int{}
		errs    []error
		perPass = 7 // small passes, so the reapers interleave
	)
	for _, s := range []store.Store{e.s, other, e.s, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			for {
				r, err := s.ReapExpired(e.ctx, store.ReapParams{Limit: perPass, Now: at(time.Hour)})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				}
				for _, j := range r.Jobs {
					reaped[j.ID]++
				}
				mu.Unlock()
				if err != nil || len(r.Jobs) == 0 {
					return
				}
			}
		}()
	}
	start.open()
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("reapers failed: %v", errs)
	}
	if len(reaped) != n {
		t.Fatalf("%d of %d expired leases were reaped", len(reaped), n)
	}
	for id, k := range reaped {
		if k != 1 {
			t.Errorf("job %s was reaped %d times", id, k)
		}
		evs := e.events(tenantA, id)
		if countEvents(evs, store.EventLeaseExpired) != 1 {
			t.Errorf("job %s: events %v, want one lease_expired", id, eventTypes(evs))
		}
		if as := e.attempts(tenantA, id); len(as) != 1 {
			t.Errorf("job %s: %d attempt rows, want 1", id, len(as))
		}
	}
}
