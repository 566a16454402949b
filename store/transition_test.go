package store

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func leasedJob(attempts, maxAttempts int32) *Job {
	return &Job{
		Tenant: "t", ID: "job-1", Queue: "q", State: JobStateLeased,
		Attempts: attempts, MaxAttempts: maxAttempts,
		LeaseOwner: "w1", LeaseGeneration: 3, LeaseExpiresAt: t0.Add(30 * time.Second),
		AvailableAt: t0.Add(-time.Minute),
	}
}

var tok = LeaseToken{JobID: "job-1", Generation: 3, WorkerID: "w1"}

func types(evs []NewEvent) []EventType {
	out := make([]EventType, len(evs))
	for i, e := range evs {
		out[i] = e.Type
	}
	return out
}

func data(t *testing.T, e NewEvent) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %s data %q: %v", e.Type, e.Data, err)
	}
	return m
}

func TestDecisions(t *testing.T) {
	policy := DefaultQueuePolicy("q").Retry
	policy.JitterFraction = 0
	transient := JobError{Code: "http_503", Message: "busy", Retryable: true}
	cancelled := leasedJob(1, 5)
	cancelled.CancelRequested = true
	deadline := leasedJob(1, 5)
	deadline.RetryDeadline = t0.Add(500 * time.Millisecond)

	cases := []struct {
		name        string
		t           Transition
		state       JobState
		outcome     AttemptOutcome
		events      []EventType
		availableAt time.Time
		refund      bool
	}{
		{"complete", DecideComplete(Held{Job: leasedJob(1, 5), Now: t0}, tok, []byte("r")),
			JobStateSucceeded, AttemptSucceeded, []EventType{EventSucceeded}, time.Time{}, false},
		{"retryable failure with budget left", DecideFailure(policy, Held{Job: leasedJob(1, 5), Now: t0}, tok, transient, 0, 0),
			JobStateQueued, AttemptFailed, []EventType{EventRunFailed}, t0.Add(time.Second), false},
		{"retry-after longer than the backoff", DecideFailure(policy, Held{Job: leasedJob(1, 5), Now: t0}, tok, transient, time.Minute, 0),
			JobStateQueued, AttemptFailed, []EventType{EventRunFailed}, t0.Add(time.Minute), false},
		{"non-retryable failure", DecideFailure(policy, Held{Job: leasedJob(1, 5), Now: t0}, tok, JobError{Code: "bad"}, 0, 0),
			JobStateFailed, AttemptFailed, []EventType{EventFailed}, time.Time{}, false},
		{"last attempt failed", DecideFailure(policy, Held{Job: leasedJob(5, 5), Now: t0}, tok, transient, 0, 0),
			JobStateDead, AttemptFailed, []EventType{EventRunFailed, EventDead}, time.Time{}, false},
		{"retry deadline spent", DecideFailure(policy, Held{Job: deadline, Now: t0}, tok, transient, 0, 0),
			JobStateDead, AttemptFailed, []EventType{EventRunFailed, EventDead}, time.Time{}, false},
		{"retryable failure of a cancel-requested job", DecideFailure(policy, Held{Job: cancelled, Now: t0}, tok, transient, 0, 0),
			JobStateCancelled, AttemptFailed, []EventType{EventRunFailed, EventCancelled}, time.Time{}, false},
		{"holder cancel", DecideCancelByHolder(tok, "stop"),
			JobStateCancelled, AttemptCancelled, []EventType{EventCancelled}, time.Time{}, false},
		{"release", DecideRelease(Held{Job: leasedJob(1, 5), Now: t0}, tok),
			JobStateQueued, AttemptReleased, []EventType{EventReleased}, t0, true},
		{"release of a cancel-requested job", DecideRelease(Held{Job: cancelled, Now: t0}, tok),
			JobStateCancelled, AttemptCancelled, []EventType{EventCancelled}, time.Time{}, false},
		{"expiry with budget left", DecideExpiry(Held{Job: leasedJob(1, 5), Now: t0}),
			JobStateQueued, AttemptLeaseExpired, []EventType{EventLeaseExpired}, time.Time{}, false},
		{"expiry with the budget spent", DecideExpiry(Held{Job: leasedJob(5, 5), Now: t0}),
			JobStateDead, AttemptLeaseExpired, []EventType{EventLeaseExpired, EventRunFailed, EventDead}, time.Time{}, false},
		{"expiry of a cancel-requested job", DecideExpiry(Held{Job: cancelled, Now: t0}),
			JobStateCancelled, AttemptLeaseExpired, []EventType{EventCancelled}, time.Time{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.t.State != c.state || c.t.Outcome != c.outcome || c.t.Refund != c.refund {
				t.Errorf("decided %s/%s refund %v, want %s/%s refund %v", c.t.State, c.t.Outcome, c.t.Refund, c.state, c.outcome, c.refund)
			}
			if got := types(c.t.Events); !slices.Equal(got, c.events) {
				t.Errorf("events %v, want %v", got, c.events)
			}
			if !c.t.AvailableAt.Equal(c.availableAt) {
				t.Errorf("available at %s, want %s", c.t.AvailableAt, c.availableAt)
			}
			terminal := 0
			for _, e := range c.t.Events {
				data(t, e) // every event's data is a JSON object
				switch e.Type {
				case EventSucceeded, EventFailed, EventCancelled, EventDead:
					terminal++
				default:
					// not terminal
				}
			}
			if want := map[bool]int{true: 1, false: 0}[c.state.Terminal()]; terminal != want {
				t.Errorf("%d terminal events for state %s", terminal, c.state)
			}
		})
	}
}

