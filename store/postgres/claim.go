package postgres

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// claimLockClass is the first key of the advisory locks that serialise
// claims on a queue with a concurrency limit ("LH").
const claimLockClass = 0x4C48

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

// ClaimMany implements store.Store:
//
//  1. One statement (qClaimPlain; qClaimMany when a queue's keys are
//     limited) selects (FOR UPDATE SKIP LOCKED), leases and records the
//     LEASED events, each job going to the waiter of its slot
//     (store.ClaimSlots). Alone it commits by itself: one round trip.
//  2. Only when a queue has a concurrency limit, a transaction first locks
//     each such queue with an advisory lock, in sorted order, and counts
//     its unexpired leases, so that two claimers never exceed the limit
//     together.
//  3. Jobs whose dependency's breaker is not closed are skipped; the
//     tenant's breakers that are not closed are read in the same round
//     trip, and only when one is due for half-open probes does a second
//     transaction admit them (claimProbes).
//  4. Only when some job is on a later lease, its latest checkpoint and
//     effect ledger are read.
//
// The queues' policies (paused, default and maximum lease, concurrency
// limit) come from the store's policy cache, not from a query.
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
		return nil, s.readError(ctx, "claim", err)
	}
	owners, leases := claimSlotArgs(p)
	limited := false
	for _, pol := range policies {
		limited = limited || pol.Limited()
	}
	var (
		recs []*jobRecord
		gate []store.Breaker
		at   time.Time
	)
	if !limited {
		// The common case is one statement (with the breaker read
		// pipelined beside it): it commits on its own, in one round trip.
		err = s.retryTx(ctx, "claim", func() error {
			if hook := s.opts.BeforeCommit; hook != nil {
				if err := hook("claim"); err != nil {
					return &hookError{op: "claim", err: err}
				}
			}
			var err error
			recs, gate, at, err = claimRound(ctx, s.pool, p, queues, policies, nil, owners, leases)
			return err
		})
	} else {
		err = s.withTx(ctx, "claim", func(tx pgx.Tx) error {
			st, err := lockLimited(ctx, tx, p, queues, policies)
			if err != nil {
				return err
			}
			if recs, gate, at, err = claimRound(ctx, tx, p, queues, policies, st, owners, leases); err != nil {
				return err
			}
			return addRateStarts(ctx, tx, p.Tenant, policies, st, recs)
		})
	}
	if err != nil {
		return nil, err
	}
	if len(gate) > 0 && len(recs) < len(owners) {
		more, err := s.claimProbes(ctx, p, queues, policies, limited, gate, at, owners[len(recs):], leases[len(recs):])
		recs = append(recs, more...)
		if err != nil && len(recs) == 0 {
			return nil, err
		}
		if err != nil {
			// The main claim committed: hand out what it leased rather
			// than leave those leases to expire.
			s.logger.WarnContext(ctx, "probe claim failed", slog.Any("error", err))
		}
	}
	out, err := s.claimedJobs(ctx, p.Tenant, recs)
	if err != nil {
		return nil, s.readError(ctx, "claim", err)
	}
	return out, nil
}

// claimSlotArgs are the claim statement's owner and lease of each slot
// (store.ClaimSlots).
func claimSlotArgs(p store.ClaimManyParams) (owners []string, leases []int64) {
	slots := store.ClaimSlots(p.Waiters)
	owners, leases = make([]string, len(slots)), make([]int64, len(slots))
	for i, w := range slots {
		owners[i], leases[i] = p.Waiters[w].Worker, int64(p.Waiters[w].LeaseDuration)
	}
	return owners, leases
}

// limitState is what a claim counted, under the advisory locks, of the
// queues with limits: their usage and, for rate-limited ones, the current
// rate window.
type limitState struct {
	usage   map[string]store.QueueUsage
	windows map[string]time.Time
}

// lockLimited takes the advisory lock of each queue with a limit, in
// sorted order (no lock cycles between claimers), and counts its unexpired
// leases (by concurrency key too, when keys are limited) in one round
// trip; a queue with a rate limit costs a second, for its window's starts.
func lockLimited(ctx context.Context, tx pgx.Tx, p store.ClaimManyParams, queues []string,
	policies map[store.QueueRef]store.QueuePolicy) (*limitState, error) {
	var limited, keyed, rated []string
	for _, q := range queues {
		pol := policies[store.QueueRef{Tenant: p.Tenant, Queue: q}]
		if !pol.Limited() {
			continue
		}
		limited = append(limited, q)
		if pol.KeyConcurrencyLimit > 0 {
			keyed = append(keyed, q)
		}
		if pol.RateLimit.Starts > 0 {
			rated = append(rated, q)
		}
	}
	st := &limitState{usage: map[string]store.QueueUsage{}, windows: map[string]time.Time{}}
	now, err := st.readLeases(ctx, tx, p, limited, keyed)
	if err != nil || len(rated) == 0 {
		return st, err
	}
	return st, st.readStarts(ctx, tx, p.Tenant, rated, policies, now)
}

