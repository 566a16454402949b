package storetest

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// breakerTests cover the fleet-wide circuit breakers: what opens them,
// how they gate claims, half-open probes, operator actions, and that held
// jobs spend nothing.
func breakerTests() group {
	return group{name: "Breaker", cases: []testCase{
		{"a breaker opens once its window reaches the failure threshold, counting only its codes", testBreakerOpens},
		{"an open breaker holds its dependency's jobs back without spending their attempts", testBreakerGatesClaims},
		{"half-open admits exactly its probes, a failed probe re-opens for longer and a successful one closes", testBreakerProbes},
		{"two coordinators claiming at once admit exactly the probes between them", testBreakerProbesConcurrent},
		{"a time window forgets outcomes older than the window", testBreakerTimeWindow},
		{"force-open holds jobs until reset, and both are recorded as events", testBreakerForceOpenReset},
		{"time held by an open breaker does not spend a job's retry deadline", testBreakerCreditsDeadline},
		{"a probe that never reports frees its slot after the probe timeout", testBreakerProbeTimeout},
		{"a released probe frees its slot at once", testBreakerProbeReleased},
		{"the reaper credits held time and frees an expired probe's slot", testBreakerReaper},
		{"breaker calls reject bad input and unknown breakers", testBreakerValidation},
	}}
}

const (
	dependency = "payments-api"
	code503    = "HTTP_503"
)

var err503 = store.JobError{Code: code503, Message: "payment provider unavailable", Retryable: true}

// breakerPolicy is a small policy for tests: a window of 4 outcomes, all
// needed, half of them failing opens it for a minute (doubling to ten),
// two probes.
func breakerPolicy() store.BreakerPolicy {
	return store.BreakerPolicy{
		Dependency: dependency, CountedErrorCodes: []string{code503, "TIMEOUT"},
		WindowSize: 4, MinimumVolume: 4, FailureRateThreshold: 0.5,
		OpenDuration: time.Minute, MaxOpenDuration: 10 * time.Minute, BackoffMultiplier: 2,
		HalfOpenProbes: 2, ProbeTimeout: 5 * time.Minute,
	}
}

func (e *env) setBreakerPolicy(tenant string, p store.BreakerPolicy) *store.Breaker {
	e.t.Helper()
	b, err := e.s.UpdateBreakerPolicy(e.ctx, store.UpdateBreakerPolicyParams{Tenant: tenant, Policy: p, Actor: "storetest", Now: base})
	if err != nil {
		e.t.Fatalf("update breaker policy of %q: %v", p.Dependency, err)
	}
	return b
}

func (e *env) breaker(tenant, dep string) *store.Breaker {
	e.t.Helper()
	b, err := e.s.GetBreaker(e.ctx, tenant, dep)
	if err != nil {
		e.t.Fatalf("get breaker %q: %v", dep, err)
	}
	return b
}

func (e *env) breakerEvents(tenant, dep string) []store.BreakerEvent {
	e.t.Helper()
	evs, err := e.s.ListBreakerEvents(e.ctx, store.ListBreakerEventsParams{Tenant: tenant, Dependency: dep})
	if err != nil {
		e.t.Fatalf("list breaker events of %q: %v", dep, err)
	}
	for i, ev := range evs {
		if ev.Sequence != int64(i+1) {
			e.t.Fatalf("breaker events of %q: event %d has sequence %d, want %d", dep, i, ev.Sequence, i+1)
		}
	}
	return evs
}

