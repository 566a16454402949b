package dispatch

import (
	"context"
	"fmt"
	"testing"

	"github.com/leasehold/leasehold/store"
)

// claimAsTheCreateWould runs a reservation's claims on st, as the create's
// transaction does (store.HandoffCreator), and returns their leases.
func claimAsTheCreateWould(t *testing.T, st store.Store, r *Reservation) []store.ClaimedJob {
	t.Helper()
	var out []store.ClaimedJob
	for _, c := range r.Claims() {
		got, err := st.ClaimMany(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, got...)
	}
	return out
}

// TestReserveSetsAsideOnlyWaitersARoundWouldClaimFor: a reservation asks
// at most what the create needs, of waiters on the create's queue that
// have room, are not backlogged, not answered by their first round and
// not already claiming; while reserved, no round claims for them, and
// Finish delivers each its own leases and takes their credits.
func TestReserveSetsAsideOnlyWaitersARoundWouldClaimFor(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	d := New(Config{Store: st})
	a, b, skipped := newCollector(), newCollector(), newCollector()
	wa := &Waiter{Tenant: tenant, Worker: "a", Queues: []string{"q", "other"}, Deliver: a.deliver}
	wb := &Waiter{Tenant: tenant, Worker: "b", Queues: []string{"q"}, Deliver: b.deliver}
	d.Add(wa, 5)
	d.Add(wb, 1)
	d.Add(&Waiter{Tenant: tenant, Worker: "elsewhere", Queues: []string{"other"}, Deliver: skipped.deliver}, 5)
	d.Add(&Waiter{Tenant: "another", Worker: "tenant", Queues: []string{"q"}, Deliver: skipped.deliver}, 5)
	d.Add(&Waiter{Tenant: tenant, Worker: "backlogged", Queues: []string{"q"}, Deliver: skipped.deliver,
		Backlogged: func() bool { return true }}, 5)
	d.Add(&Waiter{Tenant: tenant, Worker: "now", Queues: []string{"q"}, OneShot: true, Immediate: true, Deliver: skipped.deliver}, 5)
	d.Add(&Waiter{Tenant: tenant, Worker: "full", Queues: []string{"q"}, Capacity: 1, Held: func() int { return 1 }, Deliver: skipped.deliver}, 1)
	d.runOnce(context.Background()) // the new waiters' first round: the queue is empty
	if len(d.Waiters()) != 6 {
		t.Fatalf("%d waiters after the first round, want 6 (the immediate one answered)", len(d.Waiters()))
	}

	r := d.Reserve(tenant, map[string]int{"q": 10})
	if r == nil {
		t.Fatal("no reservation with two waiters free")
	}
	asked := map[string]int{}
	for _, c := range r.Claims() {
		if c.Tenant != tenant || len(c.Queues) != 1 || c.Queues[0] != "q" {
			t.Fatalf("claim %+v, want tenant %q queue q", c, tenant)
		}
		for _, w := range c.Waiters {
			asked[w.Worker] += w.Max
		}
	}
	if len(asked) != 2 || asked["a"] != 5 || asked["b"] != 1 {
		t.Fatalf("asked %v; want a 5 and b 1 (their credits: fewer than the 10 jobs)", asked)
	}
	if again := d.Reserve(tenant, map[string]int{"q": 3}); again != nil {
		t.Fatalf("reserved waiters were reserved again: %+v", again.Claims())
	}

	create(t, st, 6)
	d.WakeAll()
	if n := d.runOnce(context.Background()); n != 0 {
		t.Fatalf("a round delivered %d leases to reserved waiters", n)
	}
	delivered := r.Finish(context.Background(), claimAsTheCreateWould(t, st, r))
	if delivered["q"] != 6 || a.count() != 5 || b.count() != 1 || skipped.count() != 0 {
		t.Fatalf("delivered %v: a %d, b %d, others %d; want 6: a 5, b 1, others 0",
			delivered, a.count(), b.count(), skipped.count())
	}
	for _, j := range append(a.jobs, b.jobs...) {
		if j.Token.Generation != 1 {
			t.Fatalf("token %+v", j.Token)
		}
	}
	if d.Credits(wa) != 0 || d.Credits(wb) != 0 {
		t.Fatalf("credits a %d, b %d after the handoff", d.Credits(wa), d.Credits(wb))
	}
}