// usageOf is queue q's usage so far.
func (st *limitState) usageOf(q string) store.QueueUsage {
	u, ok := st.usage[q]
	if !ok {
		u = store.QueueUsage{ActiveByKey: map[string]int64{}, StartedByKey: map[string]int64{}}
	}
	return u
}

// readLeases locks the limited queues and counts their active leases (by
// key where keyed), and returns the transaction's instant.
func (st *limitState) readLeases(ctx context.Context, tx pgx.Tx, p store.ClaimManyParams, limited, keyed []string) (time.Time, error) {
	var now time.Time
	b := &pgx.Batch{}
	for _, q := range limited {
		b.Queue(qAdvisoryLockQueue, int32(claimLockClass), p.Tenant+"/"+q)
	}
	b.Queue(qActiveLeases, p.Tenant, limited, nowArg(p.Now))
	if len(keyed) > 0 {
		b.Queue(qActiveKeyLeases, p.Tenant, keyed, nowArg(p.Now))
	}
	b.Queue(qNowOr, nowArg(p.Now))
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range limited {
		if _, err := br.Exec(); err != nil {
			return now, err
		}
	}
	if err := eachRow(br, func(r pgx.Rows) error {
		var (
			q string
			n int64
		)
		if err := r.Scan(&q, &n); err != nil {
			return err
		}
		u := st.usageOf(q)
		u.Active = n
		st.usage[q] = u
		return nil
	}); err != nil {
		return now, err
	}
	if len(keyed) > 0 {
		if err := eachRow(br, func(r pgx.Rows) error {
			var (
				q, k string
				n    int64
			)
			if err := r.Scan(&q, &k, &n); err != nil {
				return err
			}
			u := st.usageOf(q)
			u.ActiveByKey[k] = n
			st.usage[q] = u
			return nil
		}); err != nil {
			return now, err
		}
	}
	if err := br.QueryRow().Scan(&now); err != nil {
		return now, err
	}
	return now, br.Close()
}

// readStarts reads the starts of the rate-limited queues' current windows.
func (st *limitState) readStarts(ctx context.Context, tx pgx.Tx, tenant string, rated []string,
	policies map[store.QueueRef]store.QueuePolicy, now time.Time) error {
	wins := make([]time.Time, len(rated))
	for i, q := range rated {
		wins[i] = store.RateWindowStart(policies[store.QueueRef{Tenant: tenant, Queue: q}], now)
		st.windows[q] = wins[i]
	}
	rows, err := tx.Query(ctx, qRateStarts, tenant, rated, wins)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			q, k string
			n    int64
		)
		if err := rows.Scan(&q, &k, &n); err != nil {
			return err
		}
		u := st.usageOf(q)
		u.StartedByKey[k] = n
		st.usage[q] = u
	}
	return rows.Err()
}

