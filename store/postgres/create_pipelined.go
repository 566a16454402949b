package postgres

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// pipelinable reports whether the calls can be created in one round trip
// (createPipelined): no request has a request id or a unique key, whose
// statements answer questions the later ones depend on.
func pipelinable(calls []createCall) bool {
	for _, c := range calls {
		for _, r := range c.p.Requests {
			if r.RequestID != "" || r.Unique != nil {
				return false
			}
		}
	}
	return true
}

// createPipelined creates the calls in one round trip: BEGIN, now(), the
// insert (its times taken from now() in SQL), the notifications,
// the handoff claims and their deferred notifications, and COMMIT, in one
// pgx batch. A statement that fails makes the server skip the rest, the
// COMMIT included, and the transaction is rolled back: nothing of the
// batch is left.
//
// A failed handoff claim reports handoffFailed: the caller creates the
// calls again the slow way (createCalls), whose savepoint lets the creates
// commit without the claims.
func (s *Store) createPipelined(ctx context.Context, calls []createCall) (out []createAnswer, handoffFailed bool, err error) {
	// The policies come from the cache (which may use another connection
	// of the pool), read before the batch takes its connection; a failure
	// maps like any of the transaction's.
	err = s.retryTx(ctx, "create", func() error {
		policies, err := s.callPolicies(ctx, calls)
		if err != nil {
			return err
		}
		var failed error
		out, handoffFailed, failed = s.sendCreates(ctx, calls, policies)
		return failed
	})
	return out, handoffFailed, err
}

// sendCreates is one attempt of createPipelined.
func (s *Store) sendCreates(ctx context.Context, calls []createCall, policies map[store.QueueRef]store.QueuePolicy) ([]createAnswer, bool, error) {
	out := make([]createAnswer, len(calls))
	idx := make([]int, len(calls))
	for i := range idx {
		idx[i] = i
	}
	// The jobs are decided at ref, the Go clock; the rows of calls without
	// a Now of their own take now() instead, shifted the same way.
	ref := normTime(time.Now())
	all, _, dupOf, err := s.pendingCreates(calls, idx, ref, policies, out)
	if err != nil {
		return nil, false, err
	}
	var inserts []*pendingCreate
	for _, pc := range all {
		if out[pc.call].err == nil {
			inserts = append(inserts, pc)
		}
	}
	h := newHandoff(calls, policies)
	if hook := s.opts.BeforeCommit; hook != nil {
		if err := hook("create"); err != nil {
			return nil, false, &hookError{op: "create", err: err}
		}
	}
	b := &pgx.Batch{}
	b.Queue("begin")
	b.Queue(qNow)
	var sh []shift
	if len(inserts) > 0 {
		args, shifts, err := insertNowArgs(calls, inserts, ref)
		if err != nil {
			return nil, false, err
		}
		b.Queue(qInsertJobsNow, args...)
		sh = shifts
	}
	wake := s.queueNotifications(b, inserts, h)
	var (
		runs []int // the call of each claim queued
		refs []store.QueueRef
	)
	if h != nil {
		for _, c := range h.claims {
			if out[c.call].err != nil {
				continue
			}
			queues := slices.Compact(slices.Sorted(slices.Values(c.claim.Queues)))
			owners, leases := claimSlotArgs(c.claim)
			if query, args := claimArgs(c.claim, queues, policies, nil, owners, leases, ""); query != "" {
				b.Queue(query, args...)
				runs = append(runs, c.call)
			}
		}
		refs = slices.SortedFunc(maps.Keys(h.fresh), compareRefs)
		for _, q := range refs {
			b.Queue(qNotifyIfQueued, s.channel, encodeNotification(q.Tenant, q.Queue), q.Tenant, h.fresh[q])
		}
	}
	b.Queue("commit")

	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, err
	}
	defer conn.Release()
	tx := &lazyTx{conn: conn.Conn(), begun: true}
	var dbNow time.Time
	handoffFailed, err := readCreates(conn.Conn().SendBatch(ctx, b), &dbNow, len(inserts) > 0, wake, runs, len(refs), out)
	if err != nil {
		// Whatever failed, the server skipped the statements after it
		// and the COMMIT: roll back the open transaction.
		return nil, handoffFailed && ctx.Err() == nil, tx.finish(ctx, err)
	}
	for i, pc := range inserts {
		sh[i].apply(pc.job, dbNow.UTC())
		out[pc.call].results[pc.idx] = store.CreateResult{Job: pc.job}
	}
	for pc, first := range dupOf {
		if out[pc.call].err == nil {
			out[pc.call].results[pc.idx] = store.CreateResult{Job: out[first.call].results[first.idx].Job, Duplicate: true}
		}
	}
	for i := range out {
		if out[i].err != nil {
			out[i].results = nil
		}
	}
	return out, false, nil
}

