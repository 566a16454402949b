package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
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
	var (
		claimed []store.ClaimedJob
		written []store.BreakerChange
	)
	err = s.write(ctx, "claim", func(tx *writeTx) error {
		claimed, written = nil, nil
		now := s.clock(p.Now)
		type candidate struct {
			id, queue, key string
			priority       int32
			availableAt    int64
		}
		// rooms is what each open queue may still take under its limits
		// (store.DecideQueueRoom); used counts what this claim took of
		// each (queue, key); windows are the rate-limited queues' current
		// rate windows.
		rooms := map[string]store.QueueRoom{}
		used := map[[2]string]int{}
		windows := map[string]time.Time{}
		for _, ref := range refs {
			pol := policies[ref]
			if pol.Paused {
				continue
			}
			room := store.QueueRoom{Cap: len(slots), Fetch: len(slots), KeyRoom: -1}
			if pol.Limited() {
				u, win, err := queueUsage(ctx, tx, p.Tenant, ref.Queue, pol, now)
				if err != nil {
					return err
				}
				room = store.DecideQueueRoom(pol, len(slots), u)
				if !win.IsZero() {
					windows[ref.Queue] = win
				}
			}
			if room.Cap > 0 {
				rooms[ref.Queue] = room
			}
		}
		// candidates lists up to want claimable jobs across the open
		// queues in claim order (probe: of that dependency only), no more
		// of a concurrency key than its room.
		candidates := func(probe string, want int) ([]candidate, error) {
			var all []candidate
			for _, ref := range refs {
				room := rooms[ref.Queue]
				n := min(room.Cap, want)
				if n <= 0 {
					continue
				}
				fetch := n
				if room.KeyRoom >= 0 {
					fetch = max(n, min(room.Fetch, want*4+100))
				}
				query, args := qClaimCandidates, []any{p.Tenant, ref.Queue, micros(now), fetch}
				if probe != "" {
					query, args = qClaimProbeCandidates, append(args, probe)
				}
				rows, err := tx.QueryContext(ctx, query, args...)
				if err != nil {
					return nil, fmt.Errorf("claim from %q: %w", ref.Queue, err)
				}
				taken, here := map[string]int{}, 0
				for rows.Next() && here < n {
					c := candidate{queue: ref.Queue}
					if err := rows.Scan(&c.id, &c.priority, &c.availableAt, &c.key); err != nil {
						rows.Close()
						return nil, fmt.Errorf("claim from %q: %w", ref.Queue, err)
					}
					if room.KeyRoom >= 0 && c.key != "" {
						keyRoom, ok := room.Keys[c.key]
						if !ok {
							keyRoom = room.KeyRoom
						}
						if used[[2]string{c.queue, c.key}]+taken[c.key] >= keyRoom {
							continue
						}
						taken[c.key]++
					}
					all = append(all, c)
					here++
				}
				if err := rows.Close(); err != nil {
					return nil, err
				}
				if err := rows.Err(); err != nil {
					return nil, err
				}
			}
			slices.SortFunc(all, func(a, b candidate) int {
				return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.availableAt, b.availableAt), cmp.Compare(a.id, b.id))
			})
			all = all[:min(len(all), want)]
			for _, c := range all {
				room := rooms[c.queue]
				room.Cap--
				rooms[c.queue] = room
				used[[2]string{c.queue, c.key}]++
			}
			return all, nil
		}
		all, err := candidates("", len(slots))
		if err != nil {
			return err
		}
		// Breakers that are not closed held their jobs back above; those
		// due for half-open probes admit them now, in the same
		// transaction (the single writer needs no lock to count them).
		var probes []store.BreakerChange
		probeOf := map[string]int{} // job id → index into probes
		if len(all) < len(slots) && len(rooms) > 0 {
			gate, err := queryBreakers(ctx, tx, qGateBreakers, p.Tenant)
			if err != nil {
				return fmt.Errorf("read breakers: %w", err)
			}
			for _, b := range gate {
				admit, next, events := store.DecideProbes(b, now)
				var more []candidate
				if n := min(admit, len(slots)-len(all)); n > 0 {
					if more, err = candidates(b.Dependency, n); err != nil {
						return err
					}
				}
				if len(more) == 0 && len(events) == 0 {
					continue
				}
				for _, c := range more {
					probeOf[c.id] = len(probes)
				}
				first := next.EventSeq + 1
				next.EventSeq += int64(len(events))
				probes = append(probes, store.BreakerChange{Breaker: next, FirstSeq: first, Events: events, Now: now})
				all = append(all, more...)
			}
		}
		// Each job is leased to the waiter of its slot, a chunk of jobs
		// per statement; the jobs come back in no particular order.
		expires := make([]time.Time, len(all))
		args := make([]any, 0, len(all)*qLeaseJobs.width)
		for k, c := range all {
			w := p.Waiters[slots[k]]
			expires[k] = now.Add(policies[store.QueueRef{Tenant: p.Tenant, Queue: c.queue}].LeaseFor(w.LeaseDuration))
			args = append(args, p.Tenant, c.id, w.Worker, micros(now), micros(expires[k]))
		}
		type leasedJob struct {
			job *store.Job
			seq int64 // of its LEASED event
		}
		leased := make(map[string]leasedJob, len(all))
		err = qLeaseJobs.query(ctx, tx, args, func(rows *sql.Rows) error {
			var seq int64
			row, err := scanJob(rows, &seq)
			if err != nil {
				return err
			}
			leased[row.job.ID] = leasedJob{job: row.job, seq: seq}
			return nil
		})
		if err != nil {
			return fmt.Errorf("lease %d jobs: %w", len(all), err)
		}
		// Impossible for the single writer that read the candidates.
		if len(leased) != len(all) {
			return fmt.Errorf("lease %d jobs: %d leased", len(all), len(leased))
		}
		events := make([]any, 0, len(all)*qInsertEventsMulti.width)
		for k, c := range all {
			l, w := leased[c.id], p.Waiters[slots[k]]
			gen, attempts := l.job.LeaseGeneration, l.job.Attempts
			tok := store.LeaseToken{JobID: c.id, Generation: gen, WorkerID: w.Worker}
			if i, ok := probeOf[c.id]; ok {
				probes[i].Breaker = store.AdmitProbes(probes[i].Breaker, []store.LeaseToken{tok}, now)
			}
			data := store.EventData("worker_id", w.Worker, "lease_generation", gen, "attempt", attempts, "lease_expires_at", expires[k])
			events = append(events, p.Tenant, c.id, l.seq, string(store.EventLeased), micros(now), data)
			claimed = append(claimed, store.ClaimedJob{Job: l.job, Token: tok})
		}
		if _, err := qInsertEventsMulti.exec(ctx, tx, events); err != nil {
			return fmt.Errorf("append leased events: %w", err)
		}
		for i := range claimed {
			if claimed[i].Token.Generation == 1 {
				continue // a first lease has no checkpoint or ledger yet
			}
			row, err := getJobTx(ctx, tx, p.Tenant, claimed[i].Token.JobID)
			if err != nil {
				return err
			}
			claimed[i].Job = row.job
			if claimed[i].Effects, err = listEffectsTx(ctx, tx, p.Tenant, claimed[i].Token.JobID); err != nil {
				return err
			}
		}
		if err := addRateStarts(ctx, tx, p.Tenant, policies, windows, claimed); err != nil {
			return err
		}
		written = probes
		return writeBreakers(ctx, tx, probes)
	})
	if err != nil {
		return nil, err
	}
	s.opts.BreakersChanged(written)
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

