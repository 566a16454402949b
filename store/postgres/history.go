package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// A job's history is in its row (migration 013, store.DeriveEvents): these
// statements read it with the rare events stored in job_events and the
// attempts moved to job_attempts past the row's cap.
const (
	qJobHistory = `SELECT ` + jobColumns + `, queued_available_at, leased_until, leased_seq,
		events_stored_through, coalesce(attempt_log::text, '')
	FROM jobs WHERE tenant = $1 AND id = $2`

	// qSpilledAttempts reads the records of the attempts that moved out of
	// the row (rows written before migration 013 have none).
	qSpilledAttempts = `SELECT record::text FROM job_attempts
	WHERE tenant = $1 AND job_id = $2 AND record IS NOT NULL ORDER BY generation`

	// qStoredEvents reads the stored events after $3, at most $4.
	qStoredEvents = `SELECT job_id, seq, type, at, data::text FROM job_events
	WHERE tenant = $1 AND job_id = $2 AND seq > $3 ORDER BY seq LIMIT $4`

	// qAttemptLogs reads the attempt logs of jobs.
	qAttemptLogs = `SELECT id, attempt_log::text FROM jobs
	WHERE tenant = $1 AND id = ANY($2::text[]) AND attempt_log IS NOT NULL`
)

// readSnapshot runs fn in a read-only transaction that sees one snapshot,
// so a row and the rows hanging off it are read as of one instant.
func (s *Store) readSnapshot(ctx context.Context, fn func(pgx.Tx) error) error {
	return pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, fn)
}

// loadHistoryRow reads the job's row as store.DeriveEvents takes it, with
// the records of the attempts it moved out.
func loadHistoryRow(ctx context.Context, q querier, tenant, id string) (store.HistoryRow, error) {
	var (
		queuedAt, leasedUntil *time.Time
		leasedSeq             *int64
		storedThrough         int64
		log                   string
	)
	rec, err := scanJob(q.QueryRow(ctx, qJobHistory, tenant, id), &queuedAt, &leasedUntil, &leasedSeq, &storedThrough, &log)
	if err != nil {
		return store.HistoryRow{}, err
	}
	row := store.HistoryRow{
		Job: rec.job, QueuedAvailableAt: timeOrZero(queuedAt), LeasedUntil: timeOrZero(leasedUntil),
		LeasedSeq: int64OrZero(leasedSeq), StoredThrough: storedThrough,
	}
	rows, err := q.Query(ctx, qSpilledAttempts, tenant, id)
	if err != nil {
		return store.HistoryRow{}, err
	}
	defer rows.Close()
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			return store.HistoryRow{}, err
		}
		r, err := store.DecodeAttemptRecord(text)
		if err != nil {
			return store.HistoryRow{}, err
		}
		row.Attempts = append(row.Attempts, r)
	}
	if err := rows.Err(); err != nil {
		return store.HistoryRow{}, err
	}
	inRow, err := store.DecodeAttemptLog(log)
	if err != nil {
		return store.HistoryRow{}, err
	}
	row.Attempts = append(row.Attempts, inRow...)
	return row, nil
}

// ListEvents implements store.Store: the events derived from the row and
// the stored ones, merged by sequence. Limit 0 means up to
// store.ListLimitMax events.
func (s *Store) ListEvents(ctx context.Context, p store.ListEventsParams) ([]store.Event, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(p.JobID); err != nil {
		return nil, err
	}
	if p.AfterSequence < 0 {
		return nil, store.Invalid("after_sequence", "must not be negative")
	}
	if p.Limit < 0 {
		return nil, store.Invalid("limit", "must not be negative")
	}
	limit := p.Limit
	if limit == 0 || limit > store.ListLimitMax {
		limit = store.ListLimitMax
	}
	var out []store.Event
	err := s.readSnapshot(ctx, func(tx pgx.Tx) error {
		row, err := loadHistoryRow(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return err
		}
		stored, err := storedEvents(ctx, tx, p.Tenant, p.JobID, p.AfterSequence, limit)
		if err != nil {
			return err
		}
		out = store.PageEvents(store.DeriveEvents(row, stored), p.AfterSequence, limit)
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", p.JobID, store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readError(ctx, "list_events", err)
	}
	return out, nil
}

func storedEvents(ctx context.Context, q querier, tenant, jobID string, after int64, limit int) ([]store.Event, error) {
	rows, err := q.Query(ctx, qStoredEvents, tenant, jobID, after, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Event
	for rows.Next() {
		var e store.Event
		var typ string
		if err := rows.Scan(&e.JobID, &e.Sequence, &typ, &e.Time, &e.Data); err != nil {
			return nil, err
		}
		e.Type = store.EventType(typ)
		e.Time = e.Time.UTC()
		out = append(out, e)
	}
	return out, rows.Err()
}

// ListAttempts implements store.Store: the attempts in job_attempts (rows
// written before migration 013, and those moved out of the row), the
// row's attempt log and, while the job is leased, its running attempt.
func (s *Store) ListAttempts(ctx context.Context, tenant, jobID string) ([]store.Attempt, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(jobID); err != nil {
		return nil, err
	}
	var out []store.Attempt
	err := s.readSnapshot(ctx, func(tx pgx.Tx) error {
		if err := jobExistsTx(ctx, tx, tenant, jobID); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, qListAttempts, tenant, jobID)
		if err != nil {
			return err
		}
		as, err := collect(rows, scanAttempt)
		if err != nil {
			return err
		}
		for _, a := range as {
			out = append(out, *a)
		}
		logs, err := attemptLogs(ctx, tx, tenant, []string{jobID})
		if err != nil {
			return err
		}
		out = store.MergeAttempts(out, logs[jobID])
		return nil
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		return nil, s.readError(ctx, "list_attempts", err)
	}
	return out, nil
}

func jobExistsTx(ctx context.Context, q querier, tenant, jobID string) error {
	var ok bool
	err := q.QueryRow(ctx, qJobExists, tenant, jobID).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
	}
	return err
}

// attemptLogs reads the attempt logs of jobs, as attempts by job id.
func attemptLogs(ctx context.Context, q querier, tenant string, ids []string) (map[string][]store.Attempt, error) {
	rows, err := q.Query(ctx, qAttemptLogs, tenant, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]store.Attempt{}
	for rows.Next() {
		var id, text string
		if err := rows.Scan(&id, &text); err != nil {
			return nil, err
		}
		recs, err := store.DecodeAttemptLog(text)
		if err != nil {
			return nil, err
		}
		for _, r := range recs {
			out[id] = append(out[id], r.AsAttempt(id))
		}
	}
	return out, rows.Err()
}

func int64OrZero(v *int64) int64 {
	if v == nil {
		return 0
	}
	return *v
}