// readCreates reads the answers of createPipelined's batch br, in the
// order it queued them, and closes it. handoffFailed is set when the
// inserts succeeded and a claim or its notification failed.
func readCreates(br pgx.BatchResults, dbNow *time.Time, inserted bool, wake int, runs []int, notifies int, out []createAnswer) (handoffFailed bool, err error) {
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return false, err
	}
	if err := br.QueryRow().Scan(dbNow); err != nil {
		return false, err
	}
	if inserted {
		if _, err := br.Exec(); err != nil {
			return false, duplicateIDError(err)
		}
	}
	for range wake {
		if _, err := br.Exec(); err != nil {
			return false, err
		}
	}
	for _, ci := range runs {
		rows, err := br.Query()
		if err != nil {
			return true, err
		}
		recs, err := collect(rows, func(r pgx.Row) (*jobRecord, error) { return scanJob(r) })
		if err != nil {
			return true, err
		}
		out[ci].leased = append(out[ci].leased, recs...)
	}
	for range notifies {
		if _, err := br.Exec(); err != nil {
			return true, err
		}
	}
	tag, err := br.Exec()
	if err != nil {
		return false, err
	}
	if tag.String() != "COMMIT" {
		return false, fmt.Errorf("commit answered %q", tag.String())
	}
	return false, br.Close()
}

// shift is how a job decided at the Go clock's ref takes the
// transaction's now() instead: relative, its creation is now(), and its
// available_at and retry deadline (when set) are now() plus offsets in
// microseconds, the ones qInsertJobsNow adds in SQL.
type shift struct {
	relative            bool
	available, deadline *int64
}

// apply gives j the times the insert gave its row, now being the
// transaction's now().
func (s shift) apply(j *store.Job, now time.Time) {
	if !s.relative {
		return
	}
	j.CreatedAt = now
	if s.available != nil {
		j.AvailableAt = now.Add(time.Duration(*s.available) * time.Microsecond)
	}
	if s.deadline != nil {
		j.RetryDeadline = now.Add(time.Duration(*s.deadline) * time.Microsecond)
	}
}

// insertNowArgs are qInsertJobsNow's arrays: insertArgs' first thirteen,
// where the times of jobs decided at ref (calls without a Now) are null
// and given instead as offsets from now() in microseconds ($14 available
// at, $15 retry deadline), and each insert's shift. A run_at of the
// request stays absolute.
func insertNowArgs(calls []createCall, inserts []*pendingCreate, ref time.Time) ([]any, []shift, error) {
	args, err := insertArgs(inserts)
	if err != nil {
		return nil, nil, err
	}
	n := len(inserts)
	created, available, deadlines := make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
	availOff, deadlineOff := make([]*int64, n), make([]*int64, n)
	shifts := make([]shift, n)
	for i, pc := range inserts {
		j, c := pc.job, calls[pc.call]
		if !c.p.Now.IsZero() {
			created[i], available[i], deadlines[i] = j.CreatedAt, j.AvailableAt, j.RetryDeadline
			continue
		}
		spec := c.p.Requests[pc.idx].Spec
		if spec.RunAfter == 0 && !spec.RunAt.IsZero() {
			available[i] = j.AvailableAt
		} else {
			off := j.AvailableAt.Sub(ref).Microseconds()
			availOff[i] = &off
		}
		if !j.RetryDeadline.IsZero() {
			off := j.RetryDeadline.Sub(ref).Microseconds()
			deadlineOff[i] = &off
		}
		shifts[i] = shift{relative: true, available: availOff[i], deadline: deadlineOff[i]}
	}
	args[8], args[9], args[10] = nowArgs(created), nowArgs(available), nowArgs(deadlines)
	return append(args[:13:13], availOff, deadlineOff), shifts, nil
}

// compareRefs orders queue refs by tenant, then queue.
func compareRefs(a, b store.QueueRef) int {
	return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Queue, b.Queue))
}
