package store

import "time"

// Held is a leased job as a report's fence read it: the current,
// unexpired lease of the report's token, locked for the report's
// transaction. It is what the decisions below need; engines fill it from
// the row they locked.
type Held struct {
	Job          *Job
	CancelReason string
	// EventSeq is the job's newest event sequence: a transition's events
	// take the sequences after it.
	EventSeq int64
	// Now is the instant the report is judged at (the caller's Now, or the
	// store's clock).
	Now time.Time
	// PrevRetryDelay is the delay the job's previous failed attempt was
	// retried after (its attempt record's; 0 for none), for decorrelated
	// backoff.
	PrevRetryDelay time.Duration
	// LeasedUntil and LeasedSeq are the lease's claim: the expiry it gave
	// and its LEASED event's sequence (zero for a lease taken before
	// migration 013), kept in the attempt's record.
	LeasedUntil time.Time
	LeasedSeq   int64
	// AttemptLogLen is how many records the row's attempt log holds.
	AttemptLogLen int
}

// Transition is one decided move of a leased job out of its lease: the new
// state, how the holder's attempt ends and the events that say so. The
// decisions (DecideComplete, DecideFailure, DecideCancelByHolder,
// DecideRelease, DecideExpiry) make them; the engines apply them in SQL,
// many at once, and decide nothing themselves.
type Transition struct {
	// State is the job's new state.
	State JobState
	// AvailableAt is when a job going back to QUEUED may run again; zero
	// for every other state.
	AvailableAt time.Time
	// Refund gives the attempt back (attempts - 1): a release spends none.
	Refund bool
	// Result is stored when State is SUCCEEDED.
	Result []byte
	// LastError, when set, becomes the job's last error.
	LastError *JobError
	// Outcome ends the attempt row of the holder's generation, with
	// AttemptError as its error.
	Outcome      AttemptOutcome
	AttemptError *JobError
	// RetryDelay is the backoff of a failed attempt retried (QUEUED),
	// kept in its attempt record; 0 otherwise.
	RetryDelay time.Duration
	// CancelReason and CancelBy are kept in the attempt's record when the
	// transition cancels the job (see AttemptRecord).
	CancelReason string
	CancelBy     string
	// Events are appended in order after the job's newest event. Engines
	// do not store them: the attempt's record holds them (AttemptEndEvents
	// makes the same ones from it).
	Events []NewEvent
}

// NewEvent is an event a transition appends. Data is a JSON object with
// the details, never a payload or a result.
type NewEvent struct {
	Type EventType
	Data string
}

// Requeued reports whether the transition puts the job back in its queue,
// so that dispatchers should be woken.
func (t Transition) Requeued() bool { return t.State == JobStateQueued }

// Finished reports whether the transition ends the job.
func (t Transition) Finished() bool { return t.State.Terminal() }

// Apply returns a copy of job as it is after the transition at now, with
// its newest event sequence moved from seq: how an engine answers without
// reading the row back.
func (t Transition) Apply(job *Job, now time.Time) *Job {
	j := *job
	j.State = t.State
	j.LeaseExpiresAt = time.Time{}
	if t.Refund {
		j.Attempts--
	}
	if !t.AvailableAt.IsZero() {
		j.AvailableAt = t.AvailableAt
	}
	if t.State.Terminal() {
		j.FinishedAt = now
	}
	if t.State == JobStateSucceeded {
		j.Result = t.Result
	}
	if t.LastError != nil {
		e := *t.LastError
		j.LastError = &e
	}
	return &j
}

// EventData encodes event details as a JSON object from key, value pairs,
// the way every event of the store is encoded.
func EventData(kv ...any) string { return eventJSON(kv...) }

// holder is the event data naming the lease that acted.
func holder(tok LeaseToken, kv ...any) []any {
	return append([]any{"worker_id", tok.WorkerID, "lease_generation", tok.Generation}, kv...)
}

// withError adds a worker error's fields to event data.
func withError(kv []any, e JobError) []any {
	return append(kv, "error_code", e.Code, "error_message", e.Message, "retryable", e.Retryable)
}

