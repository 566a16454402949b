package storetest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func scheduleTests() group {
	return group{name: "schedules", cases: []testCase{
		{"a schedule is created, read, listed, updated, paused, resumed and deleted", testScheduleLifecycle},
		{"a due schedule fires each tick once, with metadata naming it and its tick", testScheduleFiresEachTickOnce},
		{"three stores racing on one schedule create exactly one job per tick", testScheduleRace},
		{"a schedule skips its tick while the previous run is live", testScheduleOverlapSkip},
		{"a schedule whose owner is revoked pauses itself", testScheduleOwnerRevoked},
		{"a trigger fires now, once per request id", testScheduleTrigger},
		{"runs are kept up to a bound", testScheduleRunsBounded},
		{"the per-tenant cap and unique names hold", testScheduleLimits},
		{"a tick whose key a producer took is skipped and holds nothing up", testScheduleTickKeyConflict},
	}}
}

// everySecond is a schedule spec firing every second on queue.
func everySecond(queue string) store.ScheduleSpec {
	return store.ScheduleSpec{Queue: queue, Kind: "tick", Payload: []byte("p"), Interval: time.Second,
		Metadata: map[string]string{"origin": "storetest"}}
}

func (e *env) createSchedule(s store.Store, name string, sp store.ScheduleSpec, now time.Time) *store.Schedule {
	e.t.Helper()
	sc, err := s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: tenantA, Name: name, Spec: sp, Now: now})
	if err != nil {
		e.t.Fatalf("create schedule: %v", err)
	}
	return sc
}

func (e *env) fire(s store.Store, now time.Time) store.FireSchedulesResult {
	e.t.Helper()
	res, err := s.FireDueSchedules(e.ctx, store.FireSchedulesParams{Now: now})
	if err != nil {
		e.t.Fatalf("fire at %s: %v", now, err)
	}
	return res
}

// ticksOf maps each tick of queue's jobs to how many jobs it has.
func (e *env) ticksOf(queue string) map[string]int {
	e.t.Helper()
	out := map[string]int{}
	cursor := ""
	for {
		page, err := e.s.ListJobs(e.ctx, store.ListJobsParams{Tenant: tenantA, Queue: queue, Limit: 500, Cursor: cursor})
		if err != nil {
			e.t.Fatal(err)
		}
		for _, j := range page.Jobs {
			out[j.Metadata[store.ScheduleTickMetadataKey]]++
		}
		if page.NextCursor == "" {
			return out
		}
		cursor = page.NextCursor
	}
}