func breakerEventTypes(evs []store.BreakerEvent) []store.BreakerEventType {
	out := make([]store.BreakerEventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// depJobs creates n jobs of the dependency in queue.
func (e *env) depJobs(tenant, queue string, n int, now time.Time) []*store.Job {
	e.t.Helper()
	var out []*store.Job
	for range n {
		sp := spec(queue)
		sp.Dependency = dependency
		out = append(out, e.mustCreate(tenant, sp, now))
	}
	return out
}

// tripBreaker opens the test breaker of tenant in queue at base+10s: four
// jobs are claimed, two fail with a counted code and two succeed. It
// returns when the breaker is open.
func (e *env) tripBreaker(tenant, queue string) {
	e.t.Helper()
	e.setBreakerPolicy(tenant, breakerPolicy())
	e.depJobs(tenant, queue, 4, base)
	cs := e.claim(tenant, workerA, queue, 4, lease, at(time.Second))
	if len(cs) != 4 {
		e.t.Fatalf("claimed %d jobs of a closed breaker's dependency, want 4", len(cs))
	}
	e.complete(tenant, cs[0].Token, at(2*time.Second))
	e.retry(tenant, cs[1].Token, err503, 0, at(3*time.Second))
	e.complete(tenant, cs[2].Token, at(4*time.Second))
	if b := e.breaker(tenant, dependency); b.State != store.BreakerClosed {
		e.t.Fatalf("after 3 of 4 outcomes the breaker is %s, want closed (below the minimum volume)", b.State)
	}
	e.retry(tenant, cs[3].Token, err503, 0, at(10*time.Second))
	if b := e.breaker(tenant, dependency); b.State != store.BreakerOpen {
		e.t.Fatalf("after 2 failures in 4 outcomes the breaker is %s, want open", b.State)
	}
}

func testBreakerOpens(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setBreakerPolicy(tenantA, breakerPolicy())
	e.depJobs(tenantA, "pay", 5, base)
	cs := e.claim(tenantA, workerA, "pay", 5, lease, at(time.Second))
	if len(cs) != 5 {
		t.Fatalf("claimed %d jobs, want 5", len(cs))
	}
	// An uncounted code is the job's own failure: not in the window.
	e.retry(tenantA, cs[0].Token, store.JobError{Code: "BAD_CARD", Message: "declined", Retryable: true}, 0, at(2*time.Second))
	e.retry(tenantA, cs[1].Token, err503, 0, at(3*time.Second))
	e.complete(tenantA, cs[2].Token, at(4*time.Second))
	e.retry(tenantA, cs[3].Token, store.JobError{Code: "TIMEOUT", Message: "no answer in 10s", Retryable: true}, 0, at(5*time.Second))
	b := e.breaker(tenantA, dependency)
	if f, n := b.Counts(at(5 * time.Second)); b.State != store.BreakerClosed || f != 2 || n != 3 {
		t.Fatalf("after one uncounted, two counted failures and one success: %s with %d/%d, want closed with 2/3", b.State, f, n)
	}
	e.complete(tenantA, cs[4].Token, at(6*time.Second))
	b = e.breaker(tenantA, dependency)
	if b.State != store.BreakerOpen {
		t.Fatalf("2 failures in a full window of 4 (threshold 0.5): breaker is %s, want open", b.State)
	}
	if !b.OpenedAt.Equal(at(6*time.Second)) || !b.NextProbeAt.Equal(at(6*time.Second+time.Minute)) || b.Trips != 1 {
		t.Fatalf("opened at %s, next probe %s, trips %d; want %s, %s, 1", b.OpenedAt, b.NextProbeAt, b.Trips,
			at(6*time.Second), at(6*time.Second+time.Minute))
	}
	wantTypes := []store.BreakerEventType{store.BreakerEventPolicyUpdated, store.BreakerEventOpened}
	if got := breakerEventTypes(e.breakerEvents(tenantA, dependency)); !slices.Equal(got, wantTypes) {
		t.Fatalf("breaker events %v, want %v", got, wantTypes)
	}
	// Tenant B's breaker of the same name is untouched.
	if _, err := e.s.GetBreaker(e.ctx, tenantB, dependency); err == nil {
		t.Fatal("tenant B sees a breaker that only tenant A's reports made")
	}
	list, err := e.s.ListBreakers(e.ctx, tenantA)
	if err != nil || len(list) != 1 || list[0].Dependency != dependency || list[0].State != store.BreakerOpen {
		t.Fatalf("ListBreakers = %+v, %v; want the one open breaker", list, err)
	}
	for _, c := range cs[:2] {
		if g := e.get(tenantA, c.Job.ID); g.State != store.JobStateQueued || g.Attempts != 1 {
			t.Fatalf("job %s failed once is %s with %d attempts, want queued with 1", c.Job.ID, g.State, g.Attempts)
		}
	}
}

func testBreakerGatesClaims(t *testing.T, h Harness) {
	e := setup(t, h)
	e.tripBreaker(tenantA, "pay")
	held := e.depJobs(tenantA, "pay", 3, at(11*time.Second))
	free := e.mustCreate(tenantA, spec("pay"), at(11*time.Second))
	// Tenant B's jobs of a dependency with the same name are not held.
	sp := spec("pay")
	sp.Dependency = dependency
	other := e.mustCreate(tenantB, sp, at(11*time.Second))

	got := e.claim(tenantA, workerB, "pay", 10, lease, at(30*time.Second))
	if len(got) != 1 || got[0].Job.ID != free.ID {
		t.Fatalf("a claim while the breaker is open got %d jobs, want only the job with no dependency", len(got))
	}
	e.mustClaim(tenantB, workerB, "pay", other.ID, at(30*time.Second))
	// Through a second store (another coordinator) too.
	s2 := e.shared()
	got2, err := s2.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerC, Queues: []string{"pay"}, Max: 10, Now: at(40 * time.Second)})
	if err != nil || len(got2) != 0 {
		t.Fatalf("another coordinator claimed %d jobs (%v) while the breaker is open, want none", len(got2), err)
	}
	for _, j := range held {
		g := e.get(tenantA, j.ID)
		if g.State != store.JobStateQueued || g.Attempts != 0 || g.LeaseGeneration != 0 {
			t.Fatalf("held job %s is %s with %d attempts (generation %d), want queued with 0", j.ID, g.State, g.Attempts, g.LeaseGeneration)
		}
		if n := len(e.attempts(tenantA, j.ID)); n != 0 {
			t.Fatalf("held job %s has %d attempts recorded, want 0", j.ID, n)
		}
	}
}