func TestDecisionEventData(t *testing.T) {
	policy := DefaultQueuePolicy("q").Retry
	e := JobError{Code: "http_503", Message: "busy", Retryable: true}
	tr := DecideFailure(policy, Held{Job: leasedJob(5, 5), Now: t0}, tok, e, 0, 0)
	rf := data(t, tr.Events[0])
	if rf["worker_id"] != "w1" || rf["lease_generation"] != 3.0 || rf["attempt"] != 5.0 || rf["error_code"] != "http_503" || rf["retryable"] != true {
		t.Errorf("run_failed data %v", rf)
	}
	if d := data(t, tr.Events[1]); d["reason"] != "attempts exhausted" || d["max_attempts"] != 5.0 {
		t.Errorf("dead data %v", d)
	}
	if tr.LastError == nil || *tr.LastError != e || tr.AttemptError == nil || *tr.AttemptError != e {
		t.Errorf("errors %+v %+v, want %+v", tr.LastError, tr.AttemptError, e)
	}
	ex := DecideExpiry(Held{Job: leasedJob(5, 5), Now: t0})
	if ex.LastError == nil || ex.LastError.Code != ErrorCodeLeaseExpired {
		t.Errorf("expiry last error %+v", ex.LastError)
	}
}

func TestApplyMovesTheJob(t *testing.T) {
	j := leasedJob(2, 5)
	got := DecideRelease(Held{Job: j, Now: t0}, tok).Apply(j, t0)
	if got.State != JobStateQueued || got.Attempts != 1 || !got.LeaseExpiresAt.IsZero() || !got.AvailableAt.Equal(t0) || !got.FinishedAt.IsZero() {
		t.Errorf("released job %+v", got)
	}
	if j.State != JobStateLeased || j.Attempts != 2 {
		t.Errorf("Apply changed its input: %+v", j)
	}
	done := DecideComplete(Held{Job: j, Now: t0}, tok, []byte("r")).Apply(j, t0)
	if done.State != JobStateSucceeded || string(done.Result) != "r" || !done.FinishedAt.Equal(t0) || done.LeaseOwner != "w1" {
		t.Errorf("completed job %+v", done)
	}
}

func TestAnswerUnheld(t *testing.T) {
	succeeded := leasedJob(1, 5)
	succeeded.State, succeeded.Result = JobStateSucceeded, []byte("r")
	cancelled := leasedJob(1, 5)
	cancelled.State = JobStateCancelled
	requeued := leasedJob(1, 5)
	requeued.State = JobStateQueued
	att := func(o AttemptOutcome, e *JobError) *Attempt {
		return &Attempt{JobID: "job-1", LeaseGeneration: 3, WorkerID: "w1", Outcome: o, Error: e}
	}
	failure := &JobError{Code: "http_503", Message: "busy"}
	rep := func(kind ReportKind) Report {
		return Report{Kind: kind, Tenant: "t", Token: tok, Result: []byte("r"), Error: *failure}
	}
	otherWorker := att(AttemptSucceeded, nil)
	otherWorker.WorkerID = "w2"
	cases := []struct {
		name    string
		r       Report
		job     *Job
		attempt *Attempt
		want    error // nil: the job comes back
	}{
		{"no such job", rep(ReportComplete), nil, nil, ErrNotFound},
		{"repeated complete", rep(ReportComplete), succeeded, att(AttemptSucceeded, nil), nil},
		{"repeated complete with another result", Report{Kind: ReportComplete, Tenant: "t", Token: tok, Result: []byte("x")}, succeeded, att(AttemptSucceeded, nil), ErrReportMismatch},
		{"complete by another worker's attempt", rep(ReportComplete), succeeded, otherWorker, ErrLeaseLost},
		{"complete after the lease expired", rep(ReportComplete), requeued, att(AttemptLeaseExpired, nil), ErrLeaseLost},
		{"repeated holder cancel", rep(ReportCancel), cancelled, att(AttemptCancelled, nil), nil},
		{"repeated retry of a requeued job", rep(ReportRetry), requeued, att(AttemptFailed, failure), nil},
		{"repeated retry with another error", Report{Kind: ReportRetry, Tenant: "t", Token: tok, Error: JobError{Code: "other"}}, requeued, att(AttemptFailed, failure), ErrReportMismatch},
		{"release is never a repeat", rep(ReportRelease), requeued, att(AttemptReleased, nil), ErrLeaseLost},
		{"no attempt of that generation", rep(ReportComplete), succeeded, nil, ErrLeaseLost},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := AnswerUnheld(c.r, c.job, c.attempt)
			switch {
			case c.want == nil && (got.Err != nil || got.Job != c.job):
				t.Errorf("got %+v, want the job back", got)
			case c.want != nil && !errors.Is(got.Err, c.want):
				t.Errorf("got %v, want %v", got.Err, c.want)
			}
		})
	}
	if got := AnswerUnheld(Report{Kind: ReportRenew, Tenant: "t", Token: tok}, requeued, nil); got.Err != nil || got.Renew.Status != RenewLost {
		t.Errorf("renew of a lost lease: %+v", got)
	}
}