// eachRow calls fn for each row of the batch's next query.
func eachRow(br pgx.BatchResults, fn func(pgx.Rows) error) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// addRateStarts counts the jobs just leased in their queues' rate windows
// (store.RateStarts) and drops the windows before the current ones, in
// the claim's transaction, under its advisory locks.
func addRateStarts(ctx context.Context, tx pgx.Tx, tenant string, policies map[store.QueueRef]store.QueuePolicy,
	st *limitState, recs []*jobRecord) error {
	if len(st.windows) == 0 || len(recs) == 0 {
		return nil
	}
	keys := map[string][]string{}
	for _, r := range recs {
		keys[r.job.Queue] = append(keys[r.job.Queue], r.job.ConcurrencyKey)
	}
	var (
		qs, ks, dropQ []string
		ws, dropW     []time.Time
		ns            []int64
	)
	for _, q := range slices.Sorted(maps.Keys(st.windows)) {
		w := st.windows[q]
		dropQ, dropW = append(dropQ, q), append(dropW, w)
		starts := store.RateStarts(policies[store.QueueRef{Tenant: tenant, Queue: q}], keys[q])
		for _, k := range slices.Sorted(maps.Keys(starts)) {
			qs, ws, ks, ns = append(qs, q), append(ws, w), append(ks, k), append(ns, starts[k])
		}
	}
	b := &pgx.Batch{}
	b.Queue(qAddRateStarts, tenant, qs, ws, ks, ns)
	b.Queue(qDropRateWindows, tenant, dropQ, dropW)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range 2 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

// batcher is a pool, connection or transaction that pipelines.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// claimRound is one claim round: the claim statement (skipping jobs held
// by breakers) pipelined with qGateBreakers, which says whether a breaker of
// the tenant is not closed and so might be due for probes, and the
// instant that was judged at.
func claimRound(ctx context.Context, q batcher, p store.ClaimManyParams, queues []string,
	policies map[store.QueueRef]store.QueuePolicy, st *limitState, owners []string, leases []int64,
) (recs []*jobRecord, gate []store.Breaker, at time.Time, err error) {
	query, args := claimArgs(p, queues, policies, st, owners, leases, "")
	if query == "" {
		return nil, nil, time.Time{}, nil
	}
	b := &pgx.Batch{}
	b.Queue(query, args...)
	b.Queue(qGateBreakers, p.Tenant, nowArg(p.Now))
	br := q.SendBatch(ctx, b)
	defer br.Close()
	rows, err := br.Query()
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	if recs, err = collect(rows, func(r pgx.Row) (*jobRecord, error) { return scanJob(r) }); err != nil {
		return nil, nil, time.Time{}, err
	}
	rows, err = br.Query()
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	list, err := collect(rows, func(r pgx.Row) (*store.Breaker, error) { return scanBreaker(r, &at) })
	if err != nil {
		return nil, nil, time.Time{}, err
	}
	for _, x := range list {
		gate = append(gate, *x)
	}
	return recs, gate, at.UTC(), br.Close()
}

// claimStatement runs the claim statement for the open queues and returns the
// leased rows; probe, when set, takes only that dependency's jobs.
func claimStatement(ctx context.Context, q querier, p store.ClaimManyParams, queues []string,
	policies map[store.QueueRef]store.QueuePolicy, st *limitState, owners []string, leases []int64, probe string) ([]*jobRecord, error) {
	query, args := claimArgs(p, queues, policies, st, owners, leases, probe)
	if query == "" {
		return nil, nil
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r pgx.Row) (*jobRecord, error) { return scanJob(r) })
}

// claimArgs is the claim statement and its arguments for the open queues
// (not paused, with room under their limits given what st counted; see
// store.DecideQueueRoom): qClaimPlain unless the claim is a probe or a
// queue's keys are limited, then qClaimMany. The query is "" when no queue
// is open.
func claimArgs(p store.ClaimManyParams, queues []string, policies map[store.QueueRef]store.QueuePolicy,
	st *limitState, owners []string, leases []int64, probe string) (query string, args []any) {
	total := len(owners)
	var (
		keyed                    bool
		names                    []string
		caps, fetches, keyRooms  []int32
		defaultLeases, maxLeases []int64
		roomQueues, roomKeys     []string
		roomVals                 []int32
	)
	for _, name := range queues {
		pol := policies[store.QueueRef{Tenant: p.Tenant, Queue: name}]
		if pol.Paused {
			continue
		}
		room := store.QueueRoom{Cap: total, Fetch: total, KeyRoom: -1}
		if pol.Limited() && st != nil {
			room = store.DecideQueueRoom(pol, total, st.usage[name])
		}
		if room.Cap <= 0 {
			continue
		}
		names = append(names, name)
		caps, fetches, keyRooms = append(caps, int32(room.Cap)), append(fetches, int32(room.Fetch)), append(keyRooms, int32(room.KeyRoom))
		keyed = keyed || room.KeyRoom >= 0 || room.Fetch != room.Cap
		defaultLeases = append(defaultLeases, int64(pol.LeaseFor(0)))
		maxLeases = append(maxLeases, int64(pol.LeaseFor(store.LeaseDurationMax)))
		for _, k := range slices.Sorted(maps.Keys(room.Keys)) {
			roomQueues, roomKeys, roomVals = append(roomQueues, name), append(roomKeys, k), append(roomVals, int32(room.Keys[k]))
		}
	}
	if len(names) == 0 {
		return "", nil
	}
	args = []any{p.Tenant, names, caps, defaultLeases, maxLeases, owners, leases, nowArg(p.Now), total}
	if probe == "" && !keyed {
		return qClaimPlain, args
	}
	return qClaimMany, append(args, probe, fetches, keyRooms, roomQueues, roomKeys, roomVals)
}

