package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/internal/groupcommit"
	"github.com/leasehold/leasehold/store"
)

// querier is what both *sql.Tx flavours offer.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// getJobTx reads a job with its latest checkpoint; store.ErrNotFound when the
// tenant has no such job.
func getJobTx(ctx context.Context, q querier, tenant, id string) (*jobRow, error) {
	row, err := scanJob(q.QueryRowContext(ctx, qGetJob, tenant, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	return row, err
}

// requireJob fails with store.ErrNotFound unless the tenant has the job.
func requireJob(ctx context.Context, q querier, tenant, id string) error {
	var one int
	err := q.QueryRowContext(ctx, qJobExists, tenant, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	return err
}

// appendEvent appends an event to a job with the next gapless sequence and
// returns that sequence.
func appendEvent(ctx context.Context, tx *writeTx, tenant, jobID string, at time.Time, e store.NewEvent) (int64, error) {
	var seq int64
	if err := tx.QueryRowContext(ctx, qBumpEventSeq, tenant, jobID).Scan(&seq); err != nil {
		return 0, fmt.Errorf("append %s event: %w", e.Type, err)
	}
	if _, err := tx.ExecContext(ctx, qInsertEvent, tenant, jobID, seq, string(e.Type), micros(at), e.Data); err != nil {
		return 0, fmt.Errorf("append %s event: %w", e.Type, err)
	}
	return seq, nil
}

// policyTx reads a queue's stored policy, or the default one.
func policyTx(ctx context.Context, q querier, tenant, queue string) (*store.QueuePolicy, error) {
	p, err := scanPolicy(q.QueryRowContext(ctx, qGetPolicy, tenant, queue))
	if errors.Is(err, sql.ErrNoRows) {
		d := store.DefaultQueuePolicy(queue)
		return &d, nil
	}
	return p, err
}

// insertNewJob inserts a QUEUED job (a replay's, store.PlanReplay) and
// its queued event (sequence 1). A duplicate id fails the statement, and
// with it the caller's transaction.
func insertNewJob(ctx context.Context, tx *writeTx, j *store.Job, queued store.NewEvent) error {
	md, err := encodeMetadata(j.Metadata)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, qInsertJob, j.Tenant, j.ID, j.Queue, j.Kind, blob(j.Payload), md,
		j.Priority, j.MaxAttempts, micros(j.CreatedAt), micros(j.AvailableAt), nullMicros(j.RetryDeadline),
		j.ReplayOf, j.Dependency, j.ConcurrencyKey, nil, 0, nil)
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("insert job: job id %q already exists; the id generator returned a duplicate", j.ID)
	}
	if err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	_, err = appendEvent(ctx, tx, j.Tenant, j.ID, j.CreatedAt, queued)
	return err
}

// createCall is one CreateJobs call waiting in the create committer, and
// createAnswer its answer: the results, or the call's own refusal (an
// idempotency conflict) that leaves the other calls of the batch alone.
type (
	createCall struct {
		p      store.CreateJobsParams
		window time.Duration
	}
	createAnswer struct {
		results []store.CreateResult
		err     error
	}
)

// CreateJobs implements store.Store. The call joins the store's create
// committer: concurrent calls share one write transaction (createBatch),
// each still all-or-nothing for its own requests.
func (s *Store) CreateJobs(ctx context.Context, p store.CreateJobsParams) ([]store.CreateResult, error) {
	if err := store.ValidateCreate(p); err != nil {
		return nil, err
	}
	res, err := s.creates.Do(ctx, createCall{p: p, window: cmp.Or(p.IdempotencyWindow, store.IdempotencyWindowDefault)})
	if errors.Is(err, groupcommit.ErrClosed) {
		return nil, fmt.Errorf("%w: the store is closed", store.ErrUnavailable)
	}
	if err != nil {
		return nil, err
	}
	return res[0].results, res[0].err
}

// createBatch is the create committer's flush: every call in one write
// transaction, each in a savepoint so that a call refused for an
// idempotency conflict leaves nothing and the others stand.
func (s *Store) createBatch(ctx context.Context, calls []createCall) ([]createAnswer, error) {
	var out []createAnswer
	err := s.write(ctx, "create", func(tx *writeTx) error {
		out = make([]createAnswer, len(calls))
		tx.wake = nil
		for i, c := range calls {
			if _, err := tx.ExecContext(ctx, "SAVEPOINT create_call"); err != nil {
				return err
			}
			wake := len(tx.wake)
			results, err := s.createCall(ctx, tx, c)
			switch {
			case errors.Is(err, store.ErrIdempotencyConflict), errors.Is(err, store.ErrUniqueConflict):
				if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO create_call"); rerr != nil {
					return rerr
				}
				tx.wake = tx.wake[:wake]
				out[i] = createAnswer{err: err}
			case err != nil:
				return err
			default:
				out[i] = createAnswer{results: results}
			}
			if _, err := tx.ExecContext(ctx, "RELEASE create_call"); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// createCall creates one call's requests in the open transaction.
func (s *Store) createCall(ctx context.Context, tx *writeTx, c createCall) ([]store.CreateResult, error) {
	p, window := c.p, c.window
	now := s.clock(p.Now)
	results := make([]store.CreateResult, len(p.Requests))
	policies := make(map[string]*store.QueuePolicy)
	steps, err := store.PlanCreate(p.Requests)
	if err != nil {
		return nil, err
	}
	for i, r := range p.Requests {
		st := steps[i]
		if st.RepeatOf >= 0 {
			results[i] = store.CreateResult{Job: results[st.RepeatOf].Job, Replayed: true}
			continue
		}
		if r.RequestID != "" {
			d, job, err := s.lookupIdempotent(ctx, tx, p.Tenant, r.RequestID, st.Fingerprint, now)
			if err != nil {
				return nil, err
			}
			switch d {
			case store.KeyConflict:
				return nil, store.IdempotencyConflictError(i, len(p.Requests))
			case store.KeyReplay:
				results[i] = store.CreateResult{Job: job, Replayed: true}
				continue
			case store.KeyTake:
			}
		}
		if u := st.Unique; u.First >= 0 {
			results[i] = store.CreateResult{Job: results[u.First].Job, Duplicate: true}
			continue
		} else if u.Key != "" {
			holder, err := uniqueHolder(ctx, tx, p.Tenant, u, now)
			if err != nil {
				return nil, fmt.Errorf("requests[%d]: %w", i, err)
			}
			if holder != nil {
				if results[i], err = store.DecideUniqueHeld(u, i, len(p.Requests), holder); err != nil {
					return nil, err
				}
				continue
			}
		}
		pol, ok := policies[r.Spec.Queue]
		if !ok {
			var err error
			if pol, err = policyTx(ctx, tx, p.Tenant, r.Spec.Queue); err != nil {
				return nil, err
			}
			policies[r.Spec.Queue] = pol
		}
		job, _ := store.DecideCreate(*pol, p.Tenant, s.opts.NewID(), r.Spec, now)
		if err := insertJob(ctx, tx, job, st.Unique.Key); err != nil {
			return nil, fmt.Errorf("requests[%d]: %w", i, err)
		}
		if st.Unique.Period > 0 {
			expires := now.Add(st.Unique.Period).Truncate(time.Microsecond)
			if _, err := tx.ExecContext(ctx, qPutUniqueKey, p.Tenant, st.Unique.Key, job.ID, micros(expires)); err != nil {
				return nil, fmt.Errorf("requests[%d]: record unique key: %w", i, err)
			}
		}
		if r.RequestID != "" {
			expires := now.Add(window).Truncate(time.Microsecond)
			if _, err := tx.ExecContext(ctx, qInsertIdempotencyKey, p.Tenant, r.RequestID, st.Fingerprint, job.ID, micros(expires)); err != nil {
				return nil, fmt.Errorf("requests[%d]: record request id: %w", i, err)
			}
		}
		results[i] = store.CreateResult{Job: job}
		tx.wake = append(tx.wake, store.QueueRef{Tenant: p.Tenant, Queue: job.Queue})
	}
	return results, nil
}

// insertJob inserts a QUEUED job as store.DecideCreate made it; its QUEUED
// event (sequence 1) is derived from the row. A duplicate id fails the
// statement, and with it the caller's transaction.
func insertJob(ctx context.Context, tx *writeTx, j *store.Job, uniqueKey string) error {
	md, err := encodeMetadata(j.Metadata)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, qInsertJob, j.Tenant, j.ID, j.Queue, j.Kind, blob(j.Payload), md,
		j.Priority, j.MaxAttempts, micros(j.CreatedAt), micros(j.AvailableAt), nullMicros(j.RetryDeadline),
		j.ReplayOf, j.Dependency, j.ConcurrencyKey, nullText(uniqueKey), 1, nullMicros(store.QueuedAvailableAt(j)))
	if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("insert job: job id %q already exists; the id generator returned a duplicate", j.ID)
	}
	if err != nil {
		return fmt.Errorf("insert job: %w", err)
	}
	return nil
}

// uniqueHolder returns the job that holds u's key, or nil: the job of an
// unexpired period record (finished or not) when u has a period, else the
// live job with the key. A period record that expired, or whose job was
// pruned, no longer holds the key. Nothing can take the key between this
// read and the insert: the transaction is the only writer.
func uniqueHolder(ctx context.Context, tx *writeTx, tenant string, u store.UniqueRequest, now time.Time) (*store.Job, error) {
	if u.Period > 0 {
		var (
			jobID   string
			expires int64
		)
		err := tx.QueryRowContext(ctx, qGetUniqueKey, tenant, u.Key).Scan(&jobID, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, fmt.Errorf("look up unique key: %w", err)
		case expires > micros(now):
			row, err := getJobTx(ctx, tx, tenant, jobID)
			if err == nil {
				return row.job, nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
		}
	}
	row, err := scanJob(tx.QueryRowContext(ctx, qLiveUniqueHolder, tenant, u.Key))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("look up unique key: %w", err)
	}
	return row.job, nil
}

// lookupIdempotent decides a request id on its stored record
// (store.DecideRequestID), with the record's job for a replay. A record
// the new job takes (expired, or whose job was pruned) is deleted so the
// key can be recorded again.
func (s *Store) lookupIdempotent(ctx context.Context, tx *writeTx, tenant, key, fp string, now time.Time) (store.KeyDecision, *store.Job, error) {
	var (
		rec     store.IdempotencyRecord
		jobID   string
		expires int64
	)
	err := tx.QueryRowContext(ctx, qGetIdempotencyKey, tenant, key).Scan(&rec.Fingerprint, &jobID, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return store.KeyTake, nil, nil
	}
	if err != nil {
		return store.KeyTake, nil, fmt.Errorf("look up request id: %w", err)
	}
	rec.ExpiresAt = fromMicros(expires)
	row, err := getJobTx(ctx, tx, tenant, jobID)
	switch {
	case err == nil:
		rec.Job = row.job
	case !errors.Is(err, store.ErrNotFound):
		return store.KeyTake, nil, err
	}
	if d := store.DecideRequestID(fp, &rec, now); d != store.KeyTake {
		return d, rec.Job, nil
	}
	if _, err := tx.ExecContext(ctx, qDeleteIdempotencyKey, tenant, key); err != nil {
		return store.KeyTake, nil, fmt.Errorf("drop expired request id: %w", err)
	}
	return store.KeyTake, nil, nil
}

// GetJob implements store.Store.
func (s *Store) GetJob(ctx context.Context, tenant, jobID string) (*store.Job, error) {
	if err := store.ValidateJobRef(tenant, jobID); err != nil {
		return nil, err
	}
	var job *store.Job
	err := s.read(ctx, "get job", func(tx *preparedTx) error {
		row, err := getJobTx(ctx, tx, tenant, jobID)
		if err != nil {
			return err
		}
		job = row.job
		return nil
	})
	return job, err
}

var jobStates = []store.JobState{
	store.JobStateQueued, store.JobStateLeased, store.JobStateSucceeded,
	store.JobStateFailed, store.JobStateCancelled, store.JobStateDead,
}

// ListJobs implements store.Store.
func (s *Store) ListJobs(ctx context.Context, p store.ListJobsParams) (*store.JobPage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if p.Queue != "" && !store.ValidName(p.Queue) {
		return nil, store.Invalid("queue", "must be a valid queue name")
	}
	if p.Kind != "" && !store.ValidName(p.Kind) {
		return nil, store.Invalid("kind", "must be a valid kind name")
	}
	states := make([]string, 0, len(p.States))
	for i, st := range p.States {
		known := false
		for _, k := range jobStates {
			known = known || st == k
		}
		if !known {
			return nil, store.Invalid(fmt.Sprintf("states[%d]", i), "must be a job state")
		}
		states = append(states, string(st))
	}
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	limit, err := store.PageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var after sql.NullInt64
	var afterID string
	if p.Cursor != "" {
		c, err := decodeCursor(cursorJobs, p.Cursor)
		if err != nil {
			return nil, err
		}
		after, afterID = nullMicros(c.at), c.id
		after.Valid = true // a cursor at the unix epoch is still a cursor
	}
	statesJSON, err := json.Marshal(states)
	if err != nil {
		return nil, fmt.Errorf("encode states: %w", err)
	}
	q := qListJobs
	if p.View == store.JobViewBasic {
		q = qListJobsBasic
	}
	args := []any{p.Tenant, p.Queue, p.Kind, string(statesJSON), after, afterID, limit + 1}
	if !p.Filter.IsZero() {
		var cond string
		cond, args = filterSQL(p.Filter, args)
		sel := jobSelect
		if p.View == store.JobViewBasic {
			sel = jobSelectBasic
		}
		q = sel + qListJobsConds + ` AND ` + cond + qListJobsOrder
	}
	page := &store.JobPage{}
	more := false
	err = s.read(ctx, "list jobs", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		// Rows are read one at a time and reading stops at the first one
		// that does not belong on the page (past limit, or over the byte
		// budget), so a page of large jobs holds only what it returns.
		budget := store.NewPageBudget(p.MaxBytes)
		for rows.Next() {
			if len(page.Jobs) == limit {
				more = true
				return nil
			}
			row, err := scanJob(rows)
			if err != nil {
				return err
			}
			if !budget.Take(store.JobSize(row.job)) {
				more = true
				return nil
			}
			page.Jobs = append(page.Jobs, row.job)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if more {
		last := page.Jobs[len(page.Jobs)-1]
		page.NextCursor = encodeCursor(cursorJobs, last.CreatedAt, last.ID)
	}
	return page, nil
}

// CountJobs implements store.Store: the count, cut at Limit, and the
// sample are read in one read transaction.
func (s *Store) CountJobs(ctx context.Context, p store.CountJobsParams) (store.JobCount, error) {
	if err := store.ValidateCount(p); err != nil {
		return store.JobCount{}, err
	}
	var out store.JobCount
	limit := int64(-1) // LIMIT -1: no limit
	if p.Limit > 0 {
		limit = p.Limit + 1
	}
	err := s.read(ctx, "count jobs", func(tx *preparedTx) error {
		cond, args := filterSQL(p.Filter, []any{p.Tenant, limit})
		if err := tx.QueryRowContext(ctx, fmt.Sprintf(qCountJobs, cond), args...).Scan(&out.Count); err != nil {
			return err
		}
		if p.Limit > 0 && out.Count > p.Limit {
			out.Count, out.Capped = p.Limit, true
		}
		if p.SampleSize == 0 || out.Count == 0 {
			return nil
		}
		cond, args = filterSQL(p.Filter, []any{p.Tenant, p.SampleSize})
		rows, err := tx.QueryContext(ctx, fmt.Sprintf(qSampleJobs, cond), args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		budget := store.NewPageBudget(0)
		for rows.Next() {
			row, err := scanJob(rows)
			if err != nil {
				return err
			}
			if !budget.Take(store.JobSize(row.job)) {
				break
			}
			row.job.Checkpoint = nil
			out.Sample = append(out.Sample, row.job)
		}
		return rows.Err()
	})
	if err != nil {
		return store.JobCount{}, err
	}
	return out, nil
}

// ListEvents implements store.Store. A Limit of 0 means store.ListLimitMax.
func (s *Store) ListEvents(ctx context.Context, p store.ListEventsParams) ([]store.Event, error) {
	if err := store.ValidateJobRef(p.Tenant, p.JobID); err != nil {
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
	var events []store.Event
	err := s.read(ctx, "list events", func(tx *preparedTx) error {
		row, err := historyRow(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, qListEvents, p.Tenant, p.JobID, p.AfterSequence, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		var stored []store.Event
		for rows.Next() {
			e, err := scanEvent(rows)
			if err != nil {
				return err
			}
			stored = append(stored, e)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		events = store.PageEvents(store.DeriveEvents(row, stored), p.AfterSequence, limit)
		return nil
	})
	return events, err
}

// historyRow reads what the job's row holds of its history, with the
// records of the attempts that moved out of it (store.DeriveEvents).
func historyRow(ctx context.Context, q querier, tenant, jobID string) (store.HistoryRow, error) {
	var (
		j                                          = store.Job{Tenant: tenant, ID: jobID}
		created                                    int64
		state, log                                 string
		leasedAt, queuedAt, leasedUntil, leasedSeq sql.NullInt64
		storedThrough                              int64
	)
	err := q.QueryRowContext(ctx, qJobHistory, tenant, jobID).Scan(&created, &j.Queue, &state, &j.LeaseOwner,
		&j.LeaseGeneration, &j.Attempts, &leasedAt, &queuedAt, &leasedUntil, &leasedSeq, &storedThrough, &log)
	if errors.Is(err, sql.ErrNoRows) {
		return store.HistoryRow{}, fmt.Errorf("job %q: %w", jobID, store.ErrNotFound)
	}
	if err != nil {
		return store.HistoryRow{}, err
	}
	j.CreatedAt, j.State, j.LeasedAt = fromMicros(created), store.JobState(state), fromNullMicros(leasedAt)
	row := store.HistoryRow{Job: &j, QueuedAvailableAt: fromNullMicros(queuedAt), LeasedUntil: fromNullMicros(leasedUntil),
		LeasedSeq: leasedSeq.Int64, StoredThrough: storedThrough}
	spilled, err := spilledRecords(ctx, q, tenant, jobID)
	if err != nil {
		return store.HistoryRow{}, err
	}
	inRow, err := store.DecodeAttemptLog(log)
	if err != nil {
		return store.HistoryRow{}, err
	}
	row.Attempts = append(row.Attempts, spilled...)
	row.Attempts = append(row.Attempts, inRow...)
	return row, nil
}

// spilledRecords reads the records of the attempts that moved out of the
// job's row.
func spilledRecords(ctx context.Context, q querier, tenant, jobID string) ([]store.AttemptRecord, error) {
	rows, err := q.QueryContext(ctx, qSpilledAttempts, tenant, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.AttemptRecord
	for rows.Next() {
		var text string
		if err := rows.Scan(&text); err != nil {
			return nil, err
		}
		r, err := store.DecodeAttemptRecord(text)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ListAttempts implements store.Store.
func (s *Store) ListAttempts(ctx context.Context, tenant, jobID string) ([]store.Attempt, error) {
	if err := store.ValidateJobRef(tenant, jobID); err != nil {
		return nil, err
	}
	var attempts []store.Attempt
	err := s.read(ctx, "list attempts", func(tx *preparedTx) error {
		if err := requireJob(ctx, tx, tenant, jobID); err != nil {
			return err
		}
		var err error
		attempts, err = listAttemptsTx(ctx, tx, tenant, jobID)
		return err
	})
	return attempts, err
}

func listAttemptsTx(ctx context.Context, q querier, tenant, jobID string) ([]store.Attempt, error) {
	rows, err := q.QueryContext(ctx, qListAttempts, tenant, jobID)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Attempt
	for rows.Next() {
		a, err := scanAttempt(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// The attempts since migration 013 are records: those moved out of
	// the row, then the row's log.
	recs, err := spilledRecords(ctx, q, tenant, jobID)
	if err != nil {
		return nil, err
	}
	var text string
	if err := q.QueryRowContext(ctx, qAttemptLog, tenant, jobID).Scan(&text); err != nil && !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	log, err := store.DecodeAttemptLog(text)
	if err != nil {
		return nil, err
	}
	logged := make([]store.Attempt, 0, len(recs)+len(log))
	for _, r := range append(recs, log...) {
		logged = append(logged, r.AsAttempt(jobID))
	}
	return store.MergeAttempts(out, logged), nil
}
