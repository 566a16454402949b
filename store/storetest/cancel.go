package storetest

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// cancelTests cover contract point 7: cancellation has a specified winner.
func cancelTests() group {
	return group{name: "Cancel", cases: []testCase{
		{"cancelling a queued job cancels it at once", testCancelQueued},
		{"cancelling a leased job blocks claims, reaches the holder on renew and ends on its acknowledgement", testCancelLeased},
		{"cancelling a terminal job fails with ErrAlreadyFinal", testCancelTerminal},
		{"cancel by the holder racing complete has exactly one winner", testRaceHolderCancelComplete},
		{"a client cancel racing complete leaves exactly one terminal event", testRaceRequestCancelComplete},
		{"a client cancel of a queued job racing a claim has exactly one winner", testRaceRequestCancelClaim},
		{"the reaper ends a cancel-requested job whose lease expired unacknowledged", testCancelRequestedLeaseExpires},
		{"a retryable failure of a cancel-requested job ends it cancelled, not queued", testRetryCancelRequested},
	}}
}

func (e *env) requestCancel(s store.Store, tenant, jobID string, now time.Time) (*store.Job, error) {
	return s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenant, JobID: jobID, Reason: "customer asked", Now: now})
}

func testCancelQueued(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	got, err := e.requestCancel(e.s, tenantA, j.ID, at(time.Second))
	if err != nil {
		t.Fatalf("cancel a queued job: %v", err)
	}
	if got.State != store.JobStateCancelled || got.Attempts != 0 {
		t.Fatalf("cancelled queued job is %s with %d attempts", got.State, got.Attempts)
	}
	wantTime(t, "finished_at", got.FinishedAt, at(time.Second))
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventCancelled)
	e.claimNothing(tenantA, "default", at(time.Minute), "the job was cancelled")
	_, err = e.requestCancel(e.s, tenantA, freshID(), at(time.Second))
	wantErr(t, err, store.ErrNotFound, "cancel a job that does not exist")
}

func testCancelLeased(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	got, err := e.requestCancel(e.s, tenantA, j.ID, at(5*time.Second))
	if err != nil {
		t.Fatalf("cancel a leased job: %v", err)
	}
	if got.State != store.JobStateLeased || !got.CancelRequested || got.LeaseOwner != workerA || !got.FinishedAt.IsZero() {
		t.Fatalf("after a client cancel the leased job is %s (cancel requested %v, owner %q)", got.State, got.CancelRequested, got.LeaseOwner)
	}
	// Repeating the request changes nothing.
	again, err := e.requestCancel(e.s, tenantA, j.ID, at(6*time.Second))
	if err != nil || again.State != store.JobStateLeased || !again.CancelRequested {
		t.Fatalf("repeated cancel request: %+v, %v", again, err)
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased, store.EventCancelRequested)

	// The holder learns it on renew, and the lease is still extended so it
	// can finish cleanly.
	res, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{c.Token}, LeaseDuration: lease, Now: at(10 * time.Second)})
	if err != nil || len(res) != 1 || res[0].Status != store.RenewCancelRequested {
		t.Fatalf("holder's renew after a cancel request: %+v, %v; want cancel_requested", res, err)
	}
	wantTime(t, "lease expiry after a cancel-requested renewal", res[0].ExpiresAt, at(40*time.Second))

	// The holder acknowledges; the job ends as cancelled.
	done, err := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: c.Token, Reason: "stopping", Now: at(11 * time.Second)})
	if err != nil {
		t.Fatalf("holder's cancel: %v", err)
	}
	if done.State != store.JobStateCancelled {
		t.Fatalf("after the holder's cancel the job is %s", done.State)
	}
	wantTime(t, "finished_at", done.FinishedAt, at(11*time.Second))
	evs := e.events(tenantA, j.ID)
	wantEvents(t, evs, store.EventQueued, store.EventLeased, store.EventCancelRequested, store.EventCancelled)
	as := e.attempts(tenantA, j.ID)
	if len(as) != 1 || as[0].Outcome != store.AttemptCancelled {
		t.Fatalf("attempt history %+v, want one cancelled attempt", as)
	}
	_, err = e.requestCancel(e.s, tenantA, j.ID, at(12*time.Second))
	wantErr(t, err, store.ErrAlreadyFinal, "cancel after the holder cancelled")

	// A cancel-requested job is not handed out again, even when its lease
	// has expired.
	j2 := e.mustCreate(tenantA, spec("other"), base)
	e.mustClaim(tenantA, workerA, "other", j2.ID, at(time.Second))
	if _, err := e.requestCancel(e.s, tenantA, j2.ID, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	e.claimNothing(tenantA, "other", at(10*time.Minute), "the expired job has a cancel request")
	if got := e.get(tenantA, j2.ID); got.LeaseGeneration != 1 || !got.CancelRequested {
		t.Fatalf("the cancel-requested job was touched by a claim: generation %d", got.LeaseGeneration)
	}
}

