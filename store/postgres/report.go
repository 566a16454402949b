package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/leasehold/leasehold/internal/groupcommit"
	"github.com/leasehold/leasehold/store"
)

// submitReports hands reports to the store's group committer, which applies
// them with other callers' reports in one transaction (applyReports).
func (s *Store) submitReports(ctx context.Context, reports []store.Report) ([]store.ReportResult, error) {
	res, err := s.reports.Do(ctx, reports...)
	if errors.Is(err, groupcommit.ErrClosed) {
		return nil, fmt.Errorf("%w: the store is closed", store.ErrUnavailable)
	}
	return res, err
}

// applyReports is the committer's flush: one transaction for the whole
// batch, decided by store.ApplyReports.
func (s *Store) applyReports(ctx context.Context, reports []store.Report) ([]store.ReportResult, error) {
	var (
		out     []store.ReportResult
		changed []store.BreakerChange
	)
	err := s.withLazyTx(ctx, "report", func(tx *lazyTx) error {
		var err error
		changed = changed[:0]
		out, err = store.ApplyReports(ctx, reportTx{tx: tx, s: s, breakers: &changed}, reports, s.opts.Rand)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.opts.BreakersChanged(changed)
	return out, nil
}

// reportTx runs store.ApplyReports' and store.Reap's SQL in one
// transaction.
type reportTx struct {
	tx queryer
	s  *Store
	// breakers, when set, collects the breaker changes Apply wrote, to be
	// reported once the transaction commits.
	breakers *[]store.BreakerChange
}

var _ store.ReportTx = reportTx{}

// nowArgs is a nullable timestamptz array: NULL (the database clock) for
// zero times.
func nowArgs(ts []time.Time) []pgtype.Timestamptz {
	out := make([]pgtype.Timestamptz, len(ts))
	for i, t := range ts {
		if !t.IsZero() {
			out[i] = pgtype.Timestamptz{Time: normTime(t), Valid: true}
		}
	}
	return out
}

// LockLeases implements store.ReportTx with one statement (qLockLeases).
func (r reportTx) LockLeases(ctx context.Context, refs []store.LeaseRef) (map[int]store.Held, error) {
	n := len(refs)
	tenants, ids, owners := make([]string, n), make([]string, n), make([]string, n)
	gens, nows := make([]int64, n), make([]time.Time, n)
	for i, ref := range refs {
		tenants[i], ids[i], owners[i], gens[i], nows[i] = ref.Tenant, ref.Token.JobID, ref.Token.WorkerID, ref.Token.Generation, ref.Now
	}
	rows, err := r.tx.Query(ctx, qLockLeases, tenants, ids, owners, gens, nowArgs(nows))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int]store.Held, n)
	for rows.Next() {
		var (
			ord, prevDelay int64
			at             time.Time
			cp             checkpointCols
			leasedUntil    *time.Time
			leasedSeq      *int64
			logLen         int
		)
		rec, err := scanJob(rows, append(append([]any{&ord, &at}, cp.dest()...), &prevDelay, &leasedUntil, &leasedSeq, &logLen)...)
		if err != nil {
			return nil, err
		}
		rec.job.Checkpoint = cp.checkpoint()
		out[int(ord)-1] = store.Held{Job: rec.job, CancelReason: rec.cancelReason, EventSeq: rec.lastEventSeq, Now: at.UTC(),
			PrevRetryDelay: time.Duration(prevDelay), LeasedUntil: timeOrZero(leasedUntil), LeasedSeq: int64OrZero(leasedSeq),
			AttemptLogLen: logLen}
	}
	return out, rows.Err()
}

// checkpointCols scans the nullable latest-checkpoint columns of a join.
type checkpointCols struct {
	id, jobID, phase, parent *string
	state                    []byte
	generation               *int64
	created                  *time.Time
}

func (c *checkpointCols) dest() []any {
	return []any{&c.id, &c.jobID, &c.phase, &c.state, &c.generation, &c.parent, &c.created}
}

func (c *checkpointCols) checkpoint() *store.Checkpoint {
	if c.id == nil {
		return nil
	}
	return &store.Checkpoint{
		ID: *c.id, JobID: *c.jobID, Phase: *c.phase, State: nilIfEmpty(c.state),
		LeaseGeneration: *c.generation, ParentID: *c.parent, CreatedAt: c.created.UTC(),
	}
}

// QueuePolicies implements store.ReportTx from the store's policy cache.
func (r reportTx) QueuePolicies(ctx context.Context, queues []store.QueueRef) (map[store.QueueRef]store.QueuePolicy, error) {
	if len(queues) == 0 {
		return map[store.QueueRef]store.QueuePolicy{}, nil
	}
	return r.s.policies.Get(ctx, queues)
}

// prefixed scans leading columns into pre before the row's scanner.
type prefixed struct {
	row pgx.Row
	pre *string
}

func (p prefixed) Scan(dest ...any) error { return p.row.Scan(append([]any{p.pre}, dest...)...) }