// claimedJobs turns leased rows into claims in claim order, with the
// latest checkpoint and effect ledger of jobs on a later lease. Those are
// read after the claim committed: nobody but the new holder can change
// them now.
func (s *Store) claimedJobs(ctx context.Context, tenant string, recs []*jobRecord) ([]store.ClaimedJob, error) {
	if len(recs) == 0 {
		return nil, nil
	}
	// RETURNING has no order; hand jobs out in claim order.
	slices.SortFunc(recs, func(a, b *jobRecord) int {
		x, y := a.job, b.job
		return cmp.Or(cmp.Compare(y.Priority, x.Priority), x.AvailableAt.Compare(y.AvailableAt), cmp.Compare(x.ID, y.ID))
	})
	var again []string
	for _, r := range recs {
		if r.job.LeaseGeneration > 1 { // a first lease has no checkpoint or ledger yet
			again = append(again, r.job.ID)
		}
	}
	var (
		checkpoints = map[string]*store.Checkpoint{}
		effects     = map[string][]store.Effect{}
		err         error
	)
	if len(again) > 0 {
		b := &pgx.Batch{}
		b.Queue(qLatestCheckpoints, tenant, again)
		b.Queue(qEffectsForJobs, tenant, again)
		br := s.pool.SendBatch(ctx, b)
		if checkpoints, err = checkpointsFrom(br.Query()); err != nil {
			br.Close()
			return nil, err
		}
		if effects, err = effectsFrom(br.Query()); err != nil {
			br.Close()
			return nil, err
		}
		if err := br.Close(); err != nil {
			return nil, err
		}
	}
	out := make([]store.ClaimedJob, 0, len(recs))
	for _, r := range recs {
		j := r.job
		j.Checkpoint = checkpoints[j.ID]
		out = append(out, store.ClaimedJob{
			Job:     j,
			Token:   store.LeaseToken{JobID: j.ID, Generation: j.LeaseGeneration, WorkerID: j.LeaseOwner},
			Effects: effects[j.ID],
		})
	}
	return out, nil
}

// latestCheckpointsView returns the latest checkpoint of each job that has
// one; without their states for JobViewBasic.
func latestCheckpointsView(ctx context.Context, q querier, tenant string, ids []string, view store.JobView) (map[string]*store.Checkpoint, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	query := qLatestCheckpoints
	if view == store.JobViewBasic {
		query = qLatestCheckpointsBasic
	}
	rows, err := q.Query(ctx, query, tenant, ids)
	return checkpointsFrom(rows, err)
}

// checkpointsFrom is latestCheckpoints on the result of qLatestCheckpoints
// (rows, err), so that the query can be pipelined.
func checkpointsFrom(rows pgx.Rows, err error) (map[string]*store.Checkpoint, error) {
	if err != nil {
		return nil, err
	}
	cps, err := collect(rows, scanCheckpoint)
	if err != nil {
		return nil, err
	}
	out := make(map[string]*store.Checkpoint, len(cps))
	for _, c := range cps {
		out[c.JobID] = c
	}
	return out, nil
}

// effectsFrom is effectsForJobs on the result of qEffectsForJobs (rows,
// err), so that the query can be pipelined.
func effectsFrom(rows pgx.Rows, err error) (map[string][]store.Effect, error) {
	if err != nil {
		return nil, err
	}
	effs, err := collect(rows, scanEffect)
	if err != nil {
		return nil, err
	}
	out := map[string][]store.Effect{}
	for _, e := range effs {
		out[e.JobID] = append(out[e.JobID], *e)
	}
	return out, nil
}

// ReapExpired implements store.Store: store.Reap in one transaction.
func (s *Store) ReapExpired(ctx context.Context, p store.ReapParams) (store.ReapResult, error) {
	if p.Limit < 0 {
		return store.ReapResult{}, store.Invalid("limit", "must not be negative")
	}
	var out store.ReapResult
	err := s.withLazyTx(ctx, "reap", func(tx *lazyTx) error {
		var err error
		out, err = store.Reap(ctx, reportTx{tx: tx, s: s}, p)
		return err
	})
	if err != nil {
		return store.ReapResult{}, err
	}
	return out, nil
}

// LockExpired implements store.ReapTx with qLockExpired.
func (r reportTx) LockExpired(ctx context.Context, now time.Time, limit int) ([]store.Held, error) {
	rows, err := r.tx.Query(ctx, qLockExpired, nowArg(now), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Held
	for rows.Next() {
		var (
			at          time.Time
			leasedUntil *time.Time
			leasedSeq   *int64
			logLen      int
		)
		rec, err := scanJob(rows, &at, &leasedUntil, &leasedSeq, &logLen)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Held{Job: rec.job, CancelReason: rec.cancelReason, EventSeq: rec.lastEventSeq, Now: at.UTC(),
			LeasedUntil: timeOrZero(leasedUntil), LeasedSeq: int64OrZero(leasedSeq), AttemptLogLen: logLen})
	}
	return out, rows.Err()
}

// NextExpiry implements store.ReapTx.
func (r reportTx) NextExpiry(ctx context.Context) (time.Time, error) {
	var t *time.Time
	if err := r.tx.QueryRow(ctx, qNextExpiry).Scan(&t); err != nil {
		return time.Time{}, err
	}
	return timeOrZero(t), nil
}
