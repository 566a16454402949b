package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Claim implements store.Store.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]store.ClaimedJob, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := store.ValidateClaim(p); err != nil {
		return nil, err
	}
	return s.ClaimMany(ctx, p.Many())
}

// ClaimMany implements store.Store in one write transaction: per open
// queue (not paused, with room under its concurrency limit, policies from
// the cache) qClaimCandidates lists its next jobs in claim order; the
// lists are merged, cut to the jobs the waiters asked for, and each job is
// leased to the waiter of its slot (store.ClaimSlots) with its LEASED
// event. As the single writer, nothing can take a candidate between the
// read and the update.
func (s *Store) ClaimMany(ctx context.Context, p store.ClaimManyParams) ([]store.ClaimedJob, error) {
	if err := store.ValidateClaimMany(p); err != nil {
		return nil, err
	}
	queues := slices.Compact(slices.Sorted(slices.Values(p.Queues)))
	refs := make([]store.QueueRef, len(queues))
	for i, q := range queues {
		refs[i] = store.QueueRef{Tenant: p.Tenant, Queue: q}
	}
	policies, err := s.policies.Get(ctx, refs)
	if err != nil {
		return nil, s.interpret(ctx, "claim", err)
	}
	slots := store.ClaimSlots(p.Waiters)
	var claimed []store.ClaimedJob
	err = s.write(ctx, "claim", func(tx *writeTx) error {
		claimed = nil
		now := s.clock(p.Now)
		type candidate struct {
			id, queue   string
			priority    int32
			availableAt int64
		}
		var all []candidate
		for _, ref := range refs {
			pol := policies[ref]
			if pol.Paused {
				continue
			}
			room := len(slots)
			if pol.ConcurrencyLimit > 0 {
				var active int
				if err := tx.QueryRowContext(ctx, qActiveLeases, p.Tenant, ref.Queue, micros(now)).Scan(&active); err != nil {
					return fmt.Errorf("count leases of %q: %w", ref.Queue, err)
				}
				room = min(room, int(pol.ConcurrencyLimit)-active)
			}
			if room <= 0 {
				continue
			}
			rows, err := tx.QueryContext(ctx, qClaimCandidates, p.Tenant, ref.Queue, micros(now), room)
			if err != nil {
				return fmt.Errorf("claim from %q: %w", ref.Queue, err)
			}
			for rows.Next() {
				c := candidate{queue: ref.Queue}
				if err := rows.Scan(&c.id, &c.priority, &c.availableAt); err != nil {
					rows.Close()
					return fmt.Errorf("claim from %q: %w", ref.Queue, err)
				}
				all = append(all, c)
			}
			if err := rows.Close(); err != nil {
				return err
			}
			if err := rows.Err(); err != nil {
				return err
			}
		}
		slices.SortFunc(all, func(a, b candidate) int {
			return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.availableAt, b.availableAt), cmp.Compare(a.id, b.id))
		})
		all = all[:min(len(all), len(slots))]
		for k, c := range all {
			w := p.Waiters[slots[k]]
			lease := policies[store.QueueRef{Tenant: p.Tenant, Queue: c.queue}].LeaseFor(w.LeaseDuration)
			expires := now.Add(lease)
			var seq int64
			row, err := scanJob(tx.QueryRowContext(ctx, qLeaseJob, p.Tenant, c.id, w.Worker, micros(now), micros(expires)), &seq)
			if err != nil {
				return fmt.Errorf("lease %q: %w", c.id, err)
			}
			gen, attempts := row.job.LeaseGeneration, row.job.Attempts
			data := store.EventData("worker_id", w.Worker, "lease_generation", gen, "attempt", attempts, "lease_expires_at", expires)
			if _, err := tx.ExecContext(ctx, qInsertEvent, p.Tenant, c.id, seq, string(store.EventLeased), micros(now), data); err != nil {
				return fmt.Errorf("append leased event: %w", err)
			}
			var effects []store.Effect
			if gen > 1 { // a first lease has no checkpoint or ledger yet
				if row, err = getJobTx(ctx, tx, p.Tenant, c.id); err != nil {
					return err
				}
				if effects, err = listEffectsTx(ctx, tx, p.Tenant, c.id); err != nil {
					return err
				}
			}
			claimed = append(claimed, store.ClaimedJob{
				Job:     row.job,
				Token:   store.LeaseToken{JobID: c.id, Generation: gen, WorkerID: w.Worker},
				Effects: effects,
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return claimed, nil
}

// ReapExpired implements store.Store: store.Reap in one write transaction.
func (s *Store) ReapExpired(ctx context.Context, p store.ReapParams) (store.ReapResult, error) {
	if p.Limit < 0 {
		return store.ReapResult{}, store.Invalid("limit", "must not be negative")
	}
	var out store.ReapResult
	err := s.write(ctx, "reap", func(tx *writeTx) error {
		var err error
		out, err = store.Reap(ctx, reportTx{tx: tx, s: s}, p)
		return err
	})
	if err != nil {
		return store.ReapResult{}, err
	}
	return out, nil
}

// recordAttempt writes the row of an attempt that ended.
func recordAttempt(ctx context.Context, tx *writeTx, l store.Leave) error {
	var code, message sql.NullString
	var retryable sql.NullBool
	if e := l.Transition.AttemptError; e != nil {
		code = sql.NullString{String: e.Code, Valid: true}
		message = sql.NullString{String: e.Message, Valid: true}
		retryable = sql.NullBool{Bool: e.Retryable, Valid: true}
	}
	if _, err := tx.ExecContext(ctx, qInsertAttempt, l.Tenant, l.Token.JobID, l.Attempt, l.Token.Generation,
		l.Token.WorkerID, micros(l.ClaimedAt), micros(l.Now), string(l.Transition.Outcome), code, message, retryable); err != nil {
		return fmt.Errorf("record attempt: %w", err)
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
// matched nothing: ErrNotFound for a job the tenant does not have,
// ErrLeaseLost otherwise.
func leaseLost(ctx context.Context, tx *writeTx, tenant string, t store.LeaseToken) error {
	if _, err := getJobTx(ctx, tx, tenant, t.JobID); err != nil {
		return err
	}
	return fmt.Errorf("job %q generation %d for %q: %w", t.JobID, t.Generation, t.WorkerID, store.ErrLeaseLost)
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