// queueUsage counts, in the write transaction, what a limited queue has
// leased (and, by concurrency key, when keys are limited) and started in
// its current rate window, which it returns (zero without a rate limit).
func queueUsage(ctx context.Context, tx *writeTx, tenant, queue string, pol store.QueuePolicy, now time.Time) (store.QueueUsage, time.Time, error) {
	u := store.QueueUsage{ActiveByKey: map[string]int64{}, StartedByKey: map[string]int64{}}
	if err := tx.QueryRowContext(ctx, qActiveLeases, tenant, queue, micros(now)).Scan(&u.Active); err != nil {
		return u, time.Time{}, fmt.Errorf("count leases of %q: %w", queue, err)
	}
	count := func(query string, into map[string]int64, args ...any) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return fmt.Errorf("count %q: %w", queue, err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				k string
				n int64
			)
			if err := rows.Scan(&k, &n); err != nil {
				return err
			}
			into[k] = n
		}
		return rows.Err()
	}
	if pol.KeyConcurrencyLimit > 0 {
		if err := count(qActiveKeyLeases, u.ActiveByKey, tenant, queue, micros(now)); err != nil {
			return u, time.Time{}, err
		}
	}
	win := store.RateWindowStart(pol, now)
	if !win.IsZero() {
		if err := count(qRateStarts, u.StartedByKey, tenant, queue, micros(win)); err != nil {
			return u, time.Time{}, err
		}
	}
	return u, win, nil
}

// addRateStarts counts the jobs just leased in their queues' rate windows
// (store.RateStarts) and drops the windows before the current ones.
func addRateStarts(ctx context.Context, tx *writeTx, tenant string, policies map[store.QueueRef]store.QueuePolicy,
	windows map[string]time.Time, claimed []store.ClaimedJob) error {
	if len(windows) == 0 {
		return nil
	}
	keys := map[string][]string{}
	for _, c := range claimed {
		keys[c.Job.Queue] = append(keys[c.Job.Queue], c.Job.ConcurrencyKey)
	}
	for _, q := range slices.Sorted(maps.Keys(windows)) {
		w := windows[q]
		starts := store.RateStarts(policies[store.QueueRef{Tenant: tenant, Queue: q}], keys[q])
		for _, k := range slices.Sorted(maps.Keys(starts)) {
			if _, err := tx.ExecContext(ctx, qAddRateStarts, tenant, q, micros(w), k, starts[k]); err != nil {
				return fmt.Errorf("count starts of %q: %w", q, err)
			}
		}
		if _, err := tx.ExecContext(ctx, qDropRateWindows, tenant, q, micros(w)); err != nil {
			return fmt.Errorf("drop old rate windows of %q: %w", q, err)
		}
	}
	return nil
}