// Inspect implements store.ReportTx with one statement (qInspectLeases).
func (r reportTx) Inspect(ctx context.Context, refs []store.LeaseRef) (map[int]store.Inspected, error) {
	n := len(refs)
	tenants, ids, gens := make([]string, n), make([]string, n), make([]int64, n)
	for i, ref := range refs {
		tenants[i], ids[i], gens[i] = ref.Tenant, ref.Token.JobID, ref.Token.Generation
	}
	rows, err := r.tx.Query(ctx, qInspectLeases, tenants, ids, gens)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int]store.Inspected, n)
	for rows.Next() {
		var (
			ord                 int64
			worker, outcome     *string
			attempt             *int32
			errCode, errMessage *string
			errRetryable        *bool
			log                 *string
		)
		rec, err := scanJob(rows, &ord, &attempt, &worker, &outcome, &errCode, &errMessage, &errRetryable, &log)
		if err != nil {
			return nil, err
		}
		got := store.Inspected{Job: rec.job}
		records, err := store.DecodeAttemptLog(deref(log))
		if err != nil {
			return nil, err
		}
		if r := store.FindAttempt(records, gens[ord-1]); r != nil {
			a := r.AsAttempt(rec.job.ID)
			got.Attempt = &a
		} else if worker != nil {
			a := &store.Attempt{JobID: rec.job.ID, Attempt: *attempt, LeaseGeneration: gens[ord-1], WorkerID: *worker, Outcome: store.AttemptOutcome(*outcome)}
			if errCode != nil {
				a.Error = &store.JobError{Code: *errCode, Message: deref(errMessage), Retryable: errRetryable != nil && *errRetryable}
			}
			got.Attempt = a
		}
		out[int(ord)-1] = got
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// Answers carry the latest checkpoint, like every job the store returns.
	for _, got := range out {
		if err := attachCheckpoint(ctx, r.tx, got.Job); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Apply implements store.ReportTx: every change of the batch in one
// pipelined round trip of set-based statements, each row carrying its
// fence.
func (r reportTx) Apply(ctx context.Context, c store.Changes) error {
	b := &pgx.Batch{}
	leaves, renewals := len(c.Leaves), len(c.Renewals)
	spills := false
	if leaves > 0 {
		spills = queueLeaves(b, c.Leaves)
	}
	if renewals > 0 {
		queueRenewals(b, c.Renewals)
	}
	breakers := queueBreakerChanges(b, c.Breakers)
	if r.breakers != nil {
		*r.breakers = append(*r.breakers, c.Breakers...)
	}
	for _, q := range c.Wake {
		b.Queue(qNotify, r.s.channel, encodeNotification(q.Tenant, q.Queue))
	}
	br := r.tx.SendBatch(ctx, b)
	defer br.Close()
	if spills {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	if leaves > 0 {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if int(tag.RowsAffected()) != leaves {
			// Impossible under the locks LockLeases took; refuse rather than
			// commit attempts of jobs that did not move.
			return fmt.Errorf("report batch: %d of %d leases moved", tag.RowsAffected(), leaves)
		}
	}
	if renewals > 0 {
		tag, err := br.Exec()
		if err != nil {
			return err
		}
		if int(tag.RowsAffected()) != renewals {
			return fmt.Errorf("report batch: %d of %d leases renewed", tag.RowsAffected(), renewals)
		}
	}
	for range breakers {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

// queueLeaves queues the statement that ends leases: the jobs' update,
// which appends each ended attempt's record (where its events are kept)
// to the row.
//
// It reports whether it queued qSpillAttempts first.
func queueLeaves(b *pgx.Batch, ls []store.Leave) (spills bool) {
	n := len(ls)
	var (
		tenants, ids, owners, states = make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		gens                         = make([]int64, n)
		nows, available, finished    = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		refunds, nevents             = make([]int32, n), make([]int32, n)
		expired                      = make([]bool, n)
		results                      = make([][]byte, n)
		setErr, retryable            = make([]bool, n), make([]bool, n)
		codes, messages              = make([]string, n), make([]string, n)
		records                      = make([]string, n)
		spill                        = make([]bool, n)
		spillTenants, spillIDs       []string
	)
	for i, l := range ls {
		t := l.Transition
		tenants[i], ids[i], owners[i], gens[i], states[i] = l.Tenant, l.Token.JobID, l.Token.WorkerID, l.Token.Generation, string(t.State)
		expired[i], records[i], spill[i] = l.Expired, l.Record, l.Spill
		if l.Spill {
			spillTenants, spillIDs = append(spillTenants, l.Tenant), append(spillIDs, l.Token.JobID)
		}
		nows[i], available[i] = l.Now, t.AvailableAt
		if t.Finished() {
			finished[i] = l.Now
		}
		if t.Refund {
			refunds[i] = 1
		}
		results[i] = t.Result
		if e := t.LastError; e != nil {
			setErr[i], codes[i], messages[i], retryable[i] = true, e.Code, e.Message, e.Retryable
		}
		nevents[i] = int32(len(t.Events))
	}
	if len(spillIDs) > 0 {
		b.Queue(qSpillAttempts, spillTenants, spillIDs)
	}
	b.Queue(qLeaveLeases, tenants, ids, owners, gens, nowArgs(nows), states, nowArgs(available),
		nowArgs(finished), refunds, results, setErr, codes, messages, retryable, nevents, expired, records, spill)
	return len(spillIDs) > 0
}

// queueRenewals queues the statement that extends leases.
func queueRenewals(b *pgx.Batch, rs []store.Renewal) {
	n := len(rs)
	tenants, ids, owners := make([]string, n), make([]string, n), make([]string, n)
	gens, nows, expires := make([]int64, n), make([]time.Time, n), make([]time.Time, n)
	for i, rn := range rs {
		tenants[i], ids[i], owners[i], gens[i], nows[i], expires[i] = rn.Tenant, rn.Token.JobID, rn.Token.WorkerID, rn.Token.Generation, rn.Now, rn.ExpiresAt
	}
	b.Queue(qRenewLeases, tenants, ids, owners, gens, nowArgs(nows), nowArgs(expires))
}
