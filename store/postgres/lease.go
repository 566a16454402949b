package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// errNoLease is lockLease's answer when the token is not the current lease;
// diagnose turns it into the caller's answer.
var errNoLease = errors.New("no current lease")

// lockLease is the fencing compare-and-set shared by every lease-bound call:
// it locks the job only if tok is its current, unexpired lease, and returns
// the transaction's instant.
func lockLease(ctx context.Context, tx pgx.Tx, tenant string, tok store.LeaseToken, now time.Time) (*jobRecord, time.Time, error) {
	var at time.Time
	rec, err := scanJob(tx.QueryRow(ctx, qLockLease, tenant, tok.JobID, tok.WorkerID, tok.Generation, nowArg(now)), &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, time.Time{}, errNoLease
	}
	if err != nil {
		return nil, time.Time{}, err
	}
	return rec, at.UTC(), nil
}

// replayMatch says whether a job that is no longer leased to tok is the
// result of this very call made earlier by tok's generation (its response
// was lost), given the attempt row of that generation.
type replayMatch func(job *store.Job, attempt *store.Attempt) bool

// diagnose answers a lease-bound call whose compare-and-set matched nothing:
// ErrNotFound when the tenant has no such job, the job itself when match
// recognises a repeated terminal report, ErrLeaseLost otherwise.
func diagnose(ctx context.Context, tx pgx.Tx, tenant string, tok store.LeaseToken, match replayMatch) (*store.Job, error) {
	job, err := getJob(ctx, tx, tenant, tok.JobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", tok.JobID, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if match != nil && job.State.Terminal() && job.LeaseOwner == tok.WorkerID && job.LeaseGeneration == tok.Generation {
		attempt, err := scanAttempt(tx.QueryRow(ctx, qGetAttempt, tenant, tok.JobID, tok.Generation))
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, err
		}
		if attempt != nil && attempt.WorkerID == tok.WorkerID && match(job, attempt) {
			return job, nil
		}
	}
	return nil, fmt.Errorf("job %s generation %d: %w", tok.JobID, tok.Generation, store.ErrLeaseLost)
}

// leave is how a lease-bound call moves its job out of LEASED.
type leave struct {
	state       store.JobState
	availableAt time.Time // zero: unchanged
	refund      bool      // give the attempt back (attempts - 1)
	result      []byte
	lastError   *store.JobError
	events      []event
	outcome     store.AttemptOutcome
}

