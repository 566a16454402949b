package postgres

import (
	"cmp"
	"context"
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
//  1. qClaimMany selects (FOR UPDATE SKIP LOCKED), leases and records the
//     LEASED events in one statement, each job going to the waiter of its
//     slot (store.ClaimSlots). Alone it commits by itself: one round trip.
//  2. Only when a queue has a concurrency limit, a transaction first locks
//     each such queue with an advisory lock, in sorted order, and counts
//     its unexpired leases, so that two claimers never exceed the limit
//     together.
//  3. Only when some job is on a later lease, its latest checkpoint and
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
	slots := store.ClaimSlots(p.Waiters)
	owners := make([]string, len(slots))
	leases := make([]int64, len(slots))
	for i, w := range slots {
		owners[i], leases[i] = p.Waiters[w].Worker, int64(p.Waiters[w].LeaseDuration)
	}
	limited := false
	for _, pol := range policies {
		limited = limited || (!pol.Paused && pol.ConcurrencyLimit > 0)
	}
	var recs []*jobRecord
	if !limited {
		// The common case is one statement: it commits on its own, in one
		// round trip.
		err = s.retryTx(ctx, "claim", func() error {
			if hook := s.opts.BeforeCommit; hook != nil {
				if err := hook("claim"); err != nil {
					return &hookError{op: "claim", err: err}
				}
			}
			var err error
			recs, err = claimStatement(ctx, s.pool, p, queues, policies, nil, owners, leases)
			return err
		})
	} else {
		err = s.withTx(ctx, "claim", func(tx pgx.Tx) error {
			active, err := lockLimited(ctx, tx, p, queues, policies)
			if err != nil {
				return err
			}
			recs, err = claimStatement(ctx, tx, p, queues, policies, active, owners, leases)
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	out, err := s.claimedJobs(ctx, p.Tenant, recs)
	if err != nil {
		return nil, s.readError(ctx, "claim", err)
	}
	return out, nil
}

// lockLimited takes the advisory lock of each queue with a concurrency
// limit, in sorted order (no lock cycles between claimers), and counts its
// unexpired leases, in one round trip.
func lockLimited(ctx context.Context, tx pgx.Tx, p store.ClaimManyParams, queues []string,
	policies map[store.QueueRef]store.QueuePolicy) (map[string]int64, error) {
	var limited []string
	for _, q := range queues {
		if pol := policies[store.QueueRef{Tenant: p.Tenant, Queue: q}]; !pol.Paused && pol.ConcurrencyLimit > 0 {
			limited = append(limited, q)
		}
	}
	b := &pgx.Batch{}
	for _, q := range limited {
		b.Queue(qAdvisoryLockQueue, int32(claimLockClass), p.Tenant+"/"+q)
	}
	b.Queue(qActiveLeases, p.Tenant, limited, nowArg(p.Now))
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range limited {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	active := map[string]int64{}
	for rows.Next() {
		var q string
		var n int64
		if err := rows.Scan(&q, &n); err != nil {
			rows.Close()
			return nil, err
		}
		active[q] = n
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return active, br.Close()
}

// claimStatement runs qClaimMany for the open queues (not paused, with
// room under their limit given the active leases counted) and returns the
// leased rows.
func claimStatement(ctx context.Context, q querier, p store.ClaimManyParams, queues []string,
	policies map[store.QueueRef]store.QueuePolicy, active map[string]int64, owners []string, leases []int64) ([]*jobRecord, error) {
	total := len(owners)
	var (
		names                    []string
		caps                     []int32
		defaultLeases, maxLeases []int64
	)
	for _, name := range queues {
		pol := policies[store.QueueRef{Tenant: p.Tenant, Queue: name}]
		if pol.Paused {
			continue
		}
		capacity := int64(total)
		if pol.ConcurrencyLimit > 0 {
			capacity = min(capacity, int64(pol.ConcurrencyLimit)-active[name])
		}
		if capacity <= 0 {
			continue
		}
		names = append(names, name)
		caps = append(caps, int32(capacity))
		defaultLeases = append(defaultLeases, int64(pol.LeaseFor(0)))
		maxLeases = append(maxLeases, int64(pol.LeaseFor(store.LeaseDurationMax)))
	}
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := q.Query(ctx, qClaimMany, p.Tenant, names, caps, defaultLeases, maxLeases, owners, leases, nowArg(p.Now), total)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r pgx.Row) (*jobRecord, error) { return scanJob(r) })
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
		var at time.Time
		rec, err := scanJob(rows, &at)
		if err != nil {
			return nil, err
		}
		out = append(out, store.Held{Job: rec.job, CancelReason: rec.cancelReason, EventSeq: rec.lastEventSeq, Now: at.UTC()})
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
