package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// retryTests cover contract point 5: retries are bounded and classified,
// and a spent budget ends in DEAD with its run-failed event.
func retryTests() group {
	return group{name: "Retry", cases: []testCase{
		{"the backoff follows the policy with its cap and pinned jitter", testRetrySchedule},
		{"jitter stays within its bounds", testRetryJitterBounds},
		{"decorrelated backoff grows from the previous delay kept in the attempt record", testRetryDecorrelated},
		{"a worker's retry-after is honoured when it is longer than the backoff", testRetryAfter},
		{"the exact attempt budget ends in DEAD with one run_failed and dead pair", testRetryBudget},
		{"a job's own max attempts overrides the queue's", testRetryJobBudget},
		{"the total retry deadline ends in DEAD", testRetryDeadline},
		{"a non-retryable error ends in FAILED, not DEAD", testNonRetryable},
		{"the queue's error code lists override the worker's flag", testErrorCodeClassification},
	}}
}

var errTransient = store.JobError{Code: "upstream_503", Message: "upstream unavailable", Retryable: true}

func testRetrySchedule(t *testing.T, h Harness) {
	e := setup(t, h)
	e.f.setRand(0.5)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "billing", Retry: store.RetryPolicy{
		MaxAttempts: 10, InitialDelay: 10 * time.Second, MaxDelay: 25 * time.Second, Multiplier: 2, JitterFraction: 0.5,
	}})
	j := e.mustCreate(tenantA, spec("billing"), base)
	// base delays 10s, 20s, 25s (capped), 25s; each plus 25% (0.5 × 0.5).
	want := []time.Duration{12500 * time.Millisecond, 25 * time.Second, 31250 * time.Millisecond, 31250 * time.Millisecond}
	now := at(time.Second)
	for i, d := range want {
		c := e.mustClaim(tenantA, workerA, "billing", j.ID, now)
		if c.Job.Attempts != int32(i+1) {
			t.Fatalf("claim %d: attempts %d", i+1, c.Job.Attempts)
		}
		failedAt := now.Add(time.Second)
		got := e.retry(tenantA, c.Token, errTransient, 0, failedAt)
		if got.State != store.JobStateQueued {
			t.Fatalf("retry %d: state %s, want queued", i+1, got.State)
		}
		wantTime(t, "available_at after failure "+string(rune('1'+i)), got.AvailableAt, failedAt.Add(d))
		if got.LastError == nil || got.LastError.Code != errTransient.Code || got.LastError.Message != errTransient.Message || !got.LastError.Retryable {
			t.Fatalf("retry %d: last error %+v, want %+v", i+1, got.LastError, errTransient)
		}
		if !got.LeaseExpiresAt.IsZero() || !got.FinishedAt.IsZero() {
			t.Fatalf("a rescheduled job has lease expiry %v and finished_at %v", got.LeaseExpiresAt, got.FinishedAt)
		}
		// The delay is persisted: not claimable a moment before, claimable at.
		wantTime(t, "stored available_at", e.get(tenantA, j.ID).AvailableAt, failedAt.Add(d))
		e.claimNothing(tenantA, "billing", failedAt.Add(d-time.Millisecond), "the backoff has not elapsed")
		now = failedAt.Add(d)
	}
	evs := e.events(tenantA, j.ID)
	if n := countEvents(evs, store.EventRunFailed); n != len(want) {
		t.Fatalf("%d run_failed events, want %d: %v", n, len(want), eventTypes(evs))
	}
	if terminalEvents(evs) != 0 {
		t.Fatalf("a retried job has terminal events: %v", eventTypes(evs))
	}
	as := e.attempts(tenantA, j.ID)
	if len(as) != len(want) {
		t.Fatalf("%d attempts, want %d", len(as), len(want))
	}
	for i, a := range as {
		if a.Outcome != store.AttemptFailed || a.Error == nil || a.Error.Code != errTransient.Code || a.FinishedAt.IsZero() {
			t.Fatalf("attempt %d: %+v, want failed with %s", i+1, a, errTransient.Code)
		}
	}
}

