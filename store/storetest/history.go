package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// The history of a job is kept in its row (store.DeriveEvents): these
// cases hold the derived history to the one the API always showed.
func historyTests() group {
	return group{name: "history", cases: []testCase{
		{"a job failed, expired, released and succeeded has every event in order with gapless sequences", testHistoryOfSeveralAttempts},
		{"events page across derived and stored events", testHistoryPaging},
		{"a successful job writes no event and no attempt row", testHistoryRows},
		{"attempts past the row's cap move out and the history stays complete", testHistorySpill},
	}}
}

// severalAttempts drives one job through a failed attempt (with a
// checkpoint saved before it), an expired one, a released one and a
// successful one, and returns it.
func severalAttempts(e *env) *store.Job {
	e.t.Helper()
	j := e.mustCreate(tenantA, spec("history"), at(0))
	c1 := e.mustClaim(tenantA, "w1", "history", j.ID, at(time.Second))
	if _, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c1.Token, Phase: "p", Now: at(2 * time.Second)}); err != nil {
		e.t.Fatalf("save a checkpoint: %v", err)
	}
	e.retry(tenantA, c1.Token, store.JobError{Code: "busy", Message: "try later", Retryable: true}, 0, at(3*time.Second))
	c2 := e.mustClaim(tenantA, "w2", "history", j.ID, at(time.Hour))
	if res := e.reap(at(time.Hour + lease + time.Second)); len(res.Jobs) != 1 || res.Jobs[0].State != store.JobStateQueued {
		e.t.Fatalf("reap: %+v", res.Jobs)
	}
	c3 := e.mustClaim(tenantA, "w3", "history", j.ID, at(2*time.Hour))
	if _, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: c3.Token, Now: at(2*time.Hour + time.Second)}); err != nil {
		e.t.Fatalf("release: %v", err)
	}
	c4 := e.mustClaim(tenantA, "w4", "history", j.ID, at(3*time.Hour))
	e.complete(tenantA, c4.Token, at(3*time.Hour+time.Second))
	_ = c2
	return j
}

func testHistoryOfSeveralAttempts(t *testing.T, h Harness) {
	e := setup(t, h)
	j := severalAttempts(e)
	evs := e.events(tenantA, j.ID)
	wantEvents(t, evs, store.EventQueued, store.EventLeased, store.EventCheckpointSaved, store.EventRunFailed,
		store.EventLeased, store.EventLeaseExpired, store.EventLeased, store.EventReleased,
		store.EventLeased, store.EventSucceeded)
	wantData(t, evs[0], map[string]any{"queue": "history"})
	wantData(t, evs[1], map[string]any{"worker_id": "w1", "lease_generation": 1.0, "attempt": 1.0})
	wantData(t, evs[3], map[string]any{"worker_id": "w1", "error_code": "busy", "error_message": "try later", "retryable": true})
	wantData(t, evs[5], map[string]any{"worker_id": "w2", "lease_generation": 2.0})
	wantData(t, evs[7], map[string]any{"worker_id": "w3", "lease_generation": 3.0})
	wantData(t, evs[9], map[string]any{"worker_id": "w4", "lease_generation": 4.0, "attempt": 3.0})
	for i, want := range []time.Time{at(0), at(time.Second), at(2 * time.Second), at(3 * time.Second), at(time.Hour),
		at(time.Hour + lease + time.Second), at(2 * time.Hour), at(2*time.Hour + time.Second), at(3 * time.Hour), at(3*time.Hour + time.Second)} {
		wantTime(t, "event "+string(evs[i].Type), evs[i].Time, want)
	}
	for _, i := range []int{1, 4, 6, 8} {
		if d := eventData(t, evs[i]); d["lease_expires_at"] == nil {
			t.Errorf("LEASED event %d has no lease_expires_at: %s", evs[i].Sequence, evs[i].Data)
		}
	}
	as := e.attempts(tenantA, j.ID)
	var outcomes []store.AttemptOutcome
	for i, a := range as {
		outcomes = append(outcomes, a.Outcome)
		if a.LeaseGeneration != int64(i+1) || a.WorkerID != []string{"w1", "w2", "w3", "w4"}[i] {
			t.Errorf("attempt %d: generation %d worker %s", i, a.LeaseGeneration, a.WorkerID)
		}
	}
	if want := []store.AttemptOutcome{store.AttemptFailed, store.AttemptLeaseExpired, store.AttemptReleased, store.AttemptSucceeded}; !slices.Equal(outcomes, want) {
		t.Errorf("attempt outcomes %v, want %v", outcomes, want)
	}
	if a := as[0]; a.Error == nil || a.Error.Code != "busy" || !sameTime(a.ClaimedAt, at(time.Second)) || !sameTime(a.FinishedAt, at(3*time.Second)) {
		t.Errorf("first attempt %+v", a)
	}
	if got := e.get(tenantA, j.ID); got.State != store.JobStateSucceeded || got.Attempts != 3 {
		t.Errorf("job %s after its history: state %s attempts %d", j.ID, got.State, got.Attempts)
	}
}

