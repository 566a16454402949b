package storetest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// terminalTests cover contract point 6: a terminal state is final, with
// exactly one terminal event, except that the generation which ended the
// job gets the same answer when it repeats its report (its response was
// lost).
func terminalTests() group {
	return group{name: "Terminal", cases: []testCase{
		{"a terminal job never changes state again", testTerminalIsFinal},
	}}
}

// terminalCase drives a fresh job to one terminal state and says which
// report, repeated by the same token, must be answered as a replay.
type terminalCase struct {
	name  string
	state store.JobState
	// finish returns the token of the generation that ended the job and the
	// report to repeat (nil when no lease ended it).
	finish func(e *env, queue string) (store.LeaseToken, func(now time.Time) (*store.Job, error))
}

var terminalCases = []terminalCase{
	{"succeeded", store.JobStateSucceeded, func(e *env, queue string) (store.LeaseToken, func(time.Time) (*store.Job, error)) {
		c := e.mustClaim(tenantA, workerA, queue, "", at(time.Second))
		report := func(now time.Time) (*store.Job, error) {
			return e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c.Token, Result: []byte(`"ok"`), Now: now})
		}
		if _, err := report(at(2 * time.Second)); err != nil {
			e.t.Fatal(err)
		}
		return c.Token, report
	}},
	{"failed", store.JobStateFailed, func(e *env, queue string) (store.LeaseToken, func(time.Time) (*store.Job, error)) {
		c := e.mustClaim(tenantA, workerA, queue, "", at(time.Second))
		report := func(now time.Time) (*store.Job, error) {
			return e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: c.Token, Error: store.JobError{Code: "bad_input", Retryable: false}, Now: now})
		}
		if _, err := report(at(2 * time.Second)); err != nil {
			e.t.Fatal(err)
		}
		return c.Token, report
	}},
	{"dead", store.JobStateDead, func(e *env, queue string) (store.LeaseToken, func(time.Time) (*store.Job, error)) {
		c := e.mustClaim(tenantA, workerA, queue, "", at(time.Second))
		report := func(now time.Time) (*store.Job, error) {
			return e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: c.Token, Error: errTransient, Now: now})
		}
		if _, err := report(at(2 * time.Second)); err != nil {
			e.t.Fatal(err)
		}
		return c.Token, report
	}},
	{"cancelled by the holder", store.JobStateCancelled, func(e *env, queue string) (store.LeaseToken, func(time.Time) (*store.Job, error)) {
		c := e.mustClaim(tenantA, workerA, queue, "", at(time.Second))
		report := func(now time.Time) (*store.Job, error) {
			return e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: c.Token, Reason: "stop", Now: now})
		}
		if _, err := report(at(2 * time.Second)); err != nil {
			e.t.Fatal(err)
		}
		return c.Token, report
	}},
	{"cancelled while queued", store.JobStateCancelled, func(e *env, queue string) (store.LeaseToken, func(time.Time) (*store.Job, error)) {
		jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Queue: queue, Limit: 10})
		if _, err := e.requestCancel(e.s, tenantA, jobs[0].ID, at(2*time.Second)); err != nil {
			e.t.Fatal(err)
		}
		// No lease ever existed; a made-up first-generation token.
		return store.LeaseToken{JobID: jobs[0].ID, Generation: 1, WorkerID: workerA}, nil
	}},
}

func testTerminalIsFinal(t *testing.T, h Harness) {
	for _, tc := range terminalCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, h)
			sp := spec("final")
			sp.MaxAttempts = 1
			j := e.mustCreate(tenantA, sp, base)
			tok, replay := tc.finish(e, "final")
			if tok.JobID != j.ID {
				t.Fatalf("finished job %s, want %s", tok.JobID, j.ID)
			}
			before := e.snap(tenantA, j.ID)
			if before.job.State != tc.state || before.job.FinishedAt.IsZero() {
				t.Fatalf("job is %s (finished %v), want %s", before.job.State, before.job.FinishedAt, tc.state)
			}
			// Inside the original lease window, so only finality refuses.
			now := at(3 * time.Second)

			if replay != nil {
				got, err := replay(now)
				if err != nil {
					t.Fatalf("the finishing generation repeating its report: %v; want the same outcome", err)
				}
				if got.State != tc.state || !sameTime(got.FinishedAt, before.job.FinishedAt) {
					t.Fatalf("repeated report answered %s finished %v, want %s finished %v", got.State, got.FinishedAt, tc.state, before.job.FinishedAt)
				}
				e.unchanged(tenantA, j.ID, before, "after the repeated report")
			}

			errs := e.leaseBoundCalls(e.s, tenantA, tok, now)
			for name, err := range errs {
				if replay != nil && repeats(tc, name) {
					continue // covered above
				}
				wantRejected(t, err, tc.name+" job: "+name)
			}
			_, err := e.requestCancel(e.s, tenantA, j.ID, now)
			wantErr(t, err, store.ErrAlreadyFinal, tc.name+" job: request cancel")
			e.claimNothing(tenantA, "final", at(48*time.Hour), tc.name+" job")
			e.unchanged(tenantA, j.ID, before, "after every later transition")
			evs := e.events(tenantA, j.ID)
			if n := terminalEvents(evs); n != 1 {
				t.Fatalf("%d terminal events: %v", n, eventTypes(evs))
			}
		})
	}
}

// repeats reports whether leaseBoundCalls' call name is the report that
// ended the job in tc, which must be answered as a replay, not refused.
func repeats(tc terminalCase, name string) bool {
	switch tc.name {
	case "succeeded":
		return name == "complete"
	case "failed", "dead":
		return name == "retry"
	case "cancelled by the holder":
		return name == "cancel by holder"
	}
	return false
}
