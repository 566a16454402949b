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

// Claim implements store.Store, in one transaction:
//
//  1. expired leases of the queues that must not be taken over are ended
//     (claimPrelude): a job whose cancellation was requested becomes
//     CANCELLED (attempt lease_expired, one CANCELLED event), and a job
//     whose budget is spent (attempts >= max_attempts, or its retry
//     deadline passed) becomes DEAD (attempt lease_expired, LEASE_EXPIRED,
//     RUN_FAILED and DEAD events), so neither stays stuck nor is claimed
//     forever;
//  2. paused queues are dropped; each queue with a concurrency limit is
//     locked (transaction advisory lock) and gets the share its unexpired
//     leases leave;
//  3. qClaim selects (FOR UPDATE SKIP LOCKED) and leases the jobs in one
//     statement; a job whose lease expired (with budget left) is taken over
//     at generation + 1, its old attempt closed as lease_expired with a
//     LEASE_EXPIRED event;
//  4. every claimed job gets its LEASED event and a running attempt row,
//     and is returned with its latest checkpoint and effect ledger.
func (s *Store) Claim(ctx context.Context, p store.ClaimParams) ([]store.ClaimedJob, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := store.ValidateClaim(p); err != nil {
		return nil, err
	}
	var out []store.ClaimedJob
	err := s.withTx(ctx, "claim", func(tx pgx.Tx) error {
		var err error
		out, err = s.claim(ctx, tx, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// claimed is one row of qClaim.
type claimed struct {
	rec            *jobRecord
	prevState      string
	prevOwner      string
	prevGeneration int64
}

func (s *Store) claim(ctx context.Context, tx pgx.Tx, p store.ClaimParams) ([]store.ClaimedJob, error) {
	queues := slices.Compact(slices.Sorted(slices.Values(p.Queues)))
	now, policies, err := claimPrelude(ctx, tx, p.Tenant, queues, p.Now)
	if err != nil {
		return nil, err
	}

	var names []string
	var caps []int32
	var leases []int64
	var limited []string
	for _, q := range queues {
		if pol := policies[q]; !pol.Paused && pol.ConcurrencyLimit > 0 {
			limited = append(limited, q)
		}
	}
	active := map[string]int64{}
	if len(limited) > 0 {
		// Sorted lock order: two claimers never wait on each other in a
		// cycle.
		for _, q := range limited {
			if _, err := tx.Exec(ctx, qAdvisoryLockQueue, int32(claimLockClass), p.Tenant+"/"+q); err != nil {
				return nil, err
			}
		}
		rows, err := tx.Query(ctx, qActiveLeases, p.Tenant, limited, now)
		if err != nil {
			return nil, err
		}
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
	}
	for _, q := range queues {
		pol := policies[q]
		if pol.Paused {
			continue
		}
		capacity := int64(p.Max)
		if pol.ConcurrencyLimit > 0 {
			capacity = min(capacity, int64(pol.ConcurrencyLimit)-active[q])
		}
		if capacity <= 0 {
			continue
		}
		names = append(names, q)
		caps = append(caps, int32(capacity))
		leases = append(leases, int64(cmp.Or(p.LeaseDuration, pol.DefaultLeaseDuration, store.LeaseDurationDefault)))
	}
	if len(names) == 0 {
		return nil, nil
	}

	rows, err := tx.Query(ctx, qClaim, p.Tenant, names, caps, leases, now, p.Max, p.Worker)
	if err != nil {
		return nil, err
	}
	var got []claimed
	for rows.Next() {
		var c claimed
		c.rec, err = scanJob(rows, &c.prevState, &c.prevOwner, &c.prevGeneration)
		if err != nil {
			rows.Close()
			return nil, err
		}
		got = append(got, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(got) == 0 {
		return nil, nil
	}
	// RETURNING has no order; hand jobs out in claim order.
	slices.SortFunc(got, func(a, b claimed) int {
		x, y := a.rec.job, b.rec.job
		return cmp.Or(cmp.Compare(y.Priority, x.Priority), x.AvailableAt.Compare(y.AvailableAt), cmp.Compare(x.ID, y.ID))
	})

	var (
		evs               eventBatch
		expiredIDs, ids   []string
		expiredGens, gens []int64
		attemptNums       []int32
	)
	for _, c := range got {
		j := c.rec.job
		if c.prevState == string(store.JobStateLeased) {
			expiredIDs = append(expiredIDs, j.ID)
			expiredGens = append(expiredGens, c.prevGeneration)
			evs.add(j.ID, c.rec.lastEventSeq-1, event{typ: store.EventLeaseExpired, data: map[string]any{
				"worker_id": c.prevOwner, "lease_generation": c.prevGeneration,
			}})
		}
		evs.add(j.ID, c.rec.lastEventSeq, event{typ: store.EventLeased, data: map[string]any{
			"worker_id": p.Worker, "lease_generation": j.LeaseGeneration, "attempt": j.Attempts,
			"lease_expires_at": j.LeaseExpiresAt,
		}})
		ids = append(ids, j.ID)
		gens = append(gens, j.LeaseGeneration)
		attemptNums = append(attemptNums, j.Attempts)
	}
	// The rest is one pipelined batch: the writes touch only the claimed
	// jobs' attempts and events, which the reads (checkpoints, effects)
	// do not look at.
	b := &pgx.Batch{}
	if len(expiredIDs) > 0 {
		b.Queue(qCloseAttempts, p.Tenant, string(store.AttemptLeaseExpired), now, expiredIDs, expiredGens)
	}
	b.Queue(qInsertEvents, p.Tenant, now, evs.jobIDs, evs.seqs, evs.types, evs.data)
	b.Queue(qInsertAttempts, p.Tenant, p.Worker, now, ids, attemptNums, gens)
	b.Queue(qLatestCheckpoints, p.Tenant, ids)
	b.Queue(qEffectsForJobs, p.Tenant, ids)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range b.Len() - 2 {
		if _, err := br.Exec(); err != nil {
			return nil, err
		}
	}
	checkpoints, err := checkpointsFrom(br.Query())
	if err != nil {
		return nil, err
	}
	effects, err := effectsFrom(br.Query())
	if err != nil {
		return nil, err
	}
	if err := br.Close(); err != nil {
		return nil, err
	}
	out := make([]store.ClaimedJob, 0, len(got))
	for _, c := range got {
		j := c.rec.job
		j.Checkpoint = checkpoints[j.ID]
		out = append(out, store.ClaimedJob{
			Job:     j,
			Token:   store.LeaseToken{JobID: j.ID, Generation: j.LeaseGeneration, WorkerID: p.Worker},
			Effects: effects[j.ID],
		})
	}
	return out, nil
}

// claimPrelude returns the transaction's instant and the queues' effective
// policies, and ends the expired leases of the queues that no claim may take
// over, in the claim's transaction:
//
//   - a job whose cancellation was requested and whose holder let the lease
//     expire without acknowledging becomes CANCELLED (one CANCELLED event);
//   - a job whose holder let the lease expire with no report while its
//     budget is spent becomes DEAD: LEASE_EXPIRED, then RUN_FAILED with
//     store.ErrorCodeLeaseExpired, then DEAD, its last error set. This is
//     what ends a poison pill whose worker crashes every time: it never
//     reports, so only the claim can notice the budget is gone.
//
// Either way the expired attempt is closed as lease_expired. qClaim skips
// both kinds, so a row left for a later claim (past the statements' LIMIT,
// or locked by another claimer) is never leased meanwhile.
//
// The clock, the policies and both UPDATEs go in one pipelined batch (one
// round trip; the UPDATEs read the clock as now() when the caller gave no
// Now); closing the ended attempts and appending their events takes a second
// round trip only when some lease was ended.
func claimPrelude(ctx context.Context, tx pgx.Tx, tenant string, queues []string, at time.Time) (time.Time, map[string]store.QueuePolicy, error) {
	expired := store.JobError{Code: store.ErrorCodeLeaseExpired, Message: store.ErrorMessageLeaseExpired, Retryable: true}
	b := &pgx.Batch{}
	if at.IsZero() {
		b.Queue(qNow)
	}
	b.Queue(qPoliciesForQueues, tenant, queues)
	b.Queue(qCancelExpiredRequested, tenant, queues, nowArg(at))
	b.Queue(qDeadLetterExpired, tenant, queues, nowArg(at), expired.Code, expired.Message)
	br := tx.SendBatch(ctx, b)
	defer br.Close()

	now := normTime(at)
	if at.IsZero() {
		if err := br.QueryRow().Scan(&now); err != nil {
			return time.Time{}, nil, err
		}
		now = now.UTC()
	}
	rows, err := br.Query()
	policies, err := policiesFrom(rows, err, queues)
	if err != nil {
		return time.Time{}, nil, err
	}

	var (
		evs  eventBatch
		ids  []string
		gens []int64
	)
	rows, err = br.Query()
	if err != nil {
		return time.Time{}, nil, err
	}
	for rows.Next() {
		var id, owner, reason string
		var gen, seq int64
		if err := rows.Scan(&id, &owner, &gen, &seq, &reason); err != nil {
			rows.Close()
			return time.Time{}, nil, err
		}
		ids = append(ids, id)
		gens = append(gens, gen)
		evs.add(id, seq, event{typ: store.EventCancelled, data: map[string]any{
			"reason": reason, "worker_id": owner, "lease_generation": gen, "lease_expired": true,
		}})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return time.Time{}, nil, err
	}

	rows, err = br.Query()
	if err != nil {
		return time.Time{}, nil, err
	}
	for rows.Next() {
		var id, owner string
		var gen, seq int64
		var attempts, maxAttempts int32
		if err := rows.Scan(&id, &owner, &gen, &seq, &attempts, &maxAttempts); err != nil {
			rows.Close()
			return time.Time{}, nil, err
		}
		ids = append(ids, id)
		gens = append(gens, gen)
		holder := store.LeaseToken{JobID: id, Generation: gen, WorkerID: owner}
		runFailed := holderData(holder)
		runFailed["attempt"] = attempts
		evs.add(id, seq-2, event{typ: store.EventLeaseExpired, data: holderData(holder)})
		evs.add(id, seq-1, event{typ: store.EventRunFailed, data: errorData(runFailed, expired)})
		evs.add(id, seq, event{typ: store.EventDead, data: deadData(attempts, maxAttempts)})
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return time.Time{}, nil, err
	}
	if err := br.Close(); err != nil {
		return time.Time{}, nil, err
	}
	if len(ids) == 0 {
		return now, policies, nil
	}

	b = &pgx.Batch{}
	b.Queue(qCloseAttempts, tenant, string(store.AttemptLeaseExpired), now, ids, gens)
	b.Queue(qInsertEvents, tenant, now, evs.jobIDs, evs.seqs, evs.types, evs.data)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return time.Time{}, nil, err
	}
	return now, policies, nil
}

// latestCheckpoints returns the latest checkpoint of each job that has one.
func latestCheckpoints(ctx context.Context, q querier, tenant string, ids []string) (map[string]*store.Checkpoint, error) {
	rows, err := q.Query(ctx, qLatestCheckpoints, tenant, ids)
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

// effectsForJobs returns each job's effect ledger ordered by key.
func effectsForJobs(ctx context.Context, q querier, tenant string, ids []string) (map[string][]store.Effect, error) {
	rows, err := q.Query(ctx, qEffectsForJobs, tenant, ids)
	return effectsFrom(rows, err)
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
