package store

import (
	"testing"
	"time"
)

func TestBreakerOpenDelayBacksOffToItsCap(t *testing.T) {
	t.Parallel()
	p := BreakerPolicy{Dependency: "d", OpenDuration: time.Second, MaxOpenDuration: 10 * time.Second, BackoffMultiplier: 3}.WithDefaults()
	for trips, want := range map[int32]time.Duration{1: time.Second, 2: 3 * time.Second, 3: 9 * time.Second, 4: 10 * time.Second, 1000: 10 * time.Second} {
		if got := p.openFor(trips); got != want {
			t.Errorf("trip %d opens for %s, want %s", trips, got, want)
		}
	}
}

func TestBreakerHeldDuringOverlapsHolds(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	b := Breaker{Holds: []BreakerHold{{From: at(10), To: at(20)}, {From: at(30), To: at(40)}, {From: at(50)}}}
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 5, 0},
		{0, 15, 5 * time.Second},
		{15, 35, 10 * time.Second},
		{0, 60, 30 * time.Second}, // the open hold counts up to "to"
		{45, 55, 5 * time.Second},
	} {
		if got := b.HeldDuring(at(c.from), at(c.to)); got != c.want {
			t.Errorf("HeldDuring(%d, %d) = %s, want %s", c.from, c.to, got, c.want)
		}
	}
}

func TestBreakerDecisions(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := BreakerPolicy{Dependency: "d", WindowSize: 2, MinimumVolume: 2, FailureRateThreshold: 1, HalfOpenProbes: 1}.WithDefaults()
	b := NewBreaker(BreakerKey{"t", "d"})
	b.Policy = p
	tok := func(id string) LeaseToken { return LeaseToken{JobID: id, Generation: 1} }

	b, ev := DecideBreakerOutcome(b, tok("a"), true, t0)
	if b.State != BreakerClosed || len(ev) != 0 {
		t.Fatalf("one failure below the minimum volume: %s, %v", b.State, ev)
	}
	b, _ = DecideBreakerOutcome(b, tok("b"), false, t0)
	b, ev = DecideBreakerOutcome(b, tok("c"), true, t0)
	if b.State != BreakerClosed || len(ev) != 0 {
		t.Fatalf("success then failure in a window of 2 is a rate of 0.5, under 1: %s", b.State)
	}
	b, ev = DecideBreakerOutcome(b, tok("d"), true, t0.Add(time.Second))
	if b.State != BreakerOpen || len(ev) != 1 || ev[0].Type != BreakerEventOpened || len(b.Holds) != 1 {
		t.Fatalf("two failures: %s %v holds %v", b.State, ev, b.Holds)
	}
	if n, _, _ := DecideProbes(b, b.NextProbeAt.Add(-time.Microsecond)); n != 0 {
		t.Fatalf("probes admitted before the delay ran out: %d", n)
	}
	n, half, ev := DecideProbes(b, b.NextProbeAt)
	if n != 1 || half.State != BreakerHalfOpen || len(ev) != 1 || ev[0].Type != BreakerEventHalfOpened {
		t.Fatalf("due: admit %d, %s, %v", n, half.State, ev)
	}
	half = AdmitProbes(half, []LeaseToken{tok("p")}, b.NextProbeAt)
	if n, _, _ := DecideProbes(half, b.NextProbeAt); n != 0 {
		t.Fatalf("a second probe admitted while the first is out: %d", n)
	}
	// A straggler's outcome while half-open changes nothing.
	if same, ev := DecideBreakerOutcome(half, tok("late"), false, b.NextProbeAt); same.State != BreakerHalfOpen || len(ev) != 0 {
		t.Fatalf("a straggler moved half-open to %s", same.State)
	}
	closed, ev := DecideBreakerOutcome(half, tok("p"), false, b.NextProbeAt.Add(time.Second))
	if closed.State != BreakerClosed || closed.Trips != 0 || len(ev) != 1 || ev[0].Type != BreakerEventClosed || closed.Holds[0].To.IsZero() {
		t.Fatalf("probe success: %+v %v", closed, ev)
	}

	forced, _ := DecideForceOpen(closed, 0, "ops", "maintenance", t0)
	if n, _, _ := DecideProbes(forced, t0.Add(365*24*time.Hour)); n != 0 || forced.Trips != 0 {
		t.Fatalf("forced open until reset admitted %d probes a year later (trips %d)", n, forced.Trips)
	}
	reset, ev := DecideReset(forced, "ops", "back", t0.Add(time.Hour))
	if reset.State != BreakerClosed || reset.Forced || ev[0].Type != BreakerEventReset {
		t.Fatalf("reset: %+v %v", reset, ev)
	}
}

func TestBreakerRoundTripsThroughItsStoredForm(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	b := NewBreaker(BreakerKey{"t", "d"})
	b, _ = DecideBreakerPolicy(b, BreakerPolicy{Dependency: "d", CountedErrorCodes: []string{"X"}, WindowDuration: time.Minute}.WithDefaults(), "", t0)
	b, _ = DecideForceOpen(b, time.Hour, "", "", t0)
	b = AdmitProbes(b, []LeaseToken{{JobID: "j", Generation: 3}}, t0)
	detail, policy := EncodeBreaker(b)
	got, err := DecodeBreaker("t", "d", b.State, detail, policy, b.EventSeq, b.UpdatedAt)
	if err != nil {
		t.Fatal(err)
	}
	d2, p2 := EncodeBreaker(got)
	if d2 != detail || p2 != policy || !got.PolicyStored || got.Policy.WindowDuration != time.Minute {
		t.Fatalf("round trip changed the breaker:\n%s\n%s\nvs\n%s\n%s", detail, policy, d2, p2)
	}
}

func TestDecideQueueRoom(t *testing.T) {
	t.Parallel()
	p := DefaultQueuePolicy("q")
	p.ConcurrencyLimit, p.KeyConcurrencyLimit = 10, 2
	r := DecideQueueRoom(p, 50, QueueUsage{Active: 7, ActiveByKey: map[string]int64{"a": 2, "b": 1}})
	if r.Cap != 3 || r.KeyRoom != 2 || r.Keys["a"] != 0 || r.Keys["b"] != 1 || r.Fetch < r.Cap {
		t.Fatalf("room %+v", r)
	}
	p = DefaultQueuePolicy("q")
	p.RateLimit = RateLimit{Starts: 5, Interval: time.Second}
	if r := DecideQueueRoom(p, 50, QueueUsage{StartedByKey: map[string]int64{"": 4}}); r.Cap != 1 || r.KeyRoom != -1 {
		t.Fatalf("rate room %+v", r)
	}
	if got := RateWindowStart(p, time.UnixMicro(2_500_000)); !got.Equal(time.UnixMicro(2_000_000)) {
		t.Fatalf("window of 2.5s is %s", got)
	}
}

func TestBreakerPolicyDefaultsFitASmallWindow(t *testing.T) {
	t.Parallel()
	p := BreakerPolicy{Dependency: "d", WindowSize: 4}.WithDefaults()
	if p.MinimumVolume != 4 || p.Validate() != nil {
		t.Fatalf("window of 4 with no volume: volume %d, %v", p.MinimumVolume, p.Validate())
	}
	if p := DefaultBreakerPolicy("d"); p.MinimumVolume != BreakerMinimumVolumeDefault || p.WindowSize != BreakerWindowSizeDefault {
		t.Fatalf("default policy %+v", p)
	}
}