func testHistoryPaging(t *testing.T, h Harness) {
	e := setup(t, h)
	j := severalAttempts(e)
	all := e.events(tenantA, j.ID)
	for size := 1; size <= 4; size++ {
		var paged []store.Event
		after := int64(0)
		for range 20 {
			page, err := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenantA, JobID: j.ID, AfterSequence: after, Limit: size})
			if err != nil {
				t.Fatalf("list events after %d: %v", after, err)
			}
			if len(page) > size {
				t.Fatalf("a page of %d events for limit %d", len(page), size)
			}
			if len(page) == 0 {
				break
			}
			paged = append(paged, page...)
			after = page[len(page)-1].Sequence
		}
		if !slices.EqualFunc(paged, all, func(a, b store.Event) bool {
			return a.Sequence == b.Sequence && a.Type == b.Type && a.Data == b.Data && a.Time.Equal(b.Time)
		}) {
			t.Errorf("pages of %d: %v, want %v", size, eventTypes(paged), eventTypes(all))
		}
	}
	// Watching a leased job sees its LEASED event after the QUEUED one.
	k := e.mustCreate(tenantA, spec("history"), at(4*time.Hour))
	e.mustClaim(tenantA, "w5", "history", k.ID, at(4*time.Hour+time.Second))
	page, err := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenantA, JobID: k.ID, AfterSequence: 1})
	if err != nil {
		t.Fatal(err)
	}
	wantEvents(t, page, store.EventLeased)
	if page[0].Sequence != 2 {
		t.Errorf("LEASED of a held job has sequence %d", page[0].Sequence)
	}
}

func testHistoryRows(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := spec("history")
	sp.RunAt = at(time.Minute)
	j := e.mustCreate(tenantA, sp, at(0))
	c := e.mustClaim(tenantA, "w1", "history", j.ID, at(2*time.Minute))
	e.complete(tenantA, c.Token, at(2*time.Minute+time.Second))
	if n := e.rows(RowsEvents, j.ID); n != 0 {
		t.Errorf("a successful job wrote %d event rows, want 0", n)
	}
	if n := e.rows(RowsAttempts, j.ID); n != 0 {
		t.Errorf("a successful job wrote %d attempt rows, want 0", n)
	}
	evs := e.events(tenantA, j.ID)
	wantEvents(t, evs, store.EventQueued, store.EventLeased, store.EventSucceeded)
	if d := eventData(t, evs[0]); d["available_at"] != at(time.Minute).Format(time.RFC3339Nano) {
		t.Errorf("QUEUED of a job to run later: %s", evs[0].Data)
	}
	if as := e.attempts(tenantA, j.ID); len(as) != 1 || as[0].Outcome != store.AttemptSucceeded {
		t.Errorf("attempts %+v", as)
	}
}

func testHistorySpill(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("history"), at(0))
	const releases = store.AttemptLogCap + 5
	now := at(time.Second)
	for range releases {
		c := e.mustClaim(tenantA, "w", "history", j.ID, now)
		if _, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: c.Token, Now: now.Add(time.Millisecond)}); err != nil {
			t.Fatalf("release: %v", err)
		}
		now = now.Add(time.Second)
	}
	c := e.mustClaim(tenantA, "w", "history", j.ID, now)
	e.complete(tenantA, c.Token, now.Add(time.Millisecond))
	if n := e.rows(RowsAttempts, j.ID); n != releases+1-store.AttemptLogCap {
		t.Errorf("%d attempt rows moved out of the row, want %d", n, releases+1-store.AttemptLogCap)
	}
	as := e.attempts(tenantA, j.ID)
	if len(as) != releases+1 {
		t.Fatalf("%d attempts listed, want %d", len(as), releases+1)
	}
	for i, a := range as {
		want := store.AttemptReleased
		if i == releases {
			want = store.AttemptSucceeded
		}
		if a.LeaseGeneration != int64(i+1) || a.Outcome != want {
			t.Fatalf("attempt %d: generation %d outcome %s", i, a.LeaseGeneration, a.Outcome)
		}
	}
	evs := e.events(tenantA, j.ID)
	if len(evs) != 1+2*(releases+1) {
		t.Fatalf("%d events, want %d", len(evs), 1+2*(releases+1))
	}
	if last := evs[len(evs)-1]; last.Type != store.EventSucceeded {
		t.Errorf("last event %s", last.Type)
	}
	if countEvents(evs, store.EventReleased) != releases || countEvents(evs, store.EventLeased) != releases+1 {
		t.Errorf("events %v", eventTypes(evs))
	}
}
