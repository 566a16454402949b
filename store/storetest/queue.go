package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// queueTests cover queue policies, pausing and the queue listings.
func queueTests() group {
	return group{name: "Queue", cases: []testCase{
		{"a queue without a stored policy has the default policy", testQueuePolicyDefaults},
		{"an updated policy is stored with defaults filled in and keeps the paused flag", testQueuePolicyUpdate},
		{"queue stats count jobs by state", testQueueStats},
		{"queues with jobs or a policy are listed by name with their stats", testListQueues},
	}}
}

// samePolicy compares policies, treating nil and empty code lists alike.
func samePolicy(a, b store.QueuePolicy) bool {
	codes := func(c []string) []string {
		if len(c) == 0 {
			return nil
		}
		return c
	}
	a.Retry.RetryableErrorCodes, b.Retry.RetryableErrorCodes = codes(a.Retry.RetryableErrorCodes), codes(b.Retry.RetryableErrorCodes)
	a.Retry.NonRetryableErrorCodes, b.Retry.NonRetryableErrorCodes = codes(a.Retry.NonRetryableErrorCodes), codes(b.Retry.NonRetryableErrorCodes)
	return a.Queue == b.Queue && a.DefaultLeaseDuration == b.DefaultLeaseDuration && a.ConcurrencyLimit == b.ConcurrencyLimit &&
		a.Paused == b.Paused && a.Retry.MaxAttempts == b.Retry.MaxAttempts && a.Retry.InitialDelay == b.Retry.InitialDelay &&
		a.Retry.MaxDelay == b.Retry.MaxDelay && a.Retry.Multiplier == b.Retry.Multiplier &&
		a.Retry.JitterFraction == b.Retry.JitterFraction && a.Retry.TotalRetryDeadline == b.Retry.TotalRetryDeadline &&
		slices.Equal(a.Retry.RetryableErrorCodes, b.Retry.RetryableErrorCodes) &&
		slices.Equal(a.Retry.NonRetryableErrorCodes, b.Retry.NonRetryableErrorCodes)
}

func testQueuePolicyDefaults(t *testing.T, h Harness) {
	e := setup(t, h)
	got, err := e.s.GetQueuePolicy(e.ctx, tenantA, "fresh")
	if err != nil {
		t.Fatalf("get policy of a queue without one: %v", err)
	}
	if want := store.DefaultQueuePolicy("fresh"); !samePolicy(*got, want) {
		t.Fatalf("policy %+v, want the default %+v", *got, want)
	}
	// Reading a default policy does not create a queue.
	if qs, err := e.s.ListQueues(e.ctx, tenantA); err != nil || len(qs) != 0 {
		t.Fatalf("queues after reading a default policy: %+v, %v", qs, err)
	}
	// The default policy's jitter applies to retries: with rand pinned at
	// 1/2 and no policy stored, the first delay is 1s × (1 + 0.1 × 0.5).
	e.f.setRand(0.5)
	j := e.mustCreate(tenantA, spec("fresh"), base)
	c := e.mustClaim(tenantA, workerA, "fresh", j.ID, at(time.Second))
	r := e.retry(tenantA, c.Token, errTransient, 0, at(2*time.Second))
	wantTime(t, "available_at under the default policy", r.AvailableAt, at(2*time.Second+1050*time.Millisecond))
}

