package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/internal/groupcommit"
	"github.com/leasehold/leasehold/store"
)

// submitReports hands reports to the store's group committer, which applies
// them with other callers' reports in one write transaction.
func (s *Store) submitReports(ctx context.Context, reports []store.Report) ([]store.ReportResult, error) {
	res, err := s.reports.Do(ctx, reports...)
	if errors.Is(err, groupcommit.ErrClosed) {
		return nil, fmt.Errorf("%w: the store is closed", store.ErrUnavailable)
	}
	return res, err
}

// applyReports is the committer's flush: one write transaction for the
// whole batch, decided by store.ApplyReports.
func (s *Store) applyReports(ctx context.Context, reports []store.Report) ([]store.ReportResult, error) {
	var (
		out     []store.ReportResult
		changed []store.BreakerChange
	)
	err := s.write(ctx, "report", func(tx *writeTx) error {
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

// reportTx runs store.ApplyReports' SQL in the single writer's
// transaction. The writer is the only one, so reading a row is locking it;
// each statement is prepared, and one per report costs no round trip.
type reportTx struct {
	tx *writeTx
	s  *Store
	// breakers, when set, collects the breaker changes Apply wrote, to be
	// reported once the transaction commits.
	breakers *[]store.BreakerChange
}

var _ store.ReportTx = reportTx{}

// LockLeases implements store.ReportTx with one statement per chunk of
// refs (qLockLeases), each row fenced at its own instant.
func (r reportTx) LockLeases(ctx context.Context, refs []store.LeaseRef) (map[int]store.Held, error) {
	nows := make([]time.Time, len(refs))
	args := make([]any, 0, len(refs)*qLockLeases.width)
	for i, ref := range refs {
		nows[i] = r.s.clock(ref.Now)
		args = append(args, i, ref.Tenant, ref.Token.JobID, ref.Token.WorkerID, ref.Token.Generation, micros(nows[i]))
	}
	out := make(map[int]store.Held, len(refs))
	err := qLockLeases.query(ctx, r.tx, args, func(rows *sql.Rows) error {
		var (
			reason                 string
			seq, prevDelay         int64
			ord                    int
			leasedUntil, leasedSeq sql.NullInt64
			logLen                 int
		)
		row, err := scanJob(rows, &reason, &seq, &ord, &prevDelay, &leasedUntil, &leasedSeq, &logLen)
		if err != nil {
			return err
		}
		out[ord] = store.Held{Job: row.job, CancelReason: reason, EventSeq: seq, Now: nows[ord], PrevRetryDelay: time.Duration(prevDelay),
			LeasedUntil: fromNullMicros(leasedUntil), LeasedSeq: leasedSeq.Int64, AttemptLogLen: logLen}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read leases: %w", err)
	}
	return out, nil
}

// QueuePolicies implements store.ReportTx from the store's policy cache.
// (A miss reads through the read pool, which WAL lets run beside the open
// write transaction.)
func (r reportTx) QueuePolicies(ctx context.Context, queues []store.QueueRef) (map[store.QueueRef]store.QueuePolicy, error) {
	if len(queues) == 0 {
		return map[store.QueueRef]store.QueuePolicy{}, nil
	}
	return r.s.policies.Get(ctx, queues)
}

// LockExpired implements store.ReapTx.
func (r reportTx) LockExpired(ctx context.Context, now time.Time, limit int) ([]store.Held, error) {
	at := r.s.clock(now)
	rows, err := r.tx.QueryContext(ctx, qLockExpired, micros(at), limit)
	if err != nil {
		return nil, fmt.Errorf("read expired leases: %w", err)
	}
	defer rows.Close()
	var out []store.Held
	for rows.Next() {
		var (
			reason                 string
			seq                    int64
			leasedUntil, leasedSeq sql.NullInt64
			logLen                 int
		)
		row, err := scanJob(rows, &reason, &seq, &leasedUntil, &leasedSeq, &logLen)
		if err != nil {
			return nil, fmt.Errorf("read expired leases: %w", err)
		}
		out = append(out, store.Held{Job: row.job, CancelReason: reason, EventSeq: seq, Now: at,
			LeasedUntil: fromNullMicros(leasedUntil), LeasedSeq: leasedSeq.Int64, AttemptLogLen: logLen})
	}
	return out, rows.Err()
}

// NextExpiry implements store.ReapTx.
func (r reportTx) NextExpiry(ctx context.Context) (time.Time, error) {
	var t sql.NullInt64
	if err := r.tx.QueryRowContext(ctx, qNextExpiry).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("next expiry: %w", err)
	}
	return fromNullMicros(t), nil
}

// Inspect implements store.ReportTx.
func (r reportTx) Inspect(ctx context.Context, refs []store.LeaseRef) (map[int]store.Inspected, error) {
	out := make(map[int]store.Inspected, len(refs))
	for i, ref := range refs {
		row, err := getJobTx(ctx, r.tx, ref.Tenant, ref.Token.JobID)
		if errors.Is(err, store.ErrNotFound) {
			out[i] = store.Inspected{}
			continue
		}
		if err != nil {
			return nil, err
		}
		got := store.Inspected{Job: row.job}
		if a, err := loggedAttempt(ctx, r.tx, ref); err != nil || a != nil {
			if err != nil {
				return nil, err
			}
			got.Attempt = a
			out[i] = got
			continue
		}
		var (
			a             = store.Attempt{JobID: ref.Token.JobID, LeaseGeneration: ref.Token.Generation}
			outcome       string
			code, message sql.NullString
			retryable     sql.NullBool
		)
		err = r.tx.QueryRowContext(ctx, qInspectAttempt, ref.Tenant, ref.Token.JobID, ref.Token.Generation).
			Scan(&a.Attempt, &a.WorkerID, &outcome, &code, &message, &retryable)
		switch {
		case err == nil:
			a.Outcome = store.AttemptOutcome(outcome)
			if code.Valid {
				a.Error = &store.JobError{Code: code.String, Message: message.String, Retryable: retryable.Bool}
			}
			got.Attempt = &a
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("read attempt: %w", err)
		}
		out[i] = got
	}
	return out, nil
}

// Apply implements store.ReportTx: the jobs' fenced updates, each
// appending its ended attempt's record to the row (where the transition's
// events are kept), then the renewals, each a multi-row statement per
// chunk whose rows carry their own fences.
func (r reportTx) Apply(ctx context.Context, c store.Changes) error {
	if n := len(c.Leaves); n > 0 {
		var (
			leaves = make([]any, 0, n*qLeaveLeases.width)
			spills []any
		)
		for _, l := range c.Leaves {
			leaves = append(leaves, leaveArgs(l)...)
			if l.Spill {
				spills = append(spills, l.Tenant, l.Token.JobID)
			}
		}
		if len(spills) > 0 {
			if _, err := qSpillAttempts.exec(ctx, r.tx, spills); err != nil {
				return fmt.Errorf("move attempts out of full logs: %w", err)
			}
		}
		moved, err := qLeaveLeases.exec(ctx, r.tx, leaves)
		if err != nil {
			return fmt.Errorf("apply %d transitions: %w", n, err)
		}
		// Impossible for the single writer that read the leases; refuse
		// rather than commit attempts of jobs that did not move.
		if moved != int64(n) {
			return fmt.Errorf("apply %d transitions: %d rows moved", n, moved)
		}
	}
	if n := len(c.Renewals); n > 0 {
		args := make([]any, 0, n*qRenewLeases.width)
		for _, rn := range c.Renewals {
			args = append(args, rn.Tenant, rn.Token.JobID, rn.Token.WorkerID, rn.Token.Generation, micros(rn.Now), micros(rn.ExpiresAt))
		}
		renewed, err := qRenewLeases.exec(ctx, r.tx, args)
		if err != nil {
			return fmt.Errorf("renew %d leases: %w", n, err)
		}
		if renewed != int64(n) {
			return fmt.Errorf("renew %d leases: %d rows renewed", n, renewed)
		}
	}
	if err := writeBreakers(ctx, r.tx, c.Breakers); err != nil {
		return err
	}
	if r.breakers != nil {
		*r.breakers = append(*r.breakers, c.Breakers...)
	}
	r.tx.wake = append(r.tx.wake, c.Wake...)
	return nil
}

// leaveArgs are a Leave's qLeaveLeases parameters.
func leaveArgs(l store.Leave) []any {
	t := l.Transition
	var (
		refund            int
		setErr, retryable bool
		code, message     string
		finished          sql.NullInt64
		result            []byte
	)
	if t.Refund {
		refund = 1
	}
	if t.Finished() {
		finished = nullMicros(l.Now)
	}
	if e := t.LastError; e != nil {
		setErr, code, message, retryable = true, e.Code, e.Message, e.Retryable
	}
	if t.State == store.JobStateSucceeded {
		result = t.Result
	}
	return []any{l.Tenant, l.Token.JobID, l.Token.WorkerID, l.Token.Generation, micros(l.Now), string(t.State),
		nullMicros(t.AvailableAt), finished, refund, result, setErr, code, message, retryable, len(t.Events), l.Expired, l.Record, l.Spill}
}

// loggedAttempt is the attempt of ref's generation in its job's attempt
// log, or nil.
func loggedAttempt(ctx context.Context, q querier, ref store.LeaseRef) (*store.Attempt, error) {
	var text string
	if err := q.QueryRowContext(ctx, qAttemptLog, ref.Tenant, ref.Token.JobID).Scan(&text); err != nil {
		return nil, fmt.Errorf("read attempt log: %w", err)
	}
	log, err := store.DecodeAttemptLog(text)
	if err != nil {
		return nil, err
	}
	if r := store.FindAttempt(log, ref.Token.Generation); r != nil {
		a := r.AsAttempt(ref.Token.JobID)
		return &a, nil
	}
	return nil, nil
}
