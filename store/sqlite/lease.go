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
	var c *claim
	err = s.write(ctx, "claim", func(tx *writeTx) error {
		c = &claim{tx: tx, p: p, refs: refs, policies: policies, slots: store.ClaimSlots(p.Waiters), now: s.clock(p.Now)}
		return c.run(ctx)
	})
	if err != nil {
		return nil, err
	}
	s.opts.BreakersChanged(c.probes)
	return c.claimed, nil
}

// claim is one ClaimMany's write transaction, in the steps PostgreSQL's
// takes in SQL: each open queue's room under its limits, candidates in
// claim order, half-open probes, the lease, its events, and the history of
// jobs leased before.
type claim struct {
	tx       *writeTx
	p        store.ClaimManyParams
	refs     []store.QueueRef
	policies map[store.QueueRef]store.QueuePolicy
	slots    []int
	now      time.Time

	// rooms is what each open queue may still take under its limits
	// (store.DecideQueueRoom); used counts what this claim took of each
	// (queue, key); windows are the rate-limited queues' current rate
	// windows.
	rooms   map[string]store.QueueRoom
	used    map[[2]string]int
	windows map[string]time.Time

	probes  []store.BreakerChange
	probeOf map[string]int // job id → index into probes
	claimed []store.ClaimedJob
}

// candidate is a claimable job.
type candidate struct {
	id, queue, key string
	priority       int32
	availableAt    int64
}

func (c *claim) run(ctx context.Context) error {
	if err := c.openRooms(ctx); err != nil {
		return err
	}
	all, err := c.candidates(ctx, "", len(c.slots))
	if err != nil {
		return err
	}
	if all, err = c.admitProbes(ctx, all); err != nil {
		return err
	}
	leased, err := c.lease(ctx, all)
	if err != nil {
		return err
	}
	if err := c.appendLeasedEvents(ctx, all, leased); err != nil {
		return err
	}
	if err := c.reloadRepeats(ctx); err != nil {
		return err
	}
	if err := addRateStarts(ctx, c.tx, c.p.Tenant, c.policies, c.windows, c.claimed); err != nil {
		return err
	}
	return writeBreakers(ctx, c.tx, c.probes)
}

// openRooms decides each unpaused queue's room.
func (c *claim) openRooms(ctx context.Context) error {
	c.rooms, c.used, c.windows = map[string]store.QueueRoom{}, map[[2]string]int{}, map[string]time.Time{}
	for _, ref := range c.refs {
		pol := c.policies[ref]
		if pol.Paused {
			continue
		}
		room := store.QueueRoom{Cap: len(c.slots), Fetch: len(c.slots), KeyRoom: -1}
		if pol.Limited() {
			u, win, err := queueUsage(ctx, c.tx, c.p.Tenant, ref.Queue, pol, c.now)
			if err != nil {
				return err
			}
			room = store.DecideQueueRoom(pol, len(c.slots), u)
			if !win.IsZero() {
				c.windows[ref.Queue] = win
			}
		}
		if room.Cap > 0 {
			c.rooms[ref.Queue] = room
		}
	}
	return nil
}

// candidates lists up to want claimable jobs across the open queues in
// claim order (probe: of that dependency only), no more of a concurrency
// key than its room, and takes them from the rooms.
func (c *claim) candidates(ctx context.Context, probe string, want int) ([]candidate, error) {
	var all []candidate
	for _, ref := range c.refs {
		more, err := c.queueCandidates(ctx, ref.Queue, probe, want)
		if err != nil {
			return nil, err
		}
		all = append(all, more...)
	}
	slices.SortFunc(all, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.availableAt, b.availableAt), cmp.Compare(a.id, b.id))
	})
	all = all[:min(len(all), want)]
	for _, cand := range all {
		room := c.rooms[cand.queue]
		room.Cap--
		c.rooms[cand.queue] = room
		c.used[[2]string{cand.queue, cand.key}]++
	}
	return all, nil
}

// queueCandidates reads one queue's candidates within its room.
func (c *claim) queueCandidates(ctx context.Context, queue, probe string, want int) ([]candidate, error) {
	room := c.rooms[queue]
	n := min(room.Cap, want)
	if n <= 0 {
		return nil, nil
	}
	fetch := n
	if room.KeyRoom >= 0 {
		fetch = max(n, min(room.Fetch, want*4+100))
	}
	query, args := qClaimCandidates, []any{c.p.Tenant, queue, micros(c.now), fetch}
	if probe != "" {
		query, args = qClaimProbeCandidates, append(args, probe)
	}
	rows, err := c.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("claim from %q: %w", queue, err)
	}
	defer rows.Close()
	var out []candidate
	taken := map[string]int{}
	for rows.Next() && len(out) < n {
		cand := candidate{queue: queue}
		if err := rows.Scan(&cand.id, &cand.priority, &cand.availableAt, &cand.key); err != nil {
			return nil, fmt.Errorf("claim from %q: %w", queue, err)
		}
		if room.KeyRoom >= 0 && cand.key != "" {
			keyRoom, ok := room.Keys[cand.key]
			if !ok {
				keyRoom = room.KeyRoom
			}
			if c.used[[2]string{queue, cand.key}]+taken[cand.key] >= keyRoom {
				continue
			}
			taken[cand.key]++
		}
		out = append(out, cand)
	}
	if err := rows.Close(); err != nil {
		return nil, err
	}
	return out, rows.Err()
}