func testCancelTerminal(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	e.complete(tenantA, c.Token, at(2*time.Second))
	_, err := e.requestCancel(e.s, tenantA, j.ID, at(3*time.Second))
	wantErr(t, err, store.ErrAlreadyFinal, "cancel a succeeded job")
	if got := e.get(tenantA, j.ID); got.State != store.JobStateSucceeded || got.CancelRequested {
		t.Fatalf("cancel of a succeeded job changed it: %s, cancel requested %v", got.State, got.CancelRequested)
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased, store.EventSucceeded)
}

// raceRounds is how many times each race is run; each round is a fresh job.
const raceRounds = 20

// race runs a and b at the same instant and returns their errors.
func race(a, b func() error) (errA, errB error) {
	var wg sync.WaitGroup
	start := make(barrier)
	wg.Add(2)
	go func() { defer wg.Done(); start.wait(); errA = a() }()
	go func() { defer wg.Done(); start.wait(); errB = b() }()
	start.open()
	wg.Wait()
	return errA, errB
}

func testRaceHolderCancelComplete(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	wins := map[string]int{}
	for round := range raceRounds {
		j := e.mustCreate(tenantA, spec("race"), base)
		c := e.mustClaim(tenantA, workerA, "race", j.ID, at(time.Second))
		sa, sb := e.s, other
		if round%2 == 1 {
			sa, sb = other, e.s
		}
		errComplete, errCancel := race(
			func() error {
				_, err := sa.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c.Token, Result: []byte("done"), Now: at(2 * time.Second)})
				return err
			},
			func() error {
				_, err := sb.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: c.Token, Reason: "stop", Now: at(2 * time.Second)})
				return err
			},
		)
		got := e.get(tenantA, j.ID)
		switch {
		case errComplete == nil && errCancel == nil:
			t.Fatalf("round %d: both complete and cancel succeeded; job is %s", round, got.State)
		case errComplete == nil:
			wantRejected(t, errCancel, fmt.Sprintf("round %d: losing cancel", round))
			if got.State != store.JobStateSucceeded {
				t.Fatalf("round %d: complete won but the job is %s", round, got.State)
			}
			wins["complete"]++
		case errCancel == nil:
			wantRejected(t, errComplete, fmt.Sprintf("round %d: losing complete", round))
			if got.State != store.JobStateCancelled {
				t.Fatalf("round %d: cancel won but the job is %s", round, got.State)
			}
			wins["cancel"]++
		default:
			t.Fatalf("round %d: neither won: complete %v, cancel %v", round, errComplete, errCancel)
		}
		evs := e.events(tenantA, j.ID)
		if n := terminalEvents(evs); n != 1 {
			t.Fatalf("round %d: %d terminal events: %v", round, n, eventTypes(evs))
		}
	}
	t.Logf("winners over %d rounds: %v", raceRounds, wins)
}

