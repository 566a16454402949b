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