// leaveLease applies l to the job locked by lockLease (locked is the row
// lockLease returned): state, its events and the close of tok's attempt, in
// the caller's transaction. The statements are pipelined in one batch, one
// round trip: the row lock makes the event sequences that qLeaveLease
// reserves known in advance (locked.lastEventSeq + 1...), and the latest
// checkpoint is not changed by any of them.
func leaveLease(ctx context.Context, tx pgx.Tx, tenant string, tok store.LeaseToken, locked *jobRecord, now time.Time, l leave) (*store.Job, error) {
	var finished any
	if l.state.Terminal() {
		finished = now
	}
	refund := 0
	if l.refund {
		refund = 1
	}
	var code, message, retryable any
	if e := l.lastError; e != nil {
		code, message, retryable = e.Code, e.Message, e.Retryable
	}
	b := &pgx.Batch{}
	b.Queue(qLeaveLease, tenant, tok.JobID, string(l.state), timeArg(l.availableAt),
		finished, refund, l.result, code, message, len(l.events), retryable)
	for i, e := range l.events {
		b.Queue(qInsertEvent, tenant, tok.JobID, locked.lastEventSeq+1+int64(i), string(e.typ), now, e.json())
	}
	b.Queue(qCloseAttempt, tenant, tok.JobID, tok.Generation, string(l.outcome), now, code, message, retryable)
	b.Queue(qLatestCheckpoint, tenant, tok.JobID)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rec, err := scanJob(br.QueryRow())
	if err != nil {
		return nil, err
	}
	if want := locked.lastEventSeq + int64(len(l.events)); rec.lastEventSeq != want {
		// Impossible under the row lock; refuse rather than commit events
		// with the wrong sequences.
		return nil, fmt.Errorf("job %s: event sequence %d, want %d", tok.JobID, rec.lastEventSeq, want)
	}
	for range l.events {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	cp, err := scanCheckpoint(br.QueryRow())
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		rec.job.Checkpoint = nil
	case err != nil:
		return nil, err
	default:
		rec.job.Checkpoint = cp
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	return rec.job, nil
}

// attemptData is holderData with the attempt number.
func attemptData(tok store.LeaseToken, job *store.Job) map[string]any {
	data := holderData(tok)
	data["attempt"] = job.Attempts
	return data
}

// deadData says why a job is dead: with attempts left, it was the retry
// deadline.
func deadData(attempts, maxAttempts int32) map[string]any {
	reason := "attempts exhausted"
	if attempts < maxAttempts {
		reason = "retry deadline exceeded"
	}
	return map[string]any{"reason": reason, "attempts": attempts, "max_attempts": maxAttempts}
}

// holderData is the event data naming the lease that acted. Event data
// keys are the same on both engines.
func holderData(tok store.LeaseToken) map[string]any {
	return map[string]any{"worker_id": tok.WorkerID, "lease_generation": tok.Generation}
}

// Complete implements store.Store.
func (s *Store) Complete(ctx context.Context, p store.CompleteParams) (*store.Job, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, err
	}
	if err := store.ValidateBlob("result", p.Result); err != nil {
		return nil, err
	}
	var out *store.Job
	err := s.withTx(ctx, "complete", func(tx pgx.Tx) error {
		rec, now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			out, err = diagnose(ctx, tx, p.Tenant, p.Token, func(j *store.Job, a *store.Attempt) bool {
				return j.State == store.JobStateSucceeded && a.Outcome == store.AttemptSucceeded
			})
			return err
		}
		if err != nil {
			return err
		}
		out, err = leaveLease(ctx, tx, p.Tenant, p.Token, rec, now, leave{
			state:   store.JobStateSucceeded,
			result:  p.Result,
			events:  []event{{typ: store.EventSucceeded, data: attemptData(p.Token, rec.job)}},
			outcome: store.AttemptSucceeded,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Retry implements store.Store. The decision is store.DecideRetry with the
// queue's policy, the job's budget and deadline, and the injected random
// source. A job whose cancellation was requested is not queued again: when
// the decision is to retry, it ends CANCELLED (RUN_FAILED then CANCELLED).
// A repeated Retry by a generation whose attempt already failed returns the
// job as it is now.
func (s *Store) Retry(ctx context.Context, p store.RetryParams) (*store.Job, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, err
	}
	if err := store.ValidateJobError(p.Error); err != nil {
		return nil, err
	}
	if err := store.ValidateRetryAfter(p.RetryAfter); err != nil {
		return nil, err
	}
	var out *store.Job
	err := s.withTx(ctx, "retry", func(tx pgx.Tx) error {
		rec, now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			out, err = diagnose(ctx, tx, p.Tenant, p.Token, nil)
			// A retried attempt may have left the job QUEUED, leased by a
			// later generation or terminal: the attempt row of the token's
			// generation, not the job's state, tells a repeat.
			if !errors.Is(err, store.ErrLeaseLost) {
				return err
			}
			job, repeated, aerr := failedBySameGeneration(ctx, tx, p.Tenant, p.Token)
			if aerr != nil {
				return aerr
			}
			if repeated {
				out = job
				return nil
			}
			return err
		}
		if err != nil {
			return err
		}
		job := rec.job
		policy, err := getPolicy(ctx, tx, p.Tenant, job.Queue)
		if err != nil {
			return err
		}
		d := store.DecideRetry(policy.Retry, p.Error, job.Attempts, job.MaxAttempts, job.RetryDeadline,
			now, p.RetryAfter, s.opts.Rand())
		runFailed := errorData(attemptData(p.Token, job), p.Error)
		l := leave{state: d.State, lastError: &p.Error, outcome: store.AttemptFailed}
		switch {
		case d.State == store.JobStateQueued && job.CancelRequested:
			l.state = store.JobStateCancelled
			l.events = []event{
				{typ: store.EventRunFailed, data: runFailed},
				{typ: store.EventCancelled, data: map[string]any{
					"reason": rec.cancelReason, "worker_id": p.Token.WorkerID,
					"lease_generation": p.Token.Generation, "by": "retry",
				}},
			}
		case d.State == store.JobStateQueued:
			runFailed["available_at"] = d.AvailableAt
			l.availableAt = d.AvailableAt
			l.events = []event{{typ: store.EventRunFailed, data: runFailed}}
		case d.State == store.JobStateFailed:
			l.events = []event{{typ: store.EventFailed, data: runFailed}}
		default: // dead
			l.events = []event{
				{typ: store.EventRunFailed, data: runFailed},
				{typ: store.EventDead, data: deadData(job.Attempts, job.MaxAttempts)},
			}
		}
		out, err = leaveLease(ctx, tx, p.Tenant, p.Token, rec, now, l)
		if err != nil {
			return err
		}
		if out.State == store.JobStateQueued {
			return s.notify(ctx, tx, p.Tenant, out.Queue)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// failedBySameGeneration reports whether tok's attempt already ended as
// failed, i.e. this Retry was already applied; it returns the current job.
func failedBySameGeneration(ctx context.Context, tx pgx.Tx, tenant string, tok store.LeaseToken) (*store.Job, bool, error) {
	attempt, err := scanAttempt(tx.QueryRow(ctx, qGetAttempt, tenant, tok.JobID, tok.Generation))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	if attempt.WorkerID != tok.WorkerID || attempt.Outcome != store.AttemptFailed {
		return nil, false, nil
	}
	job, err := getJob(ctx, tx, tenant, tok.JobID)
	if err != nil {
		return nil, false, err
	}
	return job, true, nil
}

// CancelByHolder implements store.Store.
func (s *Store) CancelByHolder(ctx context.Context, p store.CancelByHolderParams) (*store.Job, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	var out *store.Job
	err := s.withTx(ctx, "cancel_by_holder", func(tx pgx.Tx) error {
		rec, now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			out, err = diagnose(ctx, tx, p.Tenant, p.Token, func(j *store.Job, a *store.Attempt) bool {
				return j.State == store.JobStateCancelled && a.Outcome == store.AttemptCancelled
			})
			return err
		}
		if err != nil {
			return err
		}
		data := holderData(p.Token)
		data["reason"] = p.Reason
		data["by"] = "holder"
		out, err = leaveLease(ctx, tx, p.Tenant, p.Token, rec, now, leave{
			state:   store.JobStateCancelled,
			events:  []event{{typ: store.EventCancelled, data: data}},
			outcome: store.AttemptCancelled,
		})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Release implements store.Store. The attempt is not spent (attempts - 1)
// and its row ends as released. A job whose cancellation was requested ends
// CANCELLED instead of going back to the queue (attempt cancelled, as if the
// holder had acknowledged the cancel).
func (s *Store) Release(ctx context.Context, p store.ReleaseParams) (*store.Job, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, err
	}
	var out *store.Job
	err := s.withTx(ctx, "release", func(tx pgx.Tx) error {
		rec, now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			_, err = diagnose(ctx, tx, p.Tenant, p.Token, nil)
			return err
		}
		if err != nil {
			return err
		}
		l := leave{
			state:       store.JobStateQueued,
			availableAt: now,
			refund:      true,
			events:      []event{{typ: store.EventReleased, data: holderData(p.Token)}},
			outcome:     store.AttemptReleased,
		}
		if rec.job.CancelRequested {
			data := holderData(p.Token)
			data["by"] = "release"
			l = leave{
				state:   store.JobStateCancelled,
				events:  []event{{typ: store.EventCancelled, data: data}},
				outcome: store.AttemptCancelled,
			}
		}
		out, err = leaveLease(ctx, tx, p.Tenant, p.Token, rec, now, l)
		if err != nil {
			return err
		}
		if out.State == store.JobStateQueued {
			return s.notify(ctx, tx, p.Tenant, out.Queue)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RequestCancel implements store.Store: QUEUED → CANCELLED at once; LEASED
// → cancel requested (the holder learns it from Renew and acknowledges with
// CancelByHolder, or the next Claim ends the job once its lease expires);
// a repeated request returns the job unchanged; terminal → ErrAlreadyFinal.
func (s *Store) RequestCancel(ctx context.Context, p store.RequestCancelParams) (*store.Job, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(p.JobID); err != nil {
		return nil, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	var out *store.Job
	err := s.withTx(ctx, "request_cancel", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		rec, err := scanJob(tx.QueryRow(ctx, qLockJob, p.Tenant, p.JobID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %s: %w", p.JobID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		job := rec.job
		switch {
		case job.State.Terminal():
			return fmt.Errorf("cancel job %s (%s): %w", p.JobID, job.State, store.ErrAlreadyFinal)
		case job.State == store.JobStateLeased && job.CancelRequested:
			out, err = getJob(ctx, tx, p.Tenant, p.JobID)
			return err
		case job.State == store.JobStateQueued:
			rec, err = scanJob(tx.QueryRow(ctx, qCancelQueued, p.Tenant, p.JobID, now, p.Reason))
			if err != nil {
				return err
			}
			err = appendReserved(ctx, tx, p.Tenant, p.JobID, rec.lastEventSeq, now,
				event{typ: store.EventCancelled, data: map[string]any{"reason": p.Reason, "by": "client"}})
		default: // leased
			rec, err = scanJob(tx.QueryRow(ctx, qRequestCancelLeased, p.Tenant, p.JobID, p.Reason))
			if err != nil {
				return err
			}
			err = appendReserved(ctx, tx, p.Tenant, p.JobID, rec.lastEventSeq, now,
				event{typ: store.EventCancelRequested, data: map[string]any{
					"reason": p.Reason, "worker_id": job.LeaseOwner, "lease_generation": job.LeaseGeneration,
				}})
		}
		if err != nil {
			return err
		}
		if err := attachCheckpoint(ctx, tx, rec.job); err != nil {
			return err
		}
		out = rec.job
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func validateJobID(id string) error {
	return store.ValidateText("job_id", id, store.NameMaxLen, true)
}