func testRaceRequestCancelComplete(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	for round := range raceRounds {
		j := e.mustCreate(tenantA, spec("race"), base)
		c := e.mustClaim(tenantA, workerA, "race", j.ID, at(time.Second))
		sa, sb := e.s, other
		if round%2 == 1 {
			sa, sb = other, e.s
		}
		var cancelled *store.Job
		errComplete, errCancel := race(
			func() error {
				_, err := sa.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c.Token, Now: at(2 * time.Second)})
				return err
			},
			func() (err error) {
				cancelled, err = e.requestCancel(sb, tenantA, j.ID, at(2*time.Second))
				return err
			},
		)
		// A cancel request does not take the lease away: the holder's
		// complete always succeeds. The request either marked a leased job
		// or found it already final.
		if errComplete != nil {
			t.Fatalf("round %d: complete failed: %v", round, errComplete)
		}
		switch {
		case errCancel == nil:
			if cancelled.State != store.JobStateLeased || !cancelled.CancelRequested {
				t.Fatalf("round %d: the cancel request returned a %s job (cancel requested %v)", round, cancelled.State, cancelled.CancelRequested)
			}
		case errors.Is(errCancel, store.ErrAlreadyFinal):
		default:
			t.Fatalf("round %d: cancel request: %v", round, errCancel)
		}
		got := e.get(tenantA, j.ID)
		evs := e.events(tenantA, j.ID)
		if got.State != store.JobStateSucceeded || terminalEvents(evs) != 1 || evs[len(evs)-1].Type != store.EventSucceeded {
			t.Fatalf("round %d: job %s with events %v, want succeeded with one terminal event", round, got.State, eventTypes(evs))
		}
	}
}

func testRaceRequestCancelClaim(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	wins := map[string]int{}
	for round := range raceRounds {
		queue := fmt.Sprintf("race-%d", round)
		j := e.mustCreate(tenantA, spec(queue), base)
		sa, sb := e.s, other
		if round%2 == 1 {
			sa, sb = other, e.s
		}
		var (
			cancelled *store.Job
			claimed   []store.ClaimedJob
		)
		errCancel, errClaim := race(
			func() (err error) {
				cancelled, err = e.requestCancel(sa, tenantA, j.ID, at(2*time.Second))
				return err
			},
			func() (err error) {
				claimed, err = sb.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{queue}, Max: 1, LeaseDuration: lease, Now: at(2 * time.Second)})
				if err != nil || len(claimed) == 0 {
					return err
				}
				_, err = sb.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: claimed[0].Token, Now: at(3 * time.Second)})
				return err
			},
		)
		if errClaim != nil {
			t.Fatalf("round %d: claim or complete failed: %v", round, errClaim)
		}
		got := e.get(tenantA, j.ID)
		switch {
		case len(claimed) == 0:
			// The cancel came first: the job never ran.
			if errCancel != nil || cancelled.State != store.JobStateCancelled || got.State != store.JobStateCancelled {
				t.Fatalf("round %d: claim found nothing but the cancel answered %v (%v) and the job is %s", round, errCancel, cancelled, got.State)
			}
			wins["cancel"]++
		default:
			// The claim came first: the cancel only marked the lease, or
			// found the job already final; the holder's complete won.
			if errCancel != nil && !errors.Is(errCancel, store.ErrAlreadyFinal) {
				t.Fatalf("round %d: cancel after the claim: %v", round, errCancel)
			}
			if errCancel == nil && (cancelled.State != store.JobStateLeased || !cancelled.CancelRequested) {
				t.Fatalf("round %d: cancel after the claim returned a %s job", round, cancelled.State)
			}
			if got.State != store.JobStateSucceeded {
				t.Fatalf("round %d: the claimed job is %s, want succeeded", round, got.State)
			}
			wins["claim"]++
		}
		evs := e.events(tenantA, j.ID)
		if n := terminalEvents(evs); n != 1 {
			t.Fatalf("round %d: %d terminal events: %v", round, n, eventTypes(evs))
		}
	}
	t.Logf("winners over %d rounds: %v", raceRounds, wins)
}