// deadEvent is the DEAD event: with attempts left, it was the retry
// deadline that ended the job.
func deadEvent(attempts, maxAttempts int32) NewEvent {
	reason := "attempts exhausted"
	if attempts < maxAttempts {
		reason = "retry deadline exceeded"
	}
	return NewEvent{Type: EventDead, Data: eventJSON("reason", reason, "attempts", attempts, "max_attempts", maxAttempts)}
}

// DecideComplete is a holder's success: SUCCEEDED with its result.
func DecideComplete(h Held, tok LeaseToken, result []byte) Transition {
	return Transition{
		State:   JobStateSucceeded,
		Result:  result,
		Outcome: AttemptSucceeded,
		Events:  []NewEvent{{Type: EventSucceeded, Data: eventJSON(holder(tok, "attempt", h.Job.Attempts)...)}},
	}
}

// DecideFailure is a holder's failed attempt under the queue's retry
// policy (see DecideRetry): QUEUED at the backoff, FAILED, or DEAD when
// the attempts or the retry deadline are spent. A job whose cancellation
// was requested is never queued again: where the decision is QUEUED it
// ends CANCELLED (RUN_FAILED, then CANCELLED). rnd is the jitter factor.
func DecideFailure(policy RetryPolicy, h Held, tok LeaseToken, e JobError, retryAfter time.Duration, rnd float64) Transition {
	j := h.Job
	d := DecideRetry(policy, e, j.Attempts, j.MaxAttempts, j.RetryDeadline, h.Now, h.PrevRetryDelay, retryAfter, rnd)
	runFailed := withError(holder(tok, "attempt", j.Attempts), e)
	t := Transition{State: d.State, LastError: &e, Outcome: AttemptFailed, AttemptError: &e}
	switch {
	case d.State == JobStateQueued && j.CancelRequested:
		t.State, t.CancelReason = JobStateCancelled, h.CancelReason
		t.Events = []NewEvent{
			{Type: EventRunFailed, Data: eventJSON(runFailed...)},
			{Type: EventCancelled, Data: eventJSON(holder(tok, "reason", h.CancelReason, "by", "retry")...)},
		}
	case d.State == JobStateQueued:
		t.AvailableAt, t.RetryDelay = d.AvailableAt.UTC().Truncate(time.Microsecond), d.Delay
		t.Events = []NewEvent{{Type: EventRunFailed, Data: eventJSON(append(runFailed, "available_at", t.AvailableAt)...)}}
	case d.State == JobStateFailed:
		t.Events = []NewEvent{{Type: EventFailed, Data: eventJSON(runFailed...)}}
	default: // dead
		t.Events = []NewEvent{{Type: EventRunFailed, Data: eventJSON(runFailed...)}, deadEvent(j.Attempts, j.MaxAttempts)}
	}
	return t
}

// DecideCancelByHolder is the holder ending its attempt as cancelled,
// usually to acknowledge a cancel request: CANCELLED.
func DecideCancelByHolder(tok LeaseToken, reason string) Transition {
	return Transition{
		State:        JobStateCancelled,
		Outcome:      AttemptCancelled,
		CancelReason: reason,
		CancelBy:     "holder",
		Events:       []NewEvent{{Type: EventCancelled, Data: eventJSON(holder(tok, "reason", reason, "by", "holder")...)}},
	}
}

// DecideRelease gives the job back without spending the attempt: QUEUED,
// available at once. A job whose cancellation was requested ends
// CANCELLED instead, as if the holder had acknowledged the cancel.
func DecideRelease(h Held, tok LeaseToken) Transition {
	if h.Job.CancelRequested {
		return Transition{
			State:    JobStateCancelled,
			Outcome:  AttemptCancelled,
			CancelBy: "release",
			Events:   []NewEvent{{Type: EventCancelled, Data: eventJSON(holder(tok, "by", "release")...)}},
		}
	}
	return Transition{
		State:       JobStateQueued,
		AvailableAt: h.Now,
		Refund:      true,
		Outcome:     AttemptReleased,
		Events:      []NewEvent{{Type: EventReleased, Data: eventJSON(holder(tok)...)}},
	}
}