func testScheduleLifecycle(t *testing.T, h Harness) {
	e := setup(t, h)
	now := at(0)
	sc := e.createSchedule(e.s, "nightly", store.ScheduleSpec{Queue: "reports", Kind: "build", Cron: "0 2 * * *", TimeZone: "Europe/Paris"}, now)
	if want := time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC); !sc.NextTickAt.Equal(want) || sc.Spec.CatchUp != store.CatchUpOne {
		t.Fatalf("next tick %s (want %s), catch-up %q", sc.NextTickAt, want, sc.Spec.CatchUp)
	}
	for _, ref := range []string{sc.ID, "nightly"} {
		got, err := e.s.GetSchedule(e.ctx, tenantA, ref)
		if err != nil || got.ID != sc.ID || got.Spec.TimeZone != "Europe/Paris" {
			t.Fatalf("get %s: %+v, %v", ref, got, err)
		}
	}
	if _, err := e.s.GetSchedule(e.ctx, "tenant-b", sc.ID); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("another tenant reads it: %v", err)
	}
	e.createSchedule(e.s, "hourly", store.ScheduleSpec{Queue: "other", Kind: "k", Interval: time.Hour}, now)
	page, err := e.s.ListSchedules(e.ctx, store.ListSchedulesParams{Tenant: tenantA, Limit: 1})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].Name != "hourly" || page.NextAfter != "hourly" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	page, err = e.s.ListSchedules(e.ctx, store.ListSchedulesParams{Tenant: tenantA, Limit: 1, After: page.NextAfter})
	if err != nil || len(page.Schedules) != 1 || page.Schedules[0].Name != "nightly" || page.NextAfter != "" {
		t.Fatalf("second page: %+v, %v", page, err)
	}
	// An update at 03:00 UTC recomputes from then: tomorrow 02:00 Paris.
	up, err := e.s.UpdateSchedule(e.ctx, store.UpdateScheduleParams{Tenant: tenantA, IDOrName: "nightly",
		Spec: store.ScheduleSpec{Queue: "reports", Kind: "build", Cron: "0 2 * * *", TimeZone: "Europe/Paris"}, Now: at(3 * time.Hour)})
	if err != nil || !up.NextTickAt.Equal(time.Date(2030, 1, 2, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("update: %+v, %v", up, err)
	}
	p, err := e.s.SetSchedulePaused(e.ctx, store.SetSchedulePausedParams{Tenant: tenantA, IDOrName: sc.ID, Paused: true, Reason: "maintenance", Now: at(4 * time.Hour)})
	if err != nil || !p.Paused || p.PausedReason != "maintenance" || !p.NextTickAt.IsZero() {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	if res := e.fire(e.s, at(48*time.Hour)); len(res.Schedules) != 1 || res.Schedules[0].ScheduleID == sc.ID {
		t.Fatalf("a paused schedule was handled: %+v", res)
	}
	r, err := e.s.SetSchedulePaused(e.ctx, store.SetSchedulePausedParams{Tenant: tenantA, IDOrName: sc.ID, Paused: false, Now: at(50 * time.Hour)})
	if err != nil || r.Paused || !r.NextTickAt.Equal(time.Date(2030, 1, 4, 1, 0, 0, 0, time.UTC)) {
		t.Fatalf("resume (ticks while paused are not caught up): %+v, %v", r, err)
	}
	if err := e.s.DeleteSchedule(e.ctx, tenantA, "nightly"); err != nil {
		t.Fatal(err)
	}
	if err := e.s.DeleteSchedule(e.ctx, tenantA, "nightly"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
}

func testScheduleFiresEachTickOnce(t *testing.T, h Harness) {
	e := setup(t, h)
	sc := e.createSchedule(e.s, "s", everySecond("fire"), at(0))
	if res := e.fire(e.s, at(500*time.Millisecond)); len(res.Schedules) != 0 || !res.NextTick.Equal(at(time.Second)) {
		t.Fatalf("fired before its first tick, or not told when it comes: %+v", res)
	}
	res := e.fire(e.s, at(1500*time.Millisecond))
	if len(res.Schedules) != 1 || len(res.Schedules[0].Fired) != 1 || !res.Schedules[0].Fired[0].Tick.Equal(at(time.Second)) {
		t.Fatalf("first pass: %+v", res)
	}
	res = e.fire(e.s, at(3500*time.Millisecond))
	if len(res.Schedules) != 1 || len(res.Schedules[0].Fired) != 2 {
		t.Fatalf("second pass (two ticks due): %+v", res)
	}
	// The same instant again: nothing is due, and the next tick is known.
	if res := e.fire(e.s, at(3500*time.Millisecond)); len(res.Schedules) != 0 || !res.NextTick.Equal(at(4*time.Second)) {
		t.Fatalf("fired again: %+v", res)
	}
	job, err := e.s.GetJob(e.ctx, tenantA, res.Schedules[0].Fired[1].JobID)
	if err != nil {
		t.Fatal(err)
	}
	if job.Metadata[store.ScheduleMetadataKey] != sc.ID || job.Metadata[store.ScheduleTickMetadataKey] != at(3*time.Second).Format(time.RFC3339Nano) ||
		job.Metadata["origin"] != "storetest" || job.Kind != "tick" || string(job.Payload) != "p" {
		t.Errorf("job %+v", job)
	}
	ticks := e.ticksOf("fire")
	if len(ticks) != 3 {
		t.Errorf("ticks %v, want 3 with one job each", ticks)
	}
	got, _ := e.s.GetSchedule(e.ctx, tenantA, sc.ID)
	if !got.NextTickAt.Equal(at(4*time.Second)) || !got.LastTickAt.Equal(at(3*time.Second)) || got.LastJobID != job.ID {
		t.Errorf("schedule after firing: %+v", got)
	}
	runs, err := e.s.ListScheduleRuns(e.ctx, store.ListScheduleRunsParams{Tenant: tenantA, IDOrName: sc.ID, Limit: 10})
	if err != nil || len(runs) != 3 || runs[0].Outcome != store.RunFired || runs[0].JobID != job.ID || !runs[2].TickAt.Equal(at(time.Second)) {
		t.Errorf("runs %+v, %v", runs, err)
	}
}

func testScheduleRace(t *testing.T, h Harness) {
	e := setup(t, h)
	stores := []store.Store{e.s, e.shared(), e.shared()}
	e.createSchedule(e.s, "raced", everySecond("race"), at(0))
	const ticks = 30
	var wg sync.WaitGroup
	errs := make(chan error, len(stores)*ticks*4)
	for step := 1; step <= ticks; step++ {
		start := make(barrier)
		for _, s := range stores {
			for range 2 { // two callers per store: several connections each
				wg.Add(1)
				go func() {
					defer wg.Done()
					start.wait()
					if _, err := s.FireDueSchedules(e.ctx, store.FireSchedulesParams{Now: at(time.Duration(step)*time.Second + 100*time.Millisecond)}); err != nil {
						errs <- err
					}
				}()
			}
		}
		start.open()
		wg.Wait()
	}
	close(errs)
	for err := range errs {
		t.Errorf("fire: %v", err)
	}
	got := e.ticksOf("race")
	if len(got) != ticks {
		t.Errorf("%d ticks have jobs, want %d", len(got), ticks)
	}
	for i := 1; i <= ticks; i++ {
		if n := got[at(time.Duration(i)*time.Second).Format(time.RFC3339Nano)]; n != 1 {
			t.Errorf("tick %d has %d jobs, want exactly 1", i, n)
		}
	}
	// Each tick was handled once, not fired twice and replayed by its
	// idempotency key: one run per tick.
	runs, err := e.s.ListScheduleRuns(e.ctx, store.ListScheduleRunsParams{Tenant: tenantA, IDOrName: "raced", Limit: store.ScheduleRunsKept})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]int{}
	for _, r := range runs {
		seen[r.TickAt]++
	}
	if len(runs) != ticks || len(seen) != ticks {
		t.Errorf("%d runs for %d distinct ticks, want one run for each of %d ticks", len(runs), len(seen), ticks)
	}
}

func testScheduleOverlapSkip(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := everySecond("overlap")
	sp.Overlap = store.OverlapSkip
	sc := e.createSchedule(e.s, "o", sp, at(0))
	first := e.fire(e.s, at(time.Second)).Schedules[0].Fired[0].JobID
	res := e.fire(e.s, at(2*time.Second))
	if len(res.Schedules[0].Fired) != 0 || res.Schedules[0].Skipped != 1 {
		t.Fatalf("tick 2 with run 1 live: %+v", res.Schedules[0])
	}
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: first, Now: at(2500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	res = e.fire(e.s, at(3*time.Second))
	if len(res.Schedules[0].Fired) != 1 {
		t.Fatalf("tick 3 after run 1 ended: %+v", res.Schedules[0])
	}
	runs, _ := e.s.ListScheduleRuns(e.ctx, store.ListScheduleRunsParams{Tenant: tenantA, IDOrName: sc.ID, Limit: 10})
	if len(runs) != 3 || runs[1].Outcome != store.RunSkipped || runs[1].Reason != "previous run live" {
		t.Errorf("runs %+v", runs)
	}
}

func testScheduleOwnerRevoked(t *testing.T, h Harness) {
	e := setup(t, h)
	hash := sha256.Sum256([]byte("schedule-owner"))
	p, err := e.s.CreatePrincipal(e.ctx, store.CreatePrincipalParams{Tenant: tenantA, Name: "owner", Role: store.RoleProducer,
		KeyHash: hash[:], Actor: "test", Now: at(0)})
	if err != nil {
		t.Fatal(err)
	}
	sc, err := e.s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: tenantA, Name: "owned", Spec: everySecond("owned"),
		OwnerID: p.ID, OwnerIdentity: p.Identity(), Now: at(0)})
	if err != nil {
		t.Fatal(err)
	}
	if res := e.fire(e.s, at(time.Second)); len(res.Schedules[0].Fired) != 1 {
		t.Fatalf("a valid owner's schedule did not fire: %+v", res)
	}
	if _, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: p.ID, Actor: "test", Now: at(1500 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	res := e.fire(e.s, at(2*time.Second))
	if len(res.Schedules) != 1 || len(res.Schedules[0].Fired) != 0 || res.Schedules[0].Paused != store.PauseOwnerRevoked {
		t.Fatalf("after revocation: %+v", res)
	}
	got, _ := e.s.GetSchedule(e.ctx, tenantA, sc.ID)
	if !got.Paused || got.PausedReason != store.PauseOwnerRevoked || !got.NextTickAt.IsZero() {
		t.Errorf("schedule %+v", got)
	}
}

func testScheduleTrigger(t *testing.T, h Harness) {
	e := setup(t, h)
	sc := e.createSchedule(e.s, "t", store.ScheduleSpec{Queue: "trig", Kind: "k", Cron: "0 0 1 1 *"}, at(0))
	r1, err := e.s.TriggerSchedule(e.ctx, store.TriggerScheduleParams{Tenant: tenantA, IDOrName: "t", RequestID: "r1", Now: at(time.Minute)})
	if err != nil || r1.Outcome != store.RunTriggered || r1.JobID == "" {
		t.Fatalf("trigger: %+v, %v", r1, err)
	}
	again, err := e.s.TriggerSchedule(e.ctx, store.TriggerScheduleParams{Tenant: tenantA, IDOrName: "t", RequestID: "r1", Now: at(2 * time.Minute)})
	if err != nil || again.JobID != r1.JobID {
		t.Fatalf("the same request id again: %+v, %v", again, err)
	}
	r2, err := e.s.TriggerSchedule(e.ctx, store.TriggerScheduleParams{Tenant: tenantA, IDOrName: sc.ID, Now: at(3 * time.Minute)})
	if err != nil || r2.JobID == r1.JobID {
		t.Fatalf("another trigger: %+v, %v", r2, err)
	}
	got, _ := e.s.GetSchedule(e.ctx, tenantA, sc.ID)
	if !got.NextTickAt.Equal(sc.NextTickAt) || got.LastJobID != r2.JobID {
		t.Errorf("a trigger moved the next tick or did not record its job: %+v", got)
	}
	runs, _ := e.s.ListScheduleRuns(e.ctx, store.ListScheduleRunsParams{Tenant: tenantA, IDOrName: sc.ID, Limit: 10})
	if len(runs) != 2 {
		t.Errorf("runs %+v, want the two triggers", runs)
	}
}

func testScheduleRunsBounded(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := everySecond("bounded")
	sp.MisfireGrace = time.Hour
	sc := e.createSchedule(e.s, "b", sp, at(0))
	res := e.fire(e.s, at(150*time.Second))
	if len(res.Schedules[0].Fired) != 150 {
		t.Fatalf("fired %d ticks, want 150", len(res.Schedules[0].Fired))
	}
	runs, err := e.s.ListScheduleRuns(e.ctx, store.ListScheduleRunsParams{Tenant: tenantA, IDOrName: sc.ID, Limit: 1000})
	if err != nil || len(runs) != store.ScheduleRunsKept || !runs[0].TickAt.Equal(at(150*time.Second)) {
		t.Errorf("%d runs (newest %v), %v; want %d", len(runs), runs[0].TickAt, err, store.ScheduleRunsKept)
	}
}

func testScheduleLimits(t *testing.T, h Harness) {
	e := setup(t, h)
	for i := range 3 {
		if _, err := e.s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: tenantA, Name: fmt.Sprintf("s%d", i), Spec: everySecond("l"), Limit: 3, Now: at(0)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: tenantA, Name: "s3", Spec: everySecond("l"), Limit: 3, Now: at(0)}); !errors.Is(err, store.ErrScheduleLimit) {
		t.Errorf("a fourth schedule under a cap of 3: %v", err)
	}
	if _, err := e.s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: "tenant-b", Name: "s0", Spec: everySecond("l"), Limit: 3, Now: at(0)}); err != nil {
		t.Errorf("another tenant's cap and names are its own: %v", err)
	}
	if _, err := e.s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: tenantA, Name: "s0", Spec: everySecond("l"), Now: at(0)}); !errors.Is(err, store.ErrAlreadyExists) {
		t.Errorf("a taken name: %v", err)
	}
	var ie *store.InvalidError
	if _, err := e.s.CreateSchedule(e.ctx, store.CreateScheduleParams{Tenant: tenantA, Name: "bad", Spec: store.ScheduleSpec{Queue: "q", Kind: "k", Cron: "61 * * * *"}, Now: at(0)}); !errors.As(err, &ie) || ie.Field != "spec.cron" {
		t.Errorf("a bad cron: %v", err)
	}
}