func testRetryJitterBounds(t *testing.T, h Harness) {
	policy := store.RetryPolicy{MaxAttempts: 10, InitialDelay: 40 * time.Second, MaxDelay: time.Hour, Multiplier: 3, JitterFraction: 0.25}
	for _, rnd := range []float64{0, 0.999999} {
		e := setup(t, h)
		e.f.setRand(rnd)
		e.setPolicy(tenantA, store.QueuePolicy{Queue: "jittery", Retry: policy})
		j := e.mustCreate(tenantA, spec("jittery"), base)
		now := at(time.Second)
		for attempt := range 3 {
			c := e.mustClaim(tenantA, workerA, "jittery", j.ID, now)
			got := e.retry(tenantA, c.Token, errTransient, 0, now)
			delay := got.AvailableAt.Sub(now)
			lo := 40 * time.Second
			for range attempt {
				lo *= 3
			}
			hi := lo + lo/4
			if delay < lo || delay > hi {
				t.Fatalf("rand %v, failure %d: delay %s outside [%s, %s]", rnd, attempt+1, delay, lo, hi)
			}
			if rnd == 0 && delay != lo {
				t.Fatalf("rand 0, failure %d: delay %s, want exactly %s", attempt+1, delay, lo)
			}
			if rnd > 0.99 && delay < hi-hi/100 {
				t.Fatalf("rand %v, failure %d: delay %s, want close to %s", rnd, attempt+1, delay, hi)
			}
			now = got.AvailableAt
		}
	}
}

func testRetryAfter(t *testing.T, h Harness) {
	e := setup(t, h)
	e.f.setRand(0)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Minute, MaxDelay: time.Hour, Multiplier: 2}})
	j := e.mustCreate(tenantA, spec("q"), base)
	c := e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Second))
	// Longer than the backoff: the worker's retry-after wins.
	got := e.retry(tenantA, c.Token, errTransient, 3*time.Hour, at(2*time.Second))
	wantTime(t, "available_at with a 3h retry-after", got.AvailableAt, at(2*time.Second+3*time.Hour))
	c = e.mustClaim(tenantA, workerA, "q", j.ID, got.AvailableAt)
	// Shorter than the backoff (2m for the second failure): the backoff wins.
	failedAt := got.AvailableAt.Add(time.Second)
	got = e.retry(tenantA, c.Token, errTransient, time.Second, failedAt)
	wantTime(t, "available_at with a 1s retry-after", got.AvailableAt, failedAt.Add(2*time.Minute))
}

func testRetryBudget(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{MaxAttempts: 3, InitialDelay: time.Second, MaxDelay: time.Second, Multiplier: 1}})
	j := e.mustCreate(tenantA, spec("q"), base)
	if j.MaxAttempts != 3 {
		t.Fatalf("job max attempts %d, want the queue's 3", j.MaxAttempts)
	}
	now := at(time.Second)
	var last *store.Job
	var lastTok store.LeaseToken
	for i := range 3 {
		c := e.mustClaim(tenantA, workerA, "q", j.ID, now)
		last = e.retry(tenantA, c.Token, errTransient, 0, now.Add(time.Second))
		lastTok = c.Token
		if i < 2 && last.State != store.JobStateQueued {
			t.Fatalf("failure %d of 3: state %s, want queued", i+1, last.State)
		}
		now = now.Add(time.Minute)
	}
	if last.State != store.JobStateDead || last.Attempts != 3 || last.FinishedAt.IsZero() || last.LastError == nil {
		t.Fatalf("after the third failure: %s, attempts %d, finished %v, error %v; want dead, 3, set, set", last.State, last.Attempts, last.FinishedAt, last.LastError)
	}
	wantEvents(t, e.events(tenantA, j.ID),
		store.EventQueued,
		store.EventLeased, store.EventRunFailed,
		store.EventLeased, store.EventRunFailed,
		store.EventLeased, store.EventRunFailed, store.EventDead)
	e.claimNothing(tenantA, "q", at(24*time.Hour), "the job is dead")
	dj, err := e.s.GetDeadJob(e.ctx, tenantA, j.ID)
	if err != nil || dj.Job.ID != j.ID || len(dj.Attempts) != 3 || dj.Job.LastError == nil || dj.Job.LastError.Code != errTransient.Code {
		t.Fatalf("dead job evidence: %+v, %v", dj, err)
	}
	// The lost-response replay of the fatal report answers the same.
	again, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: lastTok, Error: errTransient, Now: now})
	if err != nil || again.State != store.JobStateDead {
		t.Fatalf("repeating the fatal retry: %v, %v; want the dead job again", again, err)
	}
	if evs := e.events(tenantA, j.ID); len(evs) != 8 {
		t.Fatalf("repeating the fatal retry added events: %v", eventTypes(evs))
	}
}

