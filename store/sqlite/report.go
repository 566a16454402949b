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
	var out []store.ReportResult
	err := s.write(ctx, "report", func(tx *writeTx) error {
		var err error
		out, err = store.ApplyReports(ctx, reportTx{tx: tx, s: s}, reports, s.opts.Rand)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// reportTx runs store.ApplyReports' SQL in the single writer's
// transaction. The writer is the only one, so reading a row is locking it;
// each statement is prepared, and one per report costs no round trip.
type reportTx struct {
	tx *writeTx
	s  *Store
}

var _ store.ReportTx = reportTx{}

// LockLeases implements store.ReportTx.
func (r reportTx) LockLeases(ctx context.Context, refs []store.LeaseRef) (map[int]store.Held, error) {
	out := make(map[int]store.Held, len(refs))
	for i, ref := range refs {
		now := r.s.clock(ref.Now)
		var (
			reason string
			seq    int64
		)
		row, err := scanJob(r.tx.QueryRowContext(ctx, qHeldJob, leaseArgs(ref.Tenant, ref.Token, now)...), &reason, &seq)
		if errors.Is(err, sql.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read lease: %w", err)
		}
		out[i] = store.Held{Job: row.job, CancelReason: reason, EventSeq: seq, Now: now}
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
			reason string
			seq    int64
		)
		row, err := scanJob(rows, &reason, &seq)
		if err != nil {
			return nil, fmt.Errorf("read expired leases: %w", err)
		}
		out = append(out, store.Held{Job: row.job, CancelReason: reason, EventSeq: seq, Now: at})
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

// Apply implements store.ReportTx: per change, the job's fenced update,
// its events and its attempt row.
func (r reportTx) Apply(ctx context.Context, c store.Changes) error {
	for _, l := range c.Leaves {
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
		query := qLeaveLease
		if l.Expired {
			query = qLeaveExpired
		}
		res, err := r.tx.ExecContext(ctx, query, append(leaseArgs(l.Tenant, l.Token, l.Now), string(t.State),
			nullMicros(t.AvailableAt), finished, refund, result, setErr, code, message, retryable, len(t.Events))...)
		if err != nil {
			return fmt.Errorf("apply %s to %q: %w", t.State, l.Token.JobID, err)
		}
		// Impossible for the single writer that read the lease; refuse
		// rather than append events for a job that did not move.
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("apply %s to %q: rows moved: %w", t.State, l.Token.JobID, err)
		} else if n != 1 {
			return fmt.Errorf("apply %s to %q: %d rows moved", t.State, l.Token.JobID, n)
		}
		for k, e := range t.Events {
			if _, err := r.tx.ExecContext(ctx, qInsertEvent, l.Tenant, l.Token.JobID, l.FirstSeq+int64(k), string(e.Type), micros(l.Now), e.Data); err != nil {
				return fmt.Errorf("append %s event: %w", e.Type, err)
			}
		}
		if err := recordAttempt(ctx, r.tx, l); err != nil {
			return err
		}
	}
	for _, rn := range c.Renewals {
		res, err := r.tx.ExecContext(ctx, qRenewLease, append(leaseArgs(rn.Tenant, rn.Token, rn.Now), micros(rn.ExpiresAt))...)
		if err != nil {
			return fmt.Errorf("renew %q: %w", rn.Token.JobID, err)
		}
		if n, err := res.RowsAffected(); err != nil {
			return fmt.Errorf("renew %q: rows renewed: %w", rn.Token.JobID, err)
		} else if n != 1 {
			return fmt.Errorf("renew %q: %d rows renewed", rn.Token.JobID, n)
		}
	}
	r.tx.wake = append(r.tx.wake, c.Wake...)
	return nil
}