func testScheduleTickKeyConflict(t *testing.T, h Harness) {
	e := setup(t, h)
	sc := e.createSchedule(e.s, "k", everySecond("conflict"), at(0))
	other := e.createSchedule(e.s, "other", everySecond("conflict-other"), at(0))
	// A producer's job took the first tick's key with a different request.
	e.createIn(e.s, tenantA, spec("conflict"), store.ScheduleTickRequestID(sc.ID, at(time.Second)), at(500*time.Millisecond))
	res := e.fire(e.s, at(1500*time.Millisecond))
	if len(res.Schedules) != 2 {
		t.Fatalf("pass handled %d schedules, want both: %+v", len(res.Schedules), res)
	}
	for _, f := range res.Schedules {
		switch f.ScheduleID {
		case sc.ID:
			if len(f.Fired) != 0 || f.Skipped != 1 {
				t.Errorf("the conflicting tick: %+v", f)
			}
		case other.ID:
			if len(f.Fired) != 1 {
				t.Errorf("the other schedule of the pass did not fire: %+v", f)
			}
		}
	}
	if res := e.fire(e.s, at(2500*time.Millisecond)); len(res.Schedules) != 2 || len(res.Schedules[0].Fired) != 1 || len(res.Schedules[1].Fired) != 1 {
		t.Fatalf("the next tick: %+v", res)
	}
	runs, _ := e.s.ListScheduleRuns(e.ctx, store.ListScheduleRunsParams{Tenant: tenantA, IDOrName: sc.ID, Limit: 10})
	if len(runs) != 2 || runs[1].Outcome != store.RunSkipped || runs[1].Reason != store.TickKeyConflictReason || runs[0].Outcome != store.RunFired {
		t.Errorf("runs %+v", runs)
	}
}