// LeaseExpiredError is the error recorded (as the job's last error and in
// its RUN_FAILED event) when a lease expires with no report and the job's
// budget is spent.
var LeaseExpiredError = JobError{Code: ErrorCodeLeaseExpired, Message: ErrorMessageLeaseExpired, Retryable: true}

// DecideExpiry is what becomes of a job whose lease expired with no
// report from its holder (h.Job is the job as it was leased; h.Now is
// past its expiry). No process has to release a lease it can no longer
// use; this decision is the recovery:
//
//   - cancel requested: CANCELLED (one CANCELLED event), since the holder
//     never acknowledged;
//   - budget spent (attempts >= max attempts, or the retry deadline is
//     before now): DEAD, with LEASE_EXPIRED, RUN_FAILED (LeaseExpiredError)
//     and DEAD events. This is how a job whose worker crashes every time
//     (and so never reports) reaches the dead-letter queue instead of
//     being claimed forever;
//   - otherwise QUEUED, with a LEASE_EXPIRED event, in its old place in
//     the queue (available_at unchanged): it was due already, and
//     recovery should not send it behind newer jobs. The attempt stays
//     spent.
//
// In every case the expired attempt ends as lease_expired.
func DecideExpiry(h Held) Transition {
	j := h.Job
	tok := LeaseToken{JobID: j.ID, Generation: j.LeaseGeneration, WorkerID: j.LeaseOwner}
	switch {
	case j.CancelRequested:
		return Transition{
			State:        JobStateCancelled,
			Outcome:      AttemptLeaseExpired,
			CancelReason: h.CancelReason,
			Events: []NewEvent{{Type: EventCancelled, Data: eventJSON(holder(tok,
				"reason", h.CancelReason, "lease_expired", true)...)}},
		}
	case j.Attempts >= j.MaxAttempts || (!j.RetryDeadline.IsZero() && j.RetryDeadline.Before(h.Now)):
		e := LeaseExpiredError
		return Transition{
			State:     JobStateDead,
			LastError: &e,
			Outcome:   AttemptLeaseExpired,
			Events: []NewEvent{
				{Type: EventLeaseExpired, Data: eventJSON(holder(tok)...)},
				{Type: EventRunFailed, Data: eventJSON(withError(holder(tok, "attempt", j.Attempts), e)...)},
				deadEvent(j.Attempts, j.MaxAttempts),
			},
		}
	default:
		return Transition{
			State:   JobStateQueued,
			Outcome: AttemptLeaseExpired,
			Events:  []NewEvent{{Type: EventLeaseExpired, Data: eventJSON(holder(tok)...)}},
		}
	}
}

// DecideCreate is the job a create makes of spec under the queue's policy
// at now: QUEUED, available at now (or RunAfter later, or at RunAt), with
// the job's own attempt budget or the queue's, and a retry deadline when
// the queue sets a time budget; and its QUEUED event (sequence 1). Engines
// insert exactly this job.
func DecideCreate(policy QueuePolicy, tenant, id string, spec JobSpec, now time.Time) (*Job, NewEvent) {
	now = now.UTC().Truncate(time.Microsecond)
	j := &Job{
		Tenant: tenant, ID: id, Queue: spec.Queue, Kind: spec.Kind, Payload: spec.Payload,
		Metadata: spec.Metadata, Priority: spec.Priority, State: JobStateQueued,
		MaxAttempts: spec.MaxAttempts, CreatedAt: now, Dependency: spec.Dependency,
		ConcurrencyKey: spec.ConcurrencyKey,
	}
	if j.MaxAttempts == 0 {
		j.MaxAttempts = policy.Retry.MaxAttempts
	}
	if j.Dependency == "" {
		j.Dependency = policy.DefaultDependency
	}
	j.AvailableAt = spec.AvailableFrom(now)
	if d := policy.Retry.TotalRetryDeadline; d > 0 {
		j.RetryDeadline = now.Add(d)
	}
	// Empty and absent read back the same (nil) on both engines.
	if len(j.Metadata) == 0 {
		j.Metadata = nil
	}
	if len(j.Payload) == 0 {
		j.Payload = nil
	}
	return j, NewEvent{Type: EventQueued, Data: eventJSON("queue", j.Queue, "available_at", j.AvailableAt)}
}