func testRetryJobBudget(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{MaxAttempts: 10}})
	sp := spec("q")
	sp.MaxAttempts = 2
	j := e.mustCreate(tenantA, sp, base)
	c := e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Second))
	got := e.retry(tenantA, c.Token, errTransient, 0, at(2*time.Second))
	if got.State != store.JobStateQueued {
		t.Fatalf("first of 2 attempts failed: %s, want queued", got.State)
	}
	c = e.mustClaim(tenantA, workerA, "q", j.ID, got.AvailableAt)
	got = e.retry(tenantA, c.Token, errTransient, 0, got.AvailableAt.Add(time.Second))
	if got.State != store.JobStateDead {
		t.Fatalf("second of 2 attempts failed: %s, want dead", got.State)
	}
}

func testRetryDeadline(t *testing.T, h Harness) {
	e := setup(t, h)
	e.f.setRand(0)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{
		MaxAttempts: 100, InitialDelay: 40 * time.Second, MaxDelay: time.Hour, Multiplier: 2, TotalRetryDeadline: time.Minute,
	}})
	j := e.mustCreate(tenantA, spec("q"), base)
	wantTime(t, "retry deadline", j.RetryDeadline, at(time.Minute))
	// First failure at 5s: next attempt at 45s, inside the minute.
	c := e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Second))
	got := e.retry(tenantA, c.Token, errTransient, 0, at(5*time.Second))
	if got.State != store.JobStateQueued {
		t.Fatalf("first failure: %s, want queued", got.State)
	}
	wantTime(t, "available_at", got.AvailableAt, at(45*time.Second))
	// Second failure at 50s: the next attempt (50s + 80s) is past the
	// deadline, so the job is dead with its budget of attempts unspent.
	c = e.mustClaim(tenantA, workerA, "q", j.ID, at(45*time.Second))
	got = e.retry(tenantA, c.Token, errTransient, 0, at(50*time.Second))
	if got.State != store.JobStateDead || got.Attempts != 2 {
		t.Fatalf("failure past the retry deadline: %s with %d attempts, want dead with 2", got.State, got.Attempts)
	}
	evs := e.events(tenantA, j.ID)
	if n := len(evs); n < 2 || evs[n-2].Type != store.EventRunFailed || evs[n-1].Type != store.EventDead || terminalEvents(evs) != 1 {
		t.Fatalf("events %v, want one run_failed and dead pair at the end", eventTypes(evs))
	}
	// A retry-after that reaches past the deadline also ends it.
	j2 := e.mustCreate(tenantA, spec("q"), base)
	c = e.mustClaim(tenantA, workerA, "q", j2.ID, at(time.Second))
	got = e.retry(tenantA, c.Token, errTransient, time.Hour, at(2*time.Second))
	if got.State != store.JobStateDead {
		t.Fatalf("a retry-after past the deadline: %s, want dead", got.State)
	}
}