func testBreakerProbes(t *testing.T, h Harness) {
	e := setup(t, h)
	e.tripBreaker(tenantA, "pay")
	e.depJobs(tenantA, "pay", 6, at(11*time.Second))
	opened := at(10 * time.Second)
	e.claimNothing(tenantA, "pay", opened.Add(time.Minute-time.Second), "a second before the open delay ends")

	probes := e.claim(tenantA, workerB, "pay", 10, lease, opened.Add(time.Minute))
	if len(probes) != 2 {
		t.Fatalf("half-open admitted %d jobs, want exactly its 2 probes", len(probes))
	}
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerHalfOpen || len(b.Probes) != 2 {
		t.Fatalf("after admitting probes the breaker is %s with %d probes, want half_open with 2", b.State, len(b.Probes))
	}
	e.claimNothing(tenantA, "pay", opened.Add(time.Minute+time.Second), "both probes are out")

	// A failed probe re-opens, for twice as long.
	failedAt := opened.Add(time.Minute + 2*time.Second)
	e.retry(tenantA, probes[0].Token, err503, 0, failedAt)
	b := e.breaker(tenantA, dependency)
	if b.State != store.BreakerOpen || b.Trips != 2 || !b.NextProbeAt.Equal(failedAt.Add(2*time.Minute)) {
		t.Fatalf("after a failed probe: %s, trips %d, next probe %s; want open, 2, %s", b.State, b.Trips, b.NextProbeAt, failedAt.Add(2*time.Minute))
	}
	// The other probe reporting late changes nothing.
	e.complete(tenantA, probes[1].Token, failedAt.Add(time.Second))
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerOpen {
		t.Fatalf("a stale probe's success moved the re-opened breaker to %s", b.State)
	}
	e.claimNothing(tenantA, "pay", failedAt.Add(2*time.Minute-time.Second), "the longer delay has not run out")

	again := e.claim(tenantA, workerB, "pay", 10, lease, failedAt.Add(2*time.Minute))
	if len(again) != 2 {
		t.Fatalf("the second half-open admitted %d jobs, want 2", len(again))
	}
	closedAt := failedAt.Add(2*time.Minute + time.Second)
	e.complete(tenantA, again[0].Token, closedAt)
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerClosed || b.Trips != 0 || len(b.Probes) != 0 {
		t.Fatalf("after a successful probe: %s, trips %d, %d probes; want closed, 0, 0", b.State, b.Trips, len(b.Probes))
	}
	rest := e.claim(tenantA, workerB, "pay", 10, lease, closedAt)
	// 4 tripping jobs (2 requeued), 6 created, 2+2 probes claimed (one
	// still leased, three done or requeued later than closedAt).
	if len(rest) == 0 {
		t.Fatal("nothing was claimable after the breaker closed")
	}
	want := []store.BreakerEventType{store.BreakerEventPolicyUpdated, store.BreakerEventOpened, store.BreakerEventHalfOpened,
		store.BreakerEventOpened, store.BreakerEventHalfOpened, store.BreakerEventClosed}
	if got := breakerEventTypes(e.breakerEvents(tenantA, dependency)); !slices.Equal(got, want) {
		t.Fatalf("breaker events %v, want %v", got, want)
	}
	// EngineOptions.Breakers heard of each transition after its commit.
	d := dependency + ":"
	wantSeen := []string{d + "closed", d + "open", d + "half_open", d + "open", d + "half_open", d + "closed"}
	if got := e.f.observed(); !slices.Equal(got, wantSeen) {
		t.Fatalf("the breaker observer saw %v, want %v", got, wantSeen)
	}
}

func testBreakerProbesConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	e.tripBreaker(tenantA, "pay")
	e.depJobs(tenantA, "pay", 20, at(11*time.Second))
	s2 := e.shared()
	now := at(10*time.Second + time.Minute)
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		got   [4][]store.ClaimedJob
		errs  [4]error
	)
	for i := range 4 {
		s := e.s
		if i%2 == 1 {
			s = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got[i], errs[i] = s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerB, Queues: []string{"pay"}, Max: 5, Now: now})
		}()
	}
	close(start)
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("claim %d: %v", i, errs[i])
		}
		total += len(got[i])
	}
	if total != 2 {
		t.Fatalf("four concurrent claims on two coordinators admitted %d probes, want exactly 2", total)
	}
}

func testBreakerTimeWindow(t *testing.T, h Harness) {
	e := setup(t, h)
	p := breakerPolicy()
	p.WindowSize, p.WindowDuration, p.MinimumVolume, p.FailureRateThreshold = 0, time.Minute, 2, 0.6
	e.setBreakerPolicy(tenantA, p)
	e.depJobs(tenantA, "pay", 3, base)
	cs := e.claim(tenantA, workerA, "pay", 3, 10*time.Minute, at(time.Second))
	e.retry(tenantA, cs[0].Token, err503, 0, at(2*time.Second))
	e.complete(tenantA, cs[1].Token, at(3*time.Second))
	e.complete(tenantA, cs[1+1].Token, at(4*time.Second))
	if f, n := e.breaker(tenantA, dependency).Counts(at(5 * time.Second)); f != 1 || n != 3 {
		t.Fatalf("window counts %d/%d at once, want 1/3", f, n)
	}
	if f, n := e.breaker(tenantA, dependency).Counts(at(2 * time.Minute)); f != 0 || n != 0 {
		t.Fatalf("window counts %d/%d two minutes later (window 1m), want 0/0", f, n)
	}
	// A failure alone in a fresh window: 1/1 reaches the threshold (0.6) but
	// not the minimum volume of 2; a second one does.
	e.depJobs(tenantA, "pay", 2, at(2*time.Minute))
	cs = e.claim(tenantA, workerA, "pay", 5, lease, at(2*time.Minute))
	var fresh []store.ClaimedJob
	for _, c := range cs {
		if c.Job.Attempts == 1 {
			fresh = append(fresh, c)
		}
	}
	if len(fresh) != 2 {
		t.Fatalf("claimed %d fresh jobs, want 2", len(fresh))
	}
	e.retry(tenantA, fresh[0].Token, err503, 0, at(2*time.Minute+time.Second))
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerClosed {
		t.Fatalf("one failure in a fresh window (minimum volume 2) opened the breaker")
	}
	e.retry(tenantA, fresh[1].Token, err503, 0, at(2*time.Minute+2*time.Second))
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerOpen {
		t.Fatalf("two failures in the window: breaker is %s, want open", b.State)
	}
}