// admitProbes: breakers that are not closed held their jobs back above;
// those due for half-open probes admit them now, in the same transaction
// (the single writer needs no lock to count them).
func (c *claim) admitProbes(ctx context.Context, all []candidate) ([]candidate, error) {
	c.probeOf = map[string]int{}
	if len(all) >= len(c.slots) || len(c.rooms) == 0 {
		return all, nil
	}
	gate, err := queryBreakers(ctx, c.tx, qGateBreakers, c.p.Tenant)
	if err != nil {
		return nil, fmt.Errorf("read breakers: %w", err)
	}
	for _, b := range gate {
		admit, next, events := store.DecideProbes(b, c.now)
		var more []candidate
		if n := min(admit, len(c.slots)-len(all)); n > 0 {
			if more, err = c.candidates(ctx, b.Dependency, n); err != nil {
				return nil, err
			}
		}
		if len(more) == 0 && len(events) == 0 {
			continue
		}
		for _, cand := range more {
			c.probeOf[cand.id] = len(c.probes)
		}
		first := next.EventSeq + 1
		next.EventSeq += int64(len(events))
		c.probes = append(c.probes, store.BreakerChange{Breaker: next, FirstSeq: first, Events: events, Now: c.now})
		all = append(all, more...)
	}
	return all, nil
}

// leasedJob is a job as the lease left it, with its LEASED event's place.
type leasedJob struct {
	job     *store.Job
	seq     int64
	expires time.Time
}

// lease leases each job to the waiter of its slot, a chunk of jobs per
// statement; the jobs come back in no particular order.
func (c *claim) lease(ctx context.Context, all []candidate) (map[string]leasedJob, error) {
	expires := make(map[string]time.Time, len(all))
	args := make([]any, 0, len(all)*qLeaseJobs.width)
	for k, cand := range all {
		w := c.p.Waiters[c.slots[k]]
		exp := c.now.Add(c.policies[store.QueueRef{Tenant: c.p.Tenant, Queue: cand.queue}].LeaseFor(w.LeaseDuration))
		expires[cand.id] = exp
		args = append(args, c.p.Tenant, cand.id, w.Worker, micros(c.now), micros(exp))
	}
	leased := make(map[string]leasedJob, len(all))
	err := qLeaseJobs.query(ctx, c.tx, args, func(rows *sql.Rows) error {
		var seq int64
		row, err := scanJob(rows, &seq)
		if err != nil {
			return err
		}
		leased[row.job.ID] = leasedJob{job: row.job, seq: seq, expires: expires[row.job.ID]}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("lease %d jobs: %w", len(all), err)
	}
	// Impossible for the single writer that read the candidates.
	if len(leased) != len(all) {
		return nil, fmt.Errorf("lease %d jobs: %d leased", len(all), len(leased))
	}
	return leased, nil
}

// appendLeasedEvents admits the probes' tokens into their breakers and
// collects the claimed jobs in slot order. (Their LEASED events are
// derived from the rows the lease wrote.)
func (c *claim) appendLeasedEvents(_ context.Context, all []candidate, leased map[string]leasedJob) error {
	for k, cand := range all {
		l, w := leased[cand.id], c.p.Waiters[c.slots[k]]
		gen := l.job.LeaseGeneration
		tok := store.LeaseToken{JobID: cand.id, Generation: gen, WorkerID: w.Worker}
		if i, ok := c.probeOf[cand.id]; ok {
			c.probes[i].Breaker = store.AdmitProbes(c.probes[i].Breaker, []store.LeaseToken{tok}, c.now)
		}
		c.claimed = append(c.claimed, store.ClaimedJob{Job: l.job, Token: tok})
	}
	return nil
}

// reloadRepeats reads again, with their checkpoint and effect ledger, the
// jobs leased before: a first lease has neither yet.
func (c *claim) reloadRepeats(ctx context.Context) error {
	for i := range c.claimed {
		if c.claimed[i].Token.Generation == 1 {
			continue
		}
		row, err := getJobTx(ctx, c.tx, c.p.Tenant, c.claimed[i].Token.JobID)
		if err != nil {
			return err
		}
		c.claimed[i].Job = row.job
		if c.claimed[i].Effects, err = listEffectsTx(ctx, c.tx, c.p.Tenant, c.claimed[i].Token.JobID); err != nil {
			return err
		}
	}
	return nil
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
		plan, err := store.DecideRequestCancel(row.job, store.ClientChange{Actor: p.Actor, Reason: p.Reason})
		if err != nil {
			return err
		}
		switch plan.Action {
		case store.ActCancelQueued:
			_, err = tx.ExecContext(ctx, qCancelQueued, p.Tenant, p.JobID, micros(now), p.Reason)
		case store.ActRequestCancel:
			_, err = tx.ExecContext(ctx, qRequestCancelLeased, p.Tenant, p.JobID, p.Reason)
		default: // already requested: unchanged, no second event
			job = row.job
			return nil
		}
		if err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		if _, err := appendEvent(ctx, tx, p.Tenant, p.JobID, now, plan.Event); err != nil {
			return err
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