// TestAnswerUnheldRenewAfterOwnReport: a heartbeat that races the
// holder's own report (it was sent before the report's answer came back)
// is answered RenewReported, not RenewLost: "lost" means expired,
// reclaimed or ended by someone else.
func TestAnswerUnheldRenewAfterOwnReport(t *testing.T) {
	succeeded := &Job{ID: tok.JobID, State: JobStateSucceeded, LeaseOwner: tok.WorkerID, LeaseGeneration: tok.Generation}
	requeued := &Job{ID: tok.JobID, State: JobStateQueued, LeaseOwner: tok.WorkerID, LeaseGeneration: tok.Generation}
	reclaimed := &Job{ID: tok.JobID, State: JobStateLeased, LeaseOwner: "other", LeaseGeneration: tok.Generation + 1}
	att := func(o AttemptOutcome) *Attempt {
		return &Attempt{JobID: tok.JobID, LeaseGeneration: tok.Generation, WorkerID: tok.WorkerID, Outcome: o}
	}
	renew := Report{Kind: ReportRenew, Tenant: "t", Token: tok}
	for _, c := range []struct {
		name    string
		job     *Job
		attempt *Attempt
		want    RenewStatus
	}{
		{"after its own complete", succeeded, att(AttemptSucceeded), RenewReported},
		{"after its own retry", requeued, att(AttemptFailed), RenewReported},
		{"after its own cancel", &Job{ID: tok.JobID, State: JobStateCancelled}, att(AttemptCancelled), RenewReported},
		{"after its own release, the job leased again", reclaimed, att(AttemptReleased), RenewReported},
		{"after the lease expired", requeued, att(AttemptLeaseExpired), RenewLost},
		{"after it expired and another worker took it", reclaimed, att(AttemptLeaseExpired), RenewLost},
		{"another worker's attempt of that generation", succeeded, &Attempt{JobID: tok.JobID, LeaseGeneration: tok.Generation, WorkerID: "other", Outcome: AttemptSucceeded}, RenewLost},
		{"no attempt of that generation", succeeded, nil, RenewLost},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := AnswerUnheld(renew, c.job, c.attempt)
			if got.Err != nil || got.Renew.Status != c.want || got.Renew.Token != tok {
				t.Errorf("got %+v, want %s", got, c.want)
			}
		})
	}
}

func TestValidateReport(t *testing.T) {
	good := Report{Kind: ReportComplete, Tenant: "t", Token: tok}
	if err := ValidateReport(good); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]Report{
		"unknown kind":         {Kind: 99, Tenant: "t", Token: tok},
		"no tenant":            {Kind: ReportComplete, Token: tok},
		"zero generation":      {Kind: ReportComplete, Tenant: "t", Token: LeaseToken{JobID: "j", WorkerID: "w"}},
		"oversized result":     {Kind: ReportComplete, Tenant: "t", Token: tok, Result: make([]byte, PayloadMaxBytes+1)},
		"NUL in error code":    {Kind: ReportRetry, Tenant: "t", Token: tok, Error: JobError{Code: "a\x00"}},
		"negative retry-after": {Kind: ReportRetry, Tenant: "t", Token: tok, RetryAfter: -time.Second},
		"lease too short":      {Kind: ReportRenew, Tenant: "t", Token: tok, LeaseDuration: time.Millisecond},
	} {
		if err := ValidateReport(r); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want invalid", name, err)
		}
	}
}