func testBreakerForceOpenReset(t *testing.T, h Harness) {
	e := setup(t, h)
	jobs := e.depJobs(tenantA, "pay", 2, base)
	b, err := e.s.ForceOpenBreaker(e.ctx, store.ForceOpenBreakerParams{
		Tenant: tenantA, Dependency: dependency, Reason: "provider maintenance", Actor: "key:ops", Now: at(time.Second),
	})
	if err != nil || b.State != store.BreakerOpen || !b.Forced || !b.NextProbeAt.IsZero() {
		t.Fatalf("ForceOpenBreaker = %+v, %v; want open, forced, no next probe", b, err)
	}
	e.claimNothing(tenantA, "pay", at(time.Hour), "forced open until reset")
	e.claimNothing(tenantA, "pay", at(24*time.Hour), "forced open until reset, a day later")
	b, err = e.s.ResetBreaker(e.ctx, store.ResetBreakerParams{Tenant: tenantA, Dependency: dependency, Reason: "done", Actor: "key:ops", Now: at(25 * time.Hour)})
	if err != nil || b.State != store.BreakerClosed || b.Forced {
		t.Fatalf("ResetBreaker = %+v, %v; want closed", b, err)
	}
	got := e.claim(tenantA, workerA, "pay", 10, lease, at(25*time.Hour))
	if len(got) != len(jobs) {
		t.Fatalf("after reset %d jobs were claimable, want %d", len(got), len(jobs))
	}
	for _, c := range got {
		if c.Job.Attempts != 1 {
			t.Fatalf("job %s held for a day has attempts %d on its first claim, want 1", c.Job.ID, c.Job.Attempts)
		}
	}
	evs := e.breakerEvents(tenantA, dependency)
	if got := breakerEventTypes(evs); !slices.Equal(got, []store.BreakerEventType{store.BreakerEventForcedOpen, store.BreakerEventReset}) {
		t.Fatalf("breaker events %v, want [forced_open reset]", got)
	}
	if !evs[0].Time.Equal(at(time.Second)) || !evs[1].Time.Equal(at(25*time.Hour)) {
		t.Fatalf("event times %s, %s; want %s, %s", evs[0].Time, evs[1].Time, at(time.Second), at(25*time.Hour))
	}
	for _, ev := range evs {
		if !jsonHas(ev.Data, "actor", "key:ops") {
			t.Fatalf("event %s data %s does not name the actor", ev.Type, ev.Data)
		}
	}

	// A timed force-open goes half-open when its time is up.
	if _, err := e.s.ForceOpenBreaker(e.ctx, store.ForceOpenBreakerParams{
		Tenant: tenantA, Dependency: dependency, Duration: time.Hour, Now: at(26 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	e.depJobs(tenantA, "pay", 3, at(26*time.Hour))
	e.claimNothing(tenantA, "pay", at(27*time.Hour-time.Second), "within the hour of a timed force-open")
	// The default policy (no stored one) admits one probe.
	if got := e.claim(tenantA, workerA, "pay", 10, lease, at(27*time.Hour)); len(got) != 1 {
		t.Fatalf("after a timed force-open %d jobs were admitted, want the default policy's 1 probe", len(got))
	}
}

func testBreakerCreditsDeadline(t *testing.T, h Harness) {
	e := setup(t, h)
	pol := store.DefaultQueuePolicy("pay")
	pol.Retry.TotalRetryDeadline = 10 * time.Minute
	pol.Retry.JitterFraction = 0
	e.setPolicy(tenantA, pol)
	p := breakerPolicy()
	p.WindowSize, p.MinimumVolume, p.HalfOpenProbes = 1, 1, 1
	p.OpenDuration, p.MaxOpenDuration = time.Hour, 2*time.Hour
	e.setBreakerPolicy(tenantA, p)
	j := e.depJobs(tenantA, "pay", 1, base)[0]
	c := e.mustClaim(tenantA, workerA, "pay", j.ID, at(time.Second))
	e.retry(tenantA, c.Token, err503, 0, at(2*time.Second))
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerOpen {
		t.Fatalf("breaker is %s after a failure with minimum volume 1, want open", b.State)
	}
	// An hour later the job is the probe. Without the credit for the hour
	// it was held, its 10-minute deadline would be long spent and this
	// failure would make it DEAD.
	c = e.mustClaim(tenantA, workerA, "pay", j.ID, at(time.Hour+2*time.Second))
	got := e.retry(tenantA, c.Token, err503, 0, at(time.Hour+3*time.Second))
	if got.State != store.JobStateQueued {
		t.Fatalf("a job held an hour by the breaker, 3s into its own 10-minute budget, is %s after failing, want queued", got.State)
	}
	if got.Attempts != 2 {
		t.Fatalf("attempts %d, want 2 (one before the breaker opened, one probe)", got.Attempts)
	}
}

func testBreakerProbeTimeout(t *testing.T, h Harness) {
	e := setup(t, h)
	e.tripBreaker(tenantA, "pay")
	e.depJobs(tenantA, "pay", 5, at(11*time.Second))
	due := at(10*time.Second + time.Minute)
	if got := e.claim(tenantA, workerB, "pay", 10, 10*time.Minute, due); len(got) != 2 {
		t.Fatalf("half-open admitted %d, want 2", len(got))
	}
	e.claimNothing(tenantA, "pay", due.Add(5*time.Minute-time.Second), "probes are out, within the probe timeout")
	if got := e.claim(tenantA, workerB, "pay", 10, lease, due.Add(5*time.Minute)); len(got) != 2 {
		t.Fatalf("after the probe timeout %d new probes were admitted, want 2", len(got))
	}
}

func testBreakerValidation(t *testing.T, h Harness) {
	e := setup(t, h)
	bad := []store.BreakerPolicy{
		{Dependency: ""},
		{Dependency: dependency, WindowSize: 5, WindowDuration: time.Minute},
		{Dependency: dependency, WindowSize: store.BreakerWindowSizeMax + 1},
		{Dependency: dependency, WindowSize: 5, MinimumVolume: 6},
		{Dependency: dependency, FailureRateThreshold: 1.5},
		{Dependency: dependency, OpenDuration: time.Millisecond},
		{Dependency: dependency, OpenDuration: time.Hour, MaxOpenDuration: time.Minute},
		{Dependency: dependency, HalfOpenProbes: store.BreakerProbesMax + 1},
		{Dependency: dependency, CountedErrorCodes: []string{""}},
	}
	for i, p := range bad {
		_, err := e.s.UpdateBreakerPolicy(e.ctx, store.UpdateBreakerPolicyParams{Tenant: tenantA, Policy: p})
		wantErr(t, err, store.ErrInvalid, "bad breaker policy "+string(rune('0'+i)))
	}
	_, err := e.s.ResetBreaker(e.ctx, store.ResetBreakerParams{Tenant: tenantA, Dependency: "never-seen"})
	wantErr(t, err, store.ErrNotFound, "reset of a breaker that does not exist")
	_, err = e.s.GetBreaker(e.ctx, tenantA, "never-seen")
	wantErr(t, err, store.ErrNotFound, "get of a breaker that does not exist")
	_, err = e.s.ListBreakerEvents(e.ctx, store.ListBreakerEventsParams{Tenant: tenantA, Dependency: "never-seen"})
	wantErr(t, err, store.ErrNotFound, "events of a breaker that does not exist")
	_, err = e.s.ForceOpenBreaker(e.ctx, store.ForceOpenBreakerParams{Tenant: tenantA, Dependency: dependency, Duration: -time.Second})
	wantErr(t, err, store.ErrInvalid, "force-open for a negative duration")
	_, err = e.s.ForceOpenBreaker(e.ctx, store.ForceOpenBreakerParams{Tenant: tenantA, Dependency: "bad name!"})
	wantErr(t, err, store.ErrInvalid, "force-open of a badly named dependency")
	if list, err := e.s.ListBreakers(e.ctx, tenantA); err != nil || len(list) != 0 {
		t.Fatalf("rejected calls left breakers behind: %+v, %v", list, err)
	}
}

// jsonHas reports whether the JSON object data has key with the string
// value want.
func jsonHas(data, key, want string) bool {
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return false
	}
	got, ok := m[key].(string)
	return ok && got == want
}

func testBreakerProbeReleased(t *testing.T, h Harness) {
	e := setup(t, h)
	e.tripBreaker(tenantA, "pay")
	e.depJobs(tenantA, "pay", 5, at(11*time.Second))
	due := at(10*time.Second + time.Minute)
	probes := e.claim(tenantA, workerB, "pay", 10, lease, due)
	if len(probes) != 2 {
		t.Fatalf("half-open admitted %d, want 2", len(probes))
	}
	if _, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: probes[0].Token, Now: due.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerHalfOpen || len(b.Probes) != 1 {
		t.Fatalf("after a probe was released: %s with %d probes out, want half_open with 1", b.State, len(b.Probes))
	}
	if got := e.claim(tenantA, workerB, "pay", 10, lease, due.Add(2*time.Second)); len(got) != 1 {
		t.Fatalf("after a probe was released %d jobs were admitted, want exactly 1", len(got))
	}
}

func testBreakerReaper(t *testing.T, h Harness) {
	e := setup(t, h)
	pol := store.DefaultQueuePolicy("pay")
	pol.Retry.TotalRetryDeadline = 10 * time.Minute
	pol.Retry.JitterFraction = 0
	e.setPolicy(tenantA, pol)
	p := breakerPolicy()
	p.WindowSize, p.MinimumVolume, p.HalfOpenProbes = 1, 1, 1
	p.OpenDuration, p.MaxOpenDuration = time.Hour, 2*time.Hour
	e.setBreakerPolicy(tenantA, p)
	j := e.depJobs(tenantA, "pay", 1, base)[0]
	c := e.mustClaim(tenantA, workerA, "pay", j.ID, at(time.Second))
	e.retry(tenantA, c.Token, err503, 0, at(2*time.Second))
	// The probe's worker dies: its lease expires an hour past the job's
	// own 10-minute budget, most of it spent held by the breaker.
	e.mustClaim(tenantA, workerA, "pay", j.ID, at(time.Hour+2*time.Second))
	res, err := e.s.ReapExpired(e.ctx, store.ReapParams{Now: at(time.Hour + 2*time.Second + lease + time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Jobs) != 1 || res.Jobs[0].State != store.JobStateQueued {
		t.Fatalf("reaped %+v, want the probe queued again (its held hour credited), not dead", res.Jobs)
	}
	if b := e.breaker(tenantA, dependency); b.State != store.BreakerHalfOpen || len(b.Probes) != 0 {
		t.Fatalf("after the probe's lease expired: %s with %d probes out, want half_open with none", b.State, len(b.Probes))
	}
}
