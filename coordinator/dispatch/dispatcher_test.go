package dispatch

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const tenant = "t"

// setup opens a real SQLite store with n queued jobs in queue "q".
func setup(t *testing.T, n int) store.Store {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if n > 0 {
		create(t, st, n)
	}
	return st
}

func create(t *testing.T, st store.Store, n int) []string {
	t.Helper()
	reqs := make([]store.CreateRequest, n)
	for i := range reqs {
		reqs[i] = store.CreateRequest{Spec: store.JobSpec{Queue: "q", Kind: "k", Payload: []byte(fmt.Sprint(i))}}
	}
	res, err := st.CreateJobs(context.Background(), store.CreateJobsParams{Tenant: tenant, Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// collector is a waiter's Deliver that records what it got.
type collector struct {
	mu     sync.Mutex // guards jobs, refuse
	jobs   []store.ClaimedJob
	refuse bool
	got    chan struct{}
}

func newCollector() *collector { return &collector{got: make(chan struct{}, 100)} }

func (c *collector) deliver(jobs []store.ClaimedJob) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refuse {
		return false
	}
	c.jobs = append(c.jobs, jobs...)
	c.got <- struct{}{}
	return true
}

// wantQueuedUnspent fails unless every job is queued with no attempt
// spent: released leases give the attempt back.
func wantQueuedUnspent(t *testing.T, st store.Store, after string) {
	t.Helper()
	page, err := st.ListJobs(context.Background(), store.ListJobsParams{Tenant: tenant, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range page.Jobs {
		if j.State != store.JobStateQueued || j.Attempts != 0 {
			t.Fatalf("job %s after %s: %s, %d attempts; want queued, 0", j.ID, after, j.State, j.Attempts)
		}
	}
}

func (c *collector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.jobs)
}

func TestLeasesNeverExceedTheCreditsGranted(t *testing.T) {
	t.Parallel()
	st := setup(t, 10)
	d := New(Config{Store: st})
	col := newCollector()
	w := &Waiter{Tenant: tenant, Worker: "w", Queues: []string{"q"}, Deliver: col.deliver}
	d.Add(w, 3)
	ctx := context.Background()
	if n := d.runOnce(ctx); n != 3 || col.count() != 3 || d.Credits(w) != 0 {
		t.Fatalf("round 1 delivered %d (collected %d, credits left %d); want 3, 3, 0", n, col.count(), d.Credits(w))
	}
	d.WakeAll()
	if n := d.runOnce(ctx); n != 0 {
		t.Fatalf("a waiter without credits got %d leases", n)
	}
	d.AddCredits(w, 2)
	if n := d.runOnce(ctx); n != 2 || col.count() != 5 {
		t.Fatalf("round 3 delivered %d (total %d); want 2 (5)", n, col.count())
	}
	for _, j := range col.jobs {
		if j.Token.WorkerID != "w" || j.Token.Generation != 1 {
			t.Fatalf("token %+v", j.Token)
		}
	}
}

func TestUndeliverableLeasesAreReleasedWithoutSpendingTheAttempt(t *testing.T) {
	t.Parallel()
	st := setup(t, 2)
	d := New(Config{Store: st})
	col := newCollector()
	col.refuse = true // the stream went away between claim and delivery
	w := &Waiter{Tenant: tenant, Worker: "gone", Queues: []string{"q"}, Deliver: col.deliver}
	d.Add(w, 5)
	if n := d.runOnce(context.Background()); n != 0 {
		t.Fatalf("delivered %d to a refusing waiter", n)
	}
	wantQueuedUnspent(t, st, "a refused delivery")
	if d.Credits(w) != 5 {
		t.Fatalf("credits after refusal = %d; want 5 (nothing was delivered)", d.Credits(w))
	}
}

func TestOneShotWaitersAreRemovedAfterDelivery(t *testing.T) {
	t.Parallel()
	st := setup(t, 3)
	d := New(Config{Store: st})
	col := newCollector()
	d.Add(&Waiter{Tenant: tenant, Worker: "poll", Queues: []string{"q"}, OneShot: true, Deliver: col.deliver}, 2)
	d.runOnce(context.Background())
	if col.count() != 2 || len(d.Waiters()) != 0 {
		t.Fatalf("one-shot: collected %d, %d waiters left; want 2, 0", col.count(), len(d.Waiters()))
	}
}

func TestWakeUpsOnlyClaimForMatchingWaiters(t *testing.T) {
	t.Parallel()
	st := setup(t, 1)
	d := New(Config{Store: st})
	other, mine := newCollector(), newCollector()
	d.Add(&Waiter{Tenant: tenant, Worker: "other", Queues: []string{"elsewhere"}, Deliver: other.deliver}, 1)
	d.Add(&Waiter{Tenant: tenant, Worker: "mine", Queues: []string{"q"}, Deliver: mine.deliver}, 1)
	d.runOnce(context.Background()) // the initial round for both (new waiters)
	if mine.count() != 1 || other.count() != 0 {
		t.Fatalf("mine %d, other %d", mine.count(), other.count())
	}
}

func TestNotifierWakesIdleWaitersWithoutPolling(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	d := New(Config{Store: st, PollInterval: time.Hour})
	col := newCollector()
	w := &Waiter{Tenant: tenant, Worker: "idle", Queues: []string{"q"}, Deliver: col.deliver}
	d.Start(context.Background())
	defer d.Stop()
	d.Add(w, 5)
	// The first job may be taken by the waiter's own first round; after
	// that round the waiter is idle with credits left, and with polling
	// off only a notification can bring it the second job.
	for i := range 2 {
		ids := create(t, st, 1)
		select {
		case <-col.got:
		case <-time.After(30 * time.Second):
			t.Fatalf("job %d did not reach the idle waiter", i)
		}
		if got := col.jobs[len(col.jobs)-1].Job.ID; got != ids[0] {
			t.Fatalf("got %s, want %s", got, ids[0])
		}
	}
	d.Stop()
	d.Stop() // safe twice
	select {
	case <-d.Quiesced():
	default:
		t.Fatal("Stop did not quiesce")
	}
	if d.Add(&Waiter{Tenant: tenant, Worker: "late", Queues: []string{"q"}, Deliver: col.deliver}, 1) {
		t.Fatal("Add after Stop registered a waiter")
	}
}

// While busy, credits that come back during the cooldown after a round
// that delivered go out in one claim; an idle dispatcher does not wait.
func TestCreditsReturnedDuringTheCooldownShareOneClaim(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	type round struct{ delivered int }
	rounds := make(chan round, 100)
	const cooldown = 500 * time.Millisecond
	d := New(Config{Store: st, Cooldown: cooldown, PollInterval: time.Hour,
		Round: func(_ time.Duration, n int) { rounds <- round{n} }})
	col := newCollector()
	w := &Waiter{Tenant: tenant, Worker: "w", Queues: []string{"q"}, Deliver: col.deliver}
	ctx := t.Context()
	d.Start(ctx)
	defer d.Stop()
	d.Add(w, 1)
	if r := <-rounds; r.delivered != 0 {
		t.Fatalf("the first round, on an empty queue, delivered %d", r.delivered)
	}
	// Idle: a new job is claimed at once, not after a cooldown.
	create(t, st, 1)
	start := time.Now()
	d.Wake(tenant, "q")
	if r := <-rounds; r.delivered != 1 {
		t.Fatalf("the round after the create delivered %d, want 1", r.delivered)
	}
	if waited := time.Since(start); waited >= cooldown {
		t.Fatalf("an idle dispatcher took %s to claim a new job; it waited out the cooldown", waited)
	}
	// Busy: five credits trickle back during the cooldown.
	create(t, st, 10)
	for range 5 {
		d.AddCredits(w, 1)
	}
	r := <-rounds
	if r.delivered != 5 {
		t.Fatalf("after the cooldown one round delivered %d, want the 5 credits' worth at once", r.delivered)
	}
	if waited := time.Since(start); waited < cooldown {
		t.Fatalf("the next round came %s after a round that delivered, before the cooldown of %s", waited, cooldown)
	}
	if got := col.count(); got != 6 {
		t.Fatalf("collected %d leases, want 6", got)
	}
}

// addFastWaiter registers, with capacity credits, a waiter of a worker
// faster than the claimer: before its Deliver returns, the worker has run
// the leases and its grant of the freed capacity has been applied
// (AddCredits, as from the stream's receiver goroutine). The barrier makes
// the race that a busy machine hits now and then happen every time.
func addFastWaiter(d *Dispatcher, capacity int) (*Waiter, *collector) {
	col := newCollector()
	w := &Waiter{Tenant: tenant, Worker: "fast", Queues: []string{"q"}, Capacity: capacity}
	w.Deliver = func(jobs []store.ClaimedJob) bool {
		if !col.deliver(jobs) {
			return false
		}
		granted := make(chan struct{})
		go func() {
			defer close(granted)
			d.AddCredits(w, len(jobs))
		}()
		<-granted
		return true
	}
	d.Add(w, capacity)
	return w, col
}

// TestCreditsGrantedBackDuringDeliveryAreKept: a worker whose grant for the
// capacity its leases freed arrives before the claimer has finished
// delivering keeps every credit. (When the round spent the credits after
// Deliver, the grant found the spent credits still counted, the capacity
// cap discarded it, and the stream was pushed fewer jobs than it had room
// for from then on: drains fell from thousands of jobs/s to hundreds.)
func TestCreditsGrantedBackDuringDeliveryAreKept(t *testing.T) {
	t.Parallel()
	st := setup(t, 9)
	d := New(Config{Store: st})
	w, col := addFastWaiter(d, 3)
	ctx := context.Background()
	for round := 1; round <= 3; round++ {
		if n := d.runOnce(ctx); n != 3 {
			t.Fatalf("round %d delivered %d, want 3", round, n)
		}
		if got := d.Credits(w); got != 3 {
			t.Fatalf("after round %d the waiter has %d credits, want 3: the grant made during delivery was lost", round, got)
		}
	}
	if col.count() != 9 {
		t.Fatalf("collected %d leases, want 9", col.count())
	}
}

// TestHandoffKeepsCreditsGrantedBackDuringDelivery is the same race for
// leases handed off by a create.
func TestHandoffKeepsCreditsGrantedBackDuringDelivery(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	d := New(Config{Store: st})
	w, _ := addFastWaiter(d, 2)
	d.runOnce(context.Background()) // its first round: the queue is empty
	r := d.Reserve(tenant, map[string]int{"q": 2})
	create(t, st, 2)
	if got := r.Finish(context.Background(), claimAsTheCreateWould(t, st, r)); got["q"] != 2 {
		t.Fatalf("handed off %v, want 2 in q", got)
	}
	if got := d.Credits(w); got != 2 {
		t.Fatalf("the waiter has %d credits after the handoff, want 2: the grant made during delivery was lost", got)
	}
}