// TestAWakeUpDuringAReservationIsServedAfterIt: a wake-up that came while
// the waiter was reserved (a job another coordinator created, say) is
// not lost: Finish queues the round that could not run for it.
func TestAWakeUpDuringAReservationIsServedAfterIt(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	d := New(Config{Store: st})
	col := newCollector()
	w := &Waiter{Tenant: tenant, Worker: "w", Queues: []string{"q"}, Deliver: col.deliver}
	d.Add(w, 5)
	d.runOnce(context.Background())
	r := d.Reserve(tenant, map[string]int{"q": 1})
	if r == nil {
		t.Fatal("no reservation")
	}
	create(t, st, 2) // one for the create's claim, one woken for meanwhile
	d.Wake(tenant, "q")
	if n := d.runOnce(context.Background()); n != 0 {
		t.Fatalf("a round delivered %d to a reserved waiter", n)
	}
	r.Finish(context.Background(), claimAsTheCreateWould(t, st, r))
	if col.count() != 1 {
		t.Fatalf("the handoff delivered %d, want 1", col.count())
	}
	if n := d.runOnce(context.Background()); n != 1 || col.count() != 2 {
		t.Fatalf("the round after the handoff delivered %d (total %d), want 1 (2)", n, col.count())
	}
}

// TestHandoffLeasesAWaiterCannotTakeAreReleased: a waiter that went away
// while reserved refuses the leases; Finish releases them without
// spending the attempt, and the waiter's credits are untouched.
func TestHandoffLeasesAWaiterCannotTakeAreReleased(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	d := New(Config{Store: st})
	col := newCollector()
	col.refuse = true
	w := &Waiter{Tenant: tenant, Worker: "gone", Queues: []string{"q"}, Deliver: col.deliver}
	d.Add(w, 2)
	d.runOnce(context.Background())
	r := d.Reserve(tenant, map[string]int{"q": 2})
	create(t, st, 2)
	if got := r.Finish(context.Background(), claimAsTheCreateWould(t, st, r)); got["q"] != 0 {
		t.Fatalf("delivered %v to a refusing waiter", got)
	}
	wantQueuedUnspent(t, st, "a refused handoff")
	if d.Credits(w) != 2 {
		t.Fatalf("credits %d, want 2", d.Credits(w))
	}
}

// TestNoReservationOnceQuiesced: a draining coordinator hands nothing out.
func TestNoReservationOnceQuiesced(t *testing.T) {
	t.Parallel()
	d := New(Config{Store: setup(t, 0)})
	d.Add(&Waiter{Tenant: tenant, Worker: "w", Queues: []string{"q"}, Deliver: newCollector().deliver}, 5)
	d.Quiesce()
	if r := d.Reserve(tenant, map[string]int{"q": 1}); r != nil {
		t.Fatalf("reserved after Quiesce: %+v", r.Claims())
	}
}

// TestReservedSharesAreTheClaimsShares: a create's jobs are shared as a
// round's claim for all the free waiters would share them
// (store.ClaimSlots): 5 jobs among credits of 10, 1, 1 and 1 all go to the
// waiter with 10, since the others' single slot is the middle of their
// share. The waiters that got no share stay free for the next create.
func TestReservedSharesAreTheClaimsShares(t *testing.T) {
	t.Parallel()
	d := New(Config{Store: setup(t, 0)})
	for w, credits := range map[string]int{"big": 10, "s1": 1, "s2": 1, "s3": 1} {
		d.Add(&Waiter{Tenant: tenant, Worker: w, Queues: []string{"q"}, Deliver: newCollector().deliver}, credits)
	}
	d.runOnce(context.Background())
	asked := func(r *Reservation) map[string]int {
		out := map[string]int{}
		for _, c := range r.Claims() {
			for _, w := range c.Waiters {
				out[w.Worker] += w.Max
			}
		}
		return out
	}
	first := d.Reserve(tenant, map[string]int{"q": 5})
	if got := asked(first); fmt.Sprint(got) != "map[big:5]" {
		t.Fatalf("5 jobs among 10, 1, 1, 1 credits: asked %v, want big 5", got)
	}
	second := d.Reserve(tenant, map[string]int{"q": 3})
	if got := asked(second); fmt.Sprint(got) != "map[s1:1 s2:1 s3:1]" {
		t.Fatalf("the next 3 jobs: asked %v, want s1, s2 and s3 one each", got)
	}
	first.Finish(context.Background(), nil)
	second.Finish(context.Background(), nil)
}
