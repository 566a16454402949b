package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Claim implements store.Store.
//
// It runs in one write transaction: first the expired leases of the queues
// that no claim may take over are ended (endExpiredLeases: cancel-requested
// jobs as CANCELLED, jobs whose budget is spent as DEAD); then qClaim leases
// jobs in claim order. A queue with a concurrency limit gets at most its
// remaining room: the claim statement is repeated with a LIMIT no larger than
// the smallest room among the queues still open, so the global order
// (priority desc, available_at, id) across queues is kept and no limit is
// exceeded. In the usual case (no limits) that is one statement.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]store.ClaimedJob, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := store.ValidateClaim(p); err != nil {
		return nil, err
	}
	queues := slices.Compact(slices.Sorted(slices.Values(p.Queues)))
	var claimed []store.ClaimedJob
	err := s.write(ctx, "claim", func(tx *writeTx) error {
		claimed = nil
		now := s.clock(p.Now)
		allJSON, _ := json.Marshal(queues)
		if err := endExpiredLeases(ctx, tx, p.Tenant, string(allJSON), now); err != nil {
			return err
		}

		// Per queue: skip paused ones, note the lease duration and the
		// room left under a concurrency limit (-1: unlimited).
		leases := make(map[string]int64)
		room := make(map[string]int)
		var open []string
		for _, q := range queues {
			pol, err := policyTx(ctx, tx, p.Tenant, q)
			if err != nil {
				return err
			}
			if pol.Paused {
				continue
			}
			leases[q] = cmp.Or(p.LeaseDuration, pol.DefaultLeaseDuration).Microseconds()
			room[q] = -1
			if pol.ConcurrencyLimit > 0 {
				var active int
				if err := tx.QueryRowContext(ctx, qActiveLeases, p.Tenant, q, micros(now)).Scan(&active); err != nil {
					return fmt.Errorf("count leases of %q: %w", q, err)
				}
				room[q] = max(int(pol.ConcurrencyLimit)-active, 0)
				if room[q] == 0 {
					continue
				}
			}
			open = append(open, q)
		}
		leasesJSON, _ := json.Marshal(leases)

		type picked struct {
			id, queue  string
			generation int64
			attempts   int32
			expires    int64
		}
		var all []picked
		remaining := p.Max
		for remaining > 0 && len(open) > 0 {
			limit := remaining
			for _, q := range open {
				if room[q] >= 0 {
					limit = min(limit, room[q])
				}
			}
			query, queuesArg := qClaim, ""
			if len(open) == 1 {
				query, queuesArg = qClaimOneQueue, open[0]
			} else {
				b, _ := json.Marshal(open)
				queuesArg = string(b)
			}
			rows, err := tx.QueryContext(ctx, query, p.Tenant, micros(now), queuesArg, limit, p.Worker, string(leasesJSON))
			if err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			n := 0
			for rows.Next() {
				var pk picked
				if err := rows.Scan(&pk.id, &pk.queue, &pk.generation, &pk.attempts, &pk.expires); err != nil {
					rows.Close()
					return fmt.Errorf("claim: %w", err)
				}
				all = append(all, pk)
				n++
				if room[pk.queue] > 0 {
					room[pk.queue]--
				}
			}
			if err := rows.Close(); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			if err := rows.Err(); err != nil {
				return fmt.Errorf("claim: %w", err)
			}
			remaining -= n
			if n < limit {
				break // every open queue is out of claimable jobs
			}
			open = slices.DeleteFunc(open, func(q string) bool { return room[q] == 0 })
		}

		for _, pk := range all {
			var prevWorker string
			err := tx.QueryRowContext(ctx, qExpireAttempt, p.Tenant, pk.id, pk.generation-1, micros(now)).Scan(&prevWorker)
			switch {
			case err == nil:
				// A takeover: the previous holder's lease had expired.
				data := eventData("worker_id", prevWorker, "lease_generation", pk.generation-1)
				if _, err := appendEvent(ctx, tx, p.Tenant, pk.id, store.EventLeaseExpired, now, data); err != nil {
					return err
				}
			case !errors.Is(err, sql.ErrNoRows):
				return fmt.Errorf("close expired attempt: %w", err)
			}
			expires := fromMicros(pk.expires)
			data := eventData("worker_id", p.Worker, "lease_generation", pk.generation, "attempt", pk.attempts, "lease_expires_at", expires)
			if _, err := appendEvent(ctx, tx, p.Tenant, pk.id, store.EventLeased, now, data); err != nil {
				return err
			}
			if _, err := tx.ExecContext(ctx, qInsertAttempt, p.Tenant, pk.id, pk.attempts, pk.generation, p.Worker, micros(now)); err != nil {
				return fmt.Errorf("record attempt: %w", err)
			}
			row, err := getJobTx(ctx, tx, p.Tenant, pk.id)
			if err != nil {
				return err
			}
			effects, err := listEffectsTx(ctx, tx, p.Tenant, pk.id)
			if err != nil {
				return err
			}
			claimed = append(claimed, store.ClaimedJob{
				Job:     row.job,
				Token:   store.LeaseToken{JobID: pk.id, Generation: pk.generation, WorkerID: p.Worker},
				Effects: effects,
			})
		}
		// RETURNING order is unspecified; callers get claim order.
		slices.SortFunc(claimed, func(a, b store.ClaimedJob) int {
			return cmp.Or(
				cmp.Compare(b.Job.Priority, a.Job.Priority),
				a.Job.AvailableAt.Compare(b.Job.AvailableAt),
				cmp.Compare(a.Job.ID, b.Job.ID),
			)
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// endExpiredLeases ends the expired leases of the queues (a JSON array) that
// no claim may take over, in the claim's transaction:
//
//   - a job whose holder was asked to cancel and let the lease expire
//     without acknowledging becomes CANCELLED (one cancelled event);
//   - a job whose holder let the lease expire with no report while its
//     budget is spent becomes DEAD: lease_expired, then run_failed with
//     store.ErrorCodeLeaseExpired, then dead, its last error set. This is
//     what ends a poison pill whose worker crashes every time: it never
//     reports, so only the claim can notice the budget is gone.
//
// Either way the expired attempt is closed as lease_expired. The claim
// statement skips both kinds as well.
func endExpiredLeases(ctx context.Context, tx *writeTx, tenant, queuesJSON string, now time.Time) error {
	rows, err := tx.QueryContext(ctx, qCancelExpiredRequested, tenant, micros(now), queuesJSON)
	if err != nil {
		return fmt.Errorf("cancel expired leases: %w", err)
	}
	type victim struct {
		id, owner, reason string
		generation        int64
		attempts          int32
	}
	var cancelled []victim
	for rows.Next() {
		var v victim
		if err := rows.Scan(&v.id, &v.generation, &v.owner, &v.reason, &v.attempts); err != nil {
			rows.Close()
			return fmt.Errorf("cancel expired leases: %w", err)
		}
		cancelled = append(cancelled, v)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, v := range cancelled {
		if err := finishAttemptTx(ctx, tx, tenant, v.id, v.generation, store.AttemptLeaseExpired, now, nil); err != nil {
			return err
		}
		data := eventData("reason", v.reason, "worker_id", v.owner, "lease_generation", v.generation, "lease_expired", true)
		if _, err := appendEvent(ctx, tx, tenant, v.id, store.EventCancelled, now, data); err != nil {
			return err
		}
	}

	expired := store.JobError{Code: store.ErrorCodeLeaseExpired, Message: store.ErrorMessageLeaseExpired, Retryable: true}
	rows, err = tx.QueryContext(ctx, qDeadLetterExpired, tenant, micros(now), queuesJSON, expired.Code, expired.Message)
	if err != nil {
		return fmt.Errorf("dead-letter expired leases: %w", err)
	}
	type spent struct {
		id, owner             string
		generation            int64
		attempts, maxAttempts int32
	}
	var dead []spent
	for rows.Next() {
		var v spent
		if err := rows.Scan(&v.id, &v.generation, &v.owner, &v.attempts, &v.maxAttempts); err != nil {
			rows.Close()
			return fmt.Errorf("dead-letter expired leases: %w", err)
		}
		dead = append(dead, v)
	}
	if err := rows.Close(); err != nil {
		return err
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for _, v := range dead {
		if err := finishAttemptTx(ctx, tx, tenant, v.id, v.generation, store.AttemptLeaseExpired, now, nil); err != nil {
			return err
		}
		events := []struct {
			typ  store.EventType
			data string
		}{
			{store.EventLeaseExpired, eventData("worker_id", v.owner, "lease_generation", v.generation)},
			{store.EventRunFailed, eventData("worker_id", v.owner, "lease_generation", v.generation, "attempt", v.attempts,
				"error_code", expired.Code, "error_message", expired.Message, "retryable", expired.Retryable)},
			{store.EventDead, deadData(v.attempts, v.maxAttempts)},
		}
		for _, ev := range events {
			if _, err := appendEvent(ctx, tx, tenant, v.id, ev.typ, now, ev.data); err != nil {
				return err
			}
		}
	}
	return nil
}

// deadData is the data of a dead event: with attempts left, it was the
// retry deadline that ended the job.
func deadData(attempts, maxAttempts int32) string {
	reason := "attempts exhausted"
	if attempts < maxAttempts {
		reason = "retry deadline exceeded"
	}
	return eventData("reason", reason, "attempts", attempts, "max_attempts", maxAttempts)
}

// finishAttemptTx closes the running attempt row of a generation.
func finishAttemptTx(ctx context.Context, tx *writeTx, tenant, jobID string, generation int64, outcome store.AttemptOutcome, now time.Time, jerr *store.JobError) error {
	var code, message sql.NullString
	var retryable sql.NullBool
	if jerr != nil {
		code = sql.NullString{String: jerr.Code, Valid: true}
		message = sql.NullString{String: jerr.Message, Valid: true}
		retryable = sql.NullBool{Bool: jerr.Retryable, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, qCloseAttempt, tenant, jobID, generation, string(outcome), micros(now), code, message, retryable); err != nil {
		return fmt.Errorf("close attempt: %w", err)
	}
	return nil
}

// leaseArgs are the leaseHeld parameters ?1-?5.
func leaseArgs(tenant string, t store.LeaseToken, now time.Time) []any {
	return []any{tenant, t.JobID, t.WorkerID, t.Generation, micros(now)}
}

// heldJob is what a lease-bound call needs of the job it holds.
type heldJob struct {
	queue           string
	attempts        int32
	maxAttempts     int32
	retryDeadline   time.Time
	cancelRequested bool
	cancelReason    string
}

// holdLease reads the job when the token's lease is current, and otherwise
// returns nil (not an error): the caller decides between a replay,
// ErrLeaseLost and ErrNotFound with leaseLost.
func holdLease(ctx context.Context, tx *writeTx, tenant string, t store.LeaseToken, now time.Time) (*heldJob, error) {
	var (
		h        heldJob
		deadline sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, qLockLease, leaseArgs(tenant, t, now)...).
		Scan(&h.queue, &h.attempts, &h.maxAttempts, &deadline, &h.cancelRequested, &h.cancelReason)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read lease: %w", err)
	}
	h.retryDeadline = fromNullMicros(deadline)
	return &h, nil
}

// leaseLost is the answer of a lease-bound call whose compare-and-set
// matched nothing. replay, when not nil, says whether the job as it is now
// is the outcome this very call (same worker and generation) already
// produced; then the job is returned as is (the earlier response was lost).
// A job the tenant does not have is ErrNotFound; anything else ErrLeaseLost.
func leaseLost(ctx context.Context, tx *writeTx, tenant string, t store.LeaseToken, replay func(j *store.Job, outcome store.AttemptOutcome, worker string) bool) (*store.Job, error) {
	row, err := getJobTx(ctx, tx, tenant, t.JobID)
	if err != nil {
		return nil, err
	}
	if replay != nil {
		var worker, outcome string
		err := tx.QueryRowContext(ctx, qGetAttempt, tenant, t.JobID, t.Generation).Scan(&worker, &outcome)
		switch {
		case err == nil:
			if worker == t.WorkerID && replay(row.job, store.AttemptOutcome(outcome), worker) {
				return row.job, nil
			}
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("read attempt: %w", err)
		}
	}
	return nil, fmt.Errorf("job %q generation %d for %q: %w", t.JobID, t.Generation, t.WorkerID, store.ErrLeaseLost)
}

// RequestCancel implements store.Store.
func (s *Store) RequestCancel(ctx context.Context, p store.RequestCancelParams) (*store.Job, error) {
	if err := store.ValidateJobRef(p.Tenant, p.JobID); err != nil {
		return nil, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.write(ctx, "request_cancel", func(tx *writeTx) error {
		now := s.clock(p.Now)
		row, err := getJobTx(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return err
		}
		switch j := row.job; {
		case j.State.Terminal():
			return fmt.Errorf("cancel job %q (%s): %w", p.JobID, j.State, store.ErrAlreadyFinal)
		case j.State == store.JobStateQueued:
			if _, err := tx.ExecContext(ctx, qCancelQueued, p.Tenant, p.JobID, micros(now), p.Reason); err != nil {
				return fmt.Errorf("cancel: %w", err)
			}
			if _, err := appendEvent(ctx, tx, p.Tenant, p.JobID, store.EventCancelled, now, eventData(withActor(p.Actor, "reason", p.Reason, "by", "client")...)); err != nil {
				return err
			}
		case j.CancelRequested:
			job = j // already requested: unchanged, no second event
			return nil
		default: // leased
			if _, err := tx.ExecContext(ctx, qRequestCancelLeased, p.Tenant, p.JobID, p.Reason); err != nil {
				return fmt.Errorf("request cancel: %w", err)
			}
			data := eventData(withActor(p.Actor, "reason", p.Reason, "worker_id", j.LeaseOwner, "lease_generation", j.LeaseGeneration)...)
			if _, err := appendEvent(ctx, tx, p.Tenant, p.JobID, store.EventCancelRequested, now, data); err != nil {
				return err
			}
		}
		row, err = getJobTx(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return err
		}
		job = row.job
		return nil
	})
	if err != nil {
		return nil, err
	}
	return job, nil
}