func testQueuePolicyUpdate(t *testing.T, h Harness) {
	e := setup(t, h)
	in := store.QueuePolicy{
		Queue: "billing",
		Retry: store.RetryPolicy{
			MaxAttempts: 7, InitialDelay: 5 * time.Second, JitterFraction: 0.2,
			NonRetryableErrorCodes: []string{"invalid_card"}, RetryableErrorCodes: []string{"rate_limited"},
			TotalRetryDeadline: 6 * time.Hour,
		},
		ConcurrencyLimit: 4,
		Paused:           true, // ignored: pausing has its own call
	}
	want := in
	want.Retry.MaxDelay = store.RetryMaxDelayDefault
	want.Retry.Multiplier = store.RetryMultiplierDefault
	want.DefaultLeaseDuration = store.LeaseDurationDefault
	want.Paused = false
	got := e.setPolicy(tenantA, in)
	if !samePolicy(*got, want) {
		t.Fatalf("updated policy %+v, want %+v", *got, want)
	}
	read, err := e.s.GetQueuePolicy(e.ctx, tenantA, "billing")
	if err != nil || !samePolicy(*read, want) {
		t.Fatalf("stored policy %+v, %v; want %+v", read, err, want)
	}
	// The caller's slices are not kept by reference.
	in.Retry.NonRetryableErrorCodes[0] = "mutated"
	if read, _ := e.s.GetQueuePolicy(e.ctx, tenantA, "billing"); read.Retry.NonRetryableErrorCodes[0] != "invalid_card" {
		t.Fatalf("the stored policy aliases the caller's slice")
	}

	// Pause, then update: the pause stays.
	p, err := e.s.SetQueuePaused(e.ctx, tenantA, "billing", true)
	if err != nil || !p.Paused || p.Retry.MaxAttempts != 7 {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	upd := want
	upd.Retry.MaxAttempts = 3
	upd.Paused = false
	got = e.setPolicy(tenantA, upd)
	if !got.Paused || got.Retry.MaxAttempts != 3 {
		t.Fatalf("update of a paused queue returned paused %v, max attempts %d; want paused, 3", got.Paused, got.Retry.MaxAttempts)
	}
	// Pausing a queue without a policy creates one with defaults.
	p, err = e.s.SetQueuePaused(e.ctx, tenantA, "new", true)
	if err != nil {
		t.Fatal(err)
	}
	wantNew := store.DefaultQueuePolicy("new")
	wantNew.Paused = true
	if !samePolicy(*p, wantNew) {
		t.Fatalf("pausing a queue without a policy: %+v, want %+v", *p, wantNew)
	}
	if p, err = e.s.SetQueuePaused(e.ctx, tenantA, "new", false); err != nil || p.Paused {
		t.Fatalf("resume: %+v, %v", p, err)
	}
	// A job created after a policy update takes the new budget.
	j := e.mustCreate(tenantA, spec("billing"), base)
	if j.MaxAttempts != 3 {
		t.Fatalf("job created under max attempts 3 has %d", j.MaxAttempts)
	}
}

func testQueueStats(t *testing.T, h Harness) {
	e := setup(t, h)
	const q = "stats"
	e.mustCreate(tenantA, spec(q), base)
	e.mustCreate(tenantA, spec(q), base)
	future := spec(q)
	future.RunAt = at(time.Hour)
	e.mustCreate(tenantA, future, base)
	// The oldest job is available first, so the claim below takes it.
	leased := e.mustCreate(tenantA, spec(q), at(-time.Minute))
	// The oldest job is claimed first; it stays leased.
	c := e.claim(tenantA, workerA, q, 1, time.Hour, at(time.Second))
	if len(c) != 1 || c[0].Job.ID != leased.ID {
		t.Fatalf("claim of the oldest job: %+v", c)
	}
	for _, end := range []string{"succeeded", "failed", "cancelled", "dead"} {
		sp := spec(q)
		sp.MaxAttempts = 1
		sp.Priority = 100 // claimed before the queued ones
		j := e.mustCreate(tenantA, sp, base)
		cj := e.mustClaim(tenantA, workerA, q, j.ID, at(2*time.Second))
		switch end {
		case "succeeded":
			e.complete(tenantA, cj.Token, at(3*time.Second))
		case "failed":
			e.retry(tenantA, cj.Token, store.JobError{Code: "bad", Retryable: false}, 0, at(3*time.Second))
		case "cancelled":
			if _, err := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: cj.Token, Now: at(3 * time.Second)}); err != nil {
				t.Fatal(err)
			}
		case "dead":
			e.retry(tenantA, cj.Token, errTransient, 0, at(3*time.Second))
		}
	}
	e.mustCreate(tenantA, spec("elsewhere"), base) // another queue: not counted
	e.mustCreate(tenantB, spec(q), base)           // another tenant: not counted

	st, err := e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantA, Queue: q, Now: at(time.Minute)})
	if err != nil {
		t.Fatalf("queue stats: %v", err)
	}
	// The two available jobs were due at base: a minute of lag.
	want := store.QueueStats{Queue: q, Queued: 3, Available: 2, Leased: 1, Succeeded: 1, Failed: 1, Cancelled: 1, Dead: 1, Lag: time.Minute}
	if *st != want {
		t.Fatalf("stats %+v, want %+v", *st, want)
	}
	// Available moves with Now.
	st, err = e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantA, Queue: q, Now: at(2 * time.Hour)})
	if err != nil || st.Available != 3 || st.Lag != 2*time.Hour {
		t.Fatalf("stats two hours later: %+v, %v; want 3 available, 2h of lag", st, err)
	}

	// A queue nobody used has zero counts.
	st, err = e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantA, Queue: "unused", Now: at(time.Minute)})
	if err != nil || *st != (store.QueueStats{Queue: "unused"}) {
		t.Fatalf("stats of an unused queue: %+v, %v", st, err)
	}
}

func testListQueues(t *testing.T, h Harness) {
	e := setup(t, h)
	e.mustCreate(tenantA, spec("gamma"), base)
	e.mustCreate(tenantA, spec("alpha"), base)
	e.mustCreate(tenantA, spec("alpha"), base)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "beta", Retry: store.RetryPolicy{MaxAttempts: 2}})
	if _, err := e.s.SetQueuePaused(e.ctx, tenantA, "gamma", true); err != nil {
		t.Fatal(err)
	}
	e.mustCreate(tenantB, spec("delta"), base)

	qs, err := e.s.ListQueues(e.ctx, tenantA)
	if err != nil {
		t.Fatalf("list queues: %v", err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Policy.Queue)
	}
	if !slices.Equal(names, []string{"alpha", "beta", "gamma"}) {
		t.Fatalf("queues %v, want [alpha beta gamma]", names)
	}
	if qs[0].Stats.Queued != 2 || qs[0].Stats.Queue != "alpha" || !samePolicy(qs[0].Policy, store.DefaultQueuePolicy("alpha")) {
		t.Errorf("alpha: %+v", qs[0])
	}
	if qs[1].Stats.Queued != 0 || qs[1].Policy.Retry.MaxAttempts != 2 {
		t.Errorf("beta: %+v", qs[1])
	}
	if !qs[2].Policy.Paused || !qs[2].Stats.Paused || qs[2].Stats.Queued != 1 {
		t.Errorf("gamma: %+v", qs[2])
	}
}