func testNonRetryable(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("q"), base)
	c := e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Second))
	bad := store.JobError{Code: "invalid_card", Message: "card number is invalid", Retryable: false}
	got := e.retry(tenantA, c.Token, bad, 0, at(2*time.Second))
	if got.State != store.JobStateFailed || got.FinishedAt.IsZero() || got.Attempts != 1 {
		t.Fatalf("non-retryable failure with budget left: %s, finished %v, attempts %d; want failed", got.State, got.FinishedAt, got.Attempts)
	}
	if got.LastError == nil || *got.LastError != bad {
		t.Fatalf("last error %+v, want %+v", got.LastError, bad)
	}
	evs := e.events(tenantA, j.ID)
	if terminalEvents(evs) != 1 || evs[len(evs)-1].Type != store.EventFailed || countEvents(evs, store.EventDead) != 0 {
		t.Fatalf("events %v, want one terminal event, failed, last, and no dead", eventTypes(evs))
	}
	e.claimNothing(tenantA, "q", at(24*time.Hour), "the job failed")
	_, err := e.s.GetDeadJob(e.ctx, tenantA, j.ID)
	wantErr(t, err, store.ErrNotDead, "a failed job in the dead-letter queue")
	as := e.attempts(tenantA, j.ID)
	if len(as) != 1 || as[0].Outcome != store.AttemptFailed || as[0].Error == nil || as[0].Error.Code != bad.Code {
		t.Fatalf("attempt history %+v", as)
	}
}

func testErrorCodeClassification(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{
		MaxAttempts:            5,
		RetryableErrorCodes:    []string{"rate_limited", "both"},
		NonRetryableErrorCodes: []string{"forbidden", "both"},
	}})
	cases := []struct {
		err  store.JobError
		want store.JobState
	}{
		{store.JobError{Code: "forbidden", Retryable: true}, store.JobStateFailed},     // listed non-retryable beats the flag
		{store.JobError{Code: "rate_limited", Retryable: false}, store.JobStateQueued}, // listed retryable beats the flag
		{store.JobError{Code: "both", Retryable: true}, store.JobStateFailed},          // non-retryable list wins over both
		{store.JobError{Code: "other", Retryable: true}, store.JobStateQueued},         // unlisted: the flag decides
		{store.JobError{Code: "other", Retryable: false}, store.JobStateFailed},
	}
	for i, tc := range cases {
		j := e.mustCreate(tenantA, spec("q"), base)
		c := e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Duration(i+1)*time.Second))
		got := e.retry(tenantA, c.Token, tc.err, 0, at(time.Duration(i+1)*time.Second+time.Millisecond))
		if got.State != tc.want {
			t.Errorf("error %+v ended in %s, want %s", tc.err, got.State, tc.want)
		}
	}
}

func testRetryDecorrelated(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "decor", Retry: store.RetryPolicy{
		MaxAttempts: 10, InitialDelay: 10 * time.Second, MaxDelay: 100 * time.Second, Backoff: store.BackoffDecorrelated,
	}})
	if p, err := e.s.GetQueuePolicy(e.ctx, tenantA, "decor"); err != nil || p.Retry.Backoff != store.BackoffDecorrelated {
		t.Fatalf("stored policy %+v, %v", p, err)
	}
	j := e.mustCreate(tenantA, spec("decor"), base)
	// delay = min(100s, 10s + rnd × (3 × max(prev, 10s) − 10s)), rnd pinned
	// per attempt: the previous delay comes from the last attempt record.
	steps := []struct {
		rnd  float64
		want time.Duration
	}{
		{0.5, 20 * time.Second},         // prev 0 → 10 + 0.5 × 20
		{0.5, 35 * time.Second},         // prev 20s → 10 + 0.5 × 50
		{0, 10 * time.Second},           // prev 35s → the floor
		{0.25, 15 * time.Second},        // prev 10s → 10 + 0.25 × 20
		{0.9, 41500 * time.Millisecond}, // prev 15s → 10 + 0.9 × 35
		{0.9, 100 * time.Second},        // prev 41.5s → 10 + 0.9 × 114.5, capped
	}
	now := at(time.Second)
	for i, st := range steps {
		e.f.setRand(st.rnd)
		c := e.mustClaim(tenantA, workerA, "decor", j.ID, now)
		failedAt := now.Add(time.Second)
		got := e.retry(tenantA, c.Token, errTransient, 0, failedAt)
		if got.State != store.JobStateQueued {
			t.Fatalf("retry %d: state %s", i+1, got.State)
		}
		wantTime(t, fmt.Sprintf("available_at after failure %d", i+1), got.AvailableAt, failedAt.Add(st.want).Truncate(time.Microsecond))
		now = got.AvailableAt
	}
}