func testCancelRequestedLeaseExpires(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	a := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second)) // expires at 31s
	if _, err := e.requestCancel(e.s, tenantA, j.ID, at(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	// While the lease runs the holder may still acknowledge: a claim leaves
	// the job alone, and so does another tenant's claim after expiry.
	e.claimNothing(tenantA, "default", at(30*time.Second), "the cancel-requested lease runs until 31s")
	if got := e.claim(tenantB, workerB, "default", 10, lease, at(31*time.Second)); len(got) != 0 {
		t.Fatalf("tenant B claimed %d jobs from its empty queue", len(got))
	}
	if got := e.get(tenantA, j.ID); got.State != store.JobStateLeased || !got.CancelRequested || got.LeaseGeneration != 1 {
		t.Fatalf("before the lease expired the job is %s (cancel requested %v, generation %d), want leased", got.State, got.CancelRequested, got.LeaseGeneration)
	}

	// The holder never acknowledged: the reaper at expiry ends the job,
	// and nothing can claim it.
	if r := e.reap(at(31 * time.Second)); len(r.Jobs) != 1 || len(r.Requeued) != 0 {
		t.Fatalf("reap at expiry: %+v, want the one job ended, no queue woken", r)
	}
	e.claimNothing(tenantA, "default", at(31*time.Second), "a cancel-requested job is never claimed")
	got := e.get(tenantA, j.ID)
	if got.State != store.JobStateCancelled || !got.CancelRequested || !got.LeaseExpiresAt.IsZero() ||
		got.LeaseGeneration != 1 || got.LeaseOwner != workerA || got.Attempts != 1 {
		t.Fatalf("after the reaper the job is %s (cancel requested %v, lease expiry %v, generation %d, owner %q, attempts %d); want cancelled, generation 1 of %s, 1 attempt",
			got.State, got.CancelRequested, got.LeaseExpiresAt, got.LeaseGeneration, got.LeaseOwner, got.Attempts, workerA)
	}
	wantTime(t, "finished_at", got.FinishedAt, at(31*time.Second))
	evs := e.events(tenantA, j.ID)
	wantEvents(t, evs, store.EventQueued, store.EventLeased, store.EventCancelRequested, store.EventCancelled)
	wantData(t, evs[3], map[string]any{"reason": "customer asked", "worker_id": workerA, "lease_generation": float64(1), "lease_expired": true})
	wantTime(t, "cancelled event time", evs[3].Time, at(31*time.Second))
	as := e.attempts(tenantA, j.ID)
	if len(as) != 1 || as[0].Outcome != store.AttemptLeaseExpired || as[0].WorkerID != workerA || as[0].LeaseGeneration != 1 {
		t.Fatalf("attempt history %+v, want A's one attempt ended lease_expired", as)
	}
	wantTime(t, "attempt finished_at", as[0].FinishedAt, at(31*time.Second))

	// The holder that let the lease expire is fenced; its late
	// acknowledgement is not mistaken for a repeat of its own report.
	wantAllLost(t, "A after its cancel-requested lease expired", e.leaseBoundCalls(e.s, tenantA, a.Token, at(32*time.Second)))
	e.claimNothing(tenantA, "default", at(time.Hour), "the job was cancelled")
	_, err := e.requestCancel(e.s, tenantA, j.ID, at(time.Hour))
	wantErr(t, err, store.ErrAlreadyFinal, "cancel after the reaper ended the job")
	if after := e.events(tenantA, j.ID); len(after) != len(evs) {
		t.Fatalf("calls after the job ended added events: %v", eventTypes(after))
	}
}

func testRetryCancelRequested(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{MaxAttempts: 5, InitialDelay: time.Second, MaxDelay: time.Second, Multiplier: 1}})
	j := e.mustCreate(tenantA, spec("q"), base)
	c := e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Second))
	if _, err := e.requestCancel(e.s, tenantA, j.ID, at(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	// Budget left and a retryable error would queue the job again, where no
	// claim would ever take it: it ends CANCELLED instead.
	got := e.retry(tenantA, c.Token, errTransient, 0, at(3*time.Second))
	for _, g := range []*store.Job{got, e.get(tenantA, j.ID)} {
		if g.State != store.JobStateCancelled || g.Attempts != 1 || !g.LeaseExpiresAt.IsZero() || g.LastError == nil || *g.LastError != errTransient {
			t.Fatalf("retried cancel-requested job is %s, attempts %d, lease expiry %v, last error %+v; want cancelled, 1, none, %+v",
				g.State, g.Attempts, g.LeaseExpiresAt, g.LastError, errTransient)
		}
		wantTime(t, "finished_at", g.FinishedAt, at(3*time.Second))
	}
	evs := e.events(tenantA, j.ID)
	wantEvents(t, evs, store.EventQueued, store.EventLeased, store.EventCancelRequested, store.EventRunFailed, store.EventCancelled)
	wantData(t, evs[3], map[string]any{
		"worker_id": workerA, "lease_generation": float64(1), "attempt": float64(1),
		"error_code": errTransient.Code, "error_message": errTransient.Message, "retryable": true,
	})
	wantData(t, evs[4], map[string]any{"reason": "customer asked", "worker_id": workerA, "lease_generation": float64(1), "by": "retry"})
	as := e.attempts(tenantA, j.ID)
	if len(as) != 1 || as[0].Outcome != store.AttemptFailed || as[0].Error == nil || *as[0].Error != errTransient {
		t.Fatalf("attempt history %+v, want one failed attempt with %+v", as, errTransient)
	}
	e.claimNothing(tenantA, "q", at(time.Hour), "the job was cancelled")
	_, err := e.requestCancel(e.s, tenantA, j.ID, at(time.Hour))
	wantErr(t, err, store.ErrAlreadyFinal, "cancel after the retry cancelled the job")
	// The lost-response replay of the report answers the same, adding nothing.
	again, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: c.Token, Error: errTransient, Now: at(4 * time.Second)})
	if err != nil || again.State != store.JobStateCancelled {
		t.Fatalf("repeating the retry: %+v, %v; want the cancelled job", again, err)
	}
	if after := e.events(tenantA, j.ID); len(after) != len(evs) {
		t.Fatalf("repeating the retry added events: %v", eventTypes(after))
	}

	// The cancel replaces only a requeue: a non-retryable error still ends
	// FAILED, and a spent budget still ends DEAD.
	for _, tc := range []struct {
		queue    string
		max      int32
		err      store.JobError
		want     store.JobState
		terminal []store.EventType
	}{
		{"nonretryable", 5, store.JobError{Code: "invalid_card", Message: "bad card"}, store.JobStateFailed, []store.EventType{store.EventFailed}},
		{"spent", 1, errTransient, store.JobStateDead, []store.EventType{store.EventRunFailed, store.EventDead}},
	} {
		sp := spec(tc.queue)
		sp.MaxAttempts = tc.max
		j := e.mustCreate(tenantA, sp, base)
		c := e.mustClaim(tenantA, workerA, tc.queue, j.ID, at(time.Second))
		if _, err := e.requestCancel(e.s, tenantA, j.ID, at(2*time.Second)); err != nil {
			t.Fatal(err)
		}
		if got := e.retry(tenantA, c.Token, tc.err, 0, at(3*time.Second)); got.State != tc.want {
			t.Errorf("%s: a cancel-requested job failed with %+v ended %s, want %s", tc.queue, tc.err, got.State, tc.want)
		}
		want := append([]store.EventType{store.EventQueued, store.EventLeased, store.EventCancelRequested}, tc.terminal...)
		wantEvents(t, e.events(tenantA, j.ID), want...)
	}
}
