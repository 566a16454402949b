package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/store"
)

// The schedule statements (the PostgreSQL engine's, in SQLite's dialect).
// One writer: a due schedule read in a write transaction cannot be fired
// by anyone else before the commit, so no row locks are needed; the
// advance is still conditional on the high-water mark read.
const (
	scheduleCols = `s.tenant, s.id, s.name, s.spec, s.paused, s.paused_reason, s.next_tick_at, s.last_tick_at,
		s.last_job_id, s.owner_id, s.owner, s.run_seq, s.created_at, s.updated_at`

	qScheduleCount  = `SELECT count(*) FROM schedules WHERE tenant = ?`
	qScheduleInsert = `INSERT INTO schedules (tenant, id, name, queue, spec, paused, paused_reason, next_tick_at,
		owner_id, owner, created_at, updated_at)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?11)`
	qScheduleGet = `SELECT ` + scheduleCols + ` FROM schedules s
		WHERE s.tenant = ?1 AND (s.id = ?2 OR s.name = ?2) ORDER BY s.id = ?2 DESC LIMIT 1`
	qScheduleList = `SELECT ` + scheduleCols + ` FROM schedules s
		WHERE s.tenant = ?1 AND (?2 = '' OR s.queue = ?2) AND s.name > ?3 ORDER BY s.name LIMIT ?4`
	qScheduleUpdate = `UPDATE schedules SET queue = ?3, spec = ?4, paused = ?5, paused_reason = ?6, next_tick_at = ?7,
		updated_at = ?8 WHERE tenant = ?1 AND id = ?2`
	qScheduleDelete = `DELETE FROM schedules WHERE tenant = ?1 AND id = (
		SELECT id FROM schedules WHERE tenant = ?1 AND (id = ?2 OR name = ?2) ORDER BY id = ?2 DESC LIMIT 1)`
	qScheduleRuns = `SELECT r.schedule_id, r.seq, r.tick_at, r.outcome, r.job_id, r.missed, r.reason, r.recorded_at
		FROM schedule_runs r WHERE r.tenant = ?1 AND r.schedule_id = ?2 ORDER BY r.seq DESC LIMIT ?3`
	qSchedulesDue = `SELECT ` + scheduleCols + `,
		coalesce(j.state IN ('queued', 'leased'), 0),
		p.id IS NOT NULL, p.revoked_at IS NOT NULL, coalesce(p.queues, '[]')
		FROM schedules s
		LEFT JOIN jobs j ON j.tenant = s.tenant AND j.id = s.last_job_id AND s.last_job_id <> ''
		LEFT JOIN principals p ON p.tenant = s.tenant AND p.id = s.owner_id AND s.owner_id <> ''
		WHERE s.next_tick_at IS NOT NULL AND s.next_tick_at <= ?1
		ORDER BY s.next_tick_at LIMIT ?2`
	// qScheduleNextTick is the earliest tick of every tenant's schedules.
	qScheduleNextTick = `SELECT min(next_tick_at) FROM schedules`
	qScheduleAdvance  = `UPDATE schedules SET next_tick_at = ?4, last_tick_at = coalesce(?5, last_tick_at),
		last_job_id = CASE WHEN ?6 = '' THEN last_job_id ELSE ?6 END, paused = ?7,
		paused_reason = CASE WHEN ?7 THEN ?8 ELSE paused_reason END, run_seq = ?9
		WHERE tenant = ?1 AND id = ?2 AND next_tick_at = ?3`
	qScheduleRunInsert = `INSERT INTO schedule_runs (tenant, schedule_id, seq, tick_at, outcome, job_id, missed, reason, recorded_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	qAnyScheduleDue      = `SELECT EXISTS (SELECT 1 FROM schedules WHERE next_tick_at IS NOT NULL AND next_tick_at <= ?)`
	qScheduleRunsPrune   = `DELETE FROM schedule_runs WHERE tenant = ? AND schedule_id = ? AND seq <= ?`
	qScheduleTriggerMark = `UPDATE schedules SET last_job_id = ?3, run_seq = ?4 WHERE tenant = ?1 AND id = ?2`
)

type scanner interface{ Scan(dest ...any) error }

func scanSchedule(row scanner, extra ...any) (*store.Schedule, error) {
	var (
		sc               store.Schedule
		spec             string
		next, last       sql.NullInt64
		created, updated int64
	)
	dest := append([]any{&sc.Tenant, &sc.ID, &sc.Name, &spec, &sc.Paused, &sc.PausedReason, &next, &last,
		&sc.LastJobID, &sc.OwnerID, &sc.OwnerIdentity, &sc.RunSeq, &created, &updated}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	var err error
	if sc.Spec, err = store.DecodeScheduleSpec([]byte(spec)); err != nil {
		return nil, err
	}
	if next.Valid {
		sc.NextTickAt = fromMicros(next.Int64)
	}
	if last.Valid {
		sc.LastTickAt = fromMicros(last.Int64)
	}
	sc.CreatedAt, sc.UpdatedAt = fromMicros(created), fromMicros(updated)
	return &sc, nil
}

// CreateSchedule implements store.Schedules.
func (s *Store) CreateSchedule(ctx context.Context, p store.CreateScheduleParams) (*store.Schedule, error) {
	p, err := store.ValidateCreateSchedule(p)
	if err != nil {
		return nil, err
	}
	spec, err := store.EncodeScheduleSpec(p.Spec)
	if err != nil {
		return nil, err
	}
	var out *store.Schedule
	err = s.write(ctx, "create_schedule", func(tx *writeTx) error {
		var n int
		if err := tx.QueryRowContext(ctx, qScheduleCount, p.Tenant).Scan(&n); err != nil {
			return err
		}
		if n >= p.Limit {
			return fmt.Errorf("%w: the tenant has %d schedules, the most allowed; delete one first", store.ErrScheduleLimit, n)
		}
		sc, err := store.NewSchedule(p, s.opts.NewID(), s.clock(p.Now))
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qScheduleInsert, sc.Tenant, sc.ID, sc.Name, sc.Spec.Queue, string(spec), sc.Paused,
			sc.PausedReason, nullMicros(sc.NextTickAt), sc.OwnerID, sc.OwnerIdentity, micros(sc.CreatedAt))
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE) {
			return store.ErrScheduleExists
		}
		out = sc
		return err
	})
	return out, err
}

// GetSchedule implements store.Schedules.
func (s *Store) GetSchedule(ctx context.Context, tenant, idOrName string) (*store.Schedule, error) {
	if err := store.ValidateScheduleRef(tenant, idOrName); err != nil {
		return nil, err
	}
	var out *store.Schedule
	err := s.read(ctx, "get_schedule", func(tx *preparedTx) error {
		sc, err := scanSchedule(tx.QueryRowContext(ctx, qScheduleGet, tenant, idOrName))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrScheduleNotFound
		}
		out = sc
		return err
	})
	return out, err
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, p store.ListSchedulesParams) (*store.SchedulePage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	page := &store.SchedulePage{}
	err := s.read(ctx, "list_schedules", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qScheduleList, p.Tenant, p.Queue, p.After, p.Limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			sc, err := scanSchedule(rows)
			if err != nil {
				return err
			}
			page.Schedules = append(page.Schedules, sc)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if len(page.Schedules) > p.Limit {
		page.Schedules = page.Schedules[:p.Limit]
		page.NextAfter = page.Schedules[p.Limit-1].Name
	}
	return page, nil
}

func (s *Store) changeSchedule(ctx context.Context, op string, tenant, idOrName string, now time.Time, change func(sc *store.Schedule, now time.Time) error) (*store.Schedule, error) {
	var out *store.Schedule
	err := s.write(ctx, op, func(tx *writeTx) error {
		now := s.clock(now)
		sc, err := scanSchedule(tx.QueryRowContext(ctx, qScheduleGet, tenant, idOrName))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrScheduleNotFound
		}
		if err != nil {
			return err
		}
		if err := change(sc, now); err != nil {
			return err
		}
		spec, err := store.EncodeScheduleSpec(sc.Spec)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qScheduleUpdate, sc.Tenant, sc.ID, sc.Spec.Queue, string(spec), sc.Paused, sc.PausedReason,
			nullMicros(sc.NextTickAt), micros(sc.UpdatedAt))
		out = sc
		return err
	})
	return out, err
}

// UpdateSchedule implements store.Schedules.
func (s *Store) UpdateSchedule(ctx context.Context, p store.UpdateScheduleParams) (*store.Schedule, error) {
	if err := store.ValidateScheduleRef(p.Tenant, p.IDOrName); err != nil {
		return nil, err
	}
	p.Spec = p.Spec.WithDefaults()
	if err := store.ValidateScheduleSpec("spec", p.Spec); err != nil {
		return nil, err
	}
	return s.changeSchedule(ctx, "update_schedule", p.Tenant, p.IDOrName, p.Now, func(sc *store.Schedule, now time.Time) error {
		sc.Spec = p.Spec
		return store.RescheduleFromNow(sc, now)
	})
}

// SetSchedulePaused implements store.Schedules.
func (s *Store) SetSchedulePaused(ctx context.Context, p store.SetSchedulePausedParams) (*store.Schedule, error) {
	if err := store.ValidateScheduleRef(p.Tenant, p.IDOrName); err != nil {
		return nil, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	return s.changeSchedule(ctx, "pause_schedule", p.Tenant, p.IDOrName, p.Now, func(sc *store.Schedule, now time.Time) error {
		return store.DecidePause(sc, p.Paused, p.Reason, now)
	})
}

// DeleteSchedule implements store.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, tenant, idOrName string) error {
	if err := store.ValidateScheduleRef(tenant, idOrName); err != nil {
		return err
	}
	return s.write(ctx, "delete_schedule", func(tx *writeTx) error {
		res, err := tx.ExecContext(ctx, qScheduleDelete, tenant, idOrName)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return cmpErr(err, store.ErrScheduleNotFound)
		}
		return nil
	})
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// ListScheduleRuns implements store.Schedules.
func (s *Store) ListScheduleRuns(ctx context.Context, p store.ListScheduleRunsParams) ([]store.ScheduleRun, error) {
	sc, err := s.GetSchedule(ctx, p.Tenant, p.IDOrName)
	if err != nil {
		return nil, err
	}
	var runs []store.ScheduleRun
	err = s.read(ctx, "list_schedule_runs", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qScheduleRuns, p.Tenant, sc.ID, max(1, p.Limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r store.ScheduleRun
			var outcome string
			var tick, rec int64
			if err := rows.Scan(&r.ScheduleID, &r.Seq, &tick, &outcome, &r.JobID, &r.Missed, &r.Reason, &rec); err != nil {
				return err
			}
			r.Outcome, r.TickAt, r.RecordedAt = store.ScheduleRunOutcome(outcome), fromMicros(tick), fromMicros(rec)
			runs = append(runs, r)
		}
		return rows.Err()
	})
	return runs, err
}

func insertRun(ctx context.Context, tx *writeTx, tenant string, r store.ScheduleRun) error {
	_, err := tx.ExecContext(ctx, qScheduleRunInsert, tenant, r.ScheduleID, r.Seq, micros(r.TickAt), string(r.Outcome), r.JobID,
		r.Missed, r.Reason, micros(r.RecordedAt))
	return err
}

// TriggerSchedule implements store.Schedules.
func (s *Store) TriggerSchedule(ctx context.Context, p store.TriggerScheduleParams) (*store.ScheduleRun, error) {
	if err := store.ValidateTrigger(p); err != nil {
		return nil, err
	}
	var out *store.ScheduleRun
	err := s.write(ctx, "trigger_schedule", func(tx *writeTx) error {
		now := s.clock(p.Now)
		sc, err := scanSchedule(tx.QueryRowContext(ctx, qScheduleGet, p.Tenant, p.IDOrName))
		if errors.Is(err, sql.ErrNoRows) {
			return store.ErrScheduleNotFound
		}
		if err != nil {
			return err
		}
		req, run := store.PlanTrigger(sc, p, now)
		res, err := s.createCall(ctx, tx, createCall{p: store.CreateJobsParams{Tenant: sc.Tenant, Requests: []store.CreateRequest{req}, Now: now},
			window: windowOr(p.IdempotencyWindow)})
		if err != nil {
			return err
		}
		run.JobID = res[0].Job.ID
		out = &run
		if res[0].Replayed {
			run.Reason = "replayed: this request_id already triggered this job"
			return nil
		}
		if _, err := tx.ExecContext(ctx, qScheduleTriggerMark, sc.Tenant, sc.ID, run.JobID, run.Seq); err != nil {
			return err
		}
		if err := insertRun(ctx, tx, sc.Tenant, run); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qScheduleRunsPrune, sc.Tenant, sc.ID, run.Seq-store.ScheduleRunsKept)
		return err
	})
	return out, err
}

func windowOr(w time.Duration) time.Duration {
	if w <= 0 {
		return store.IdempotencyWindowDefault
	}
	return w
}

// FireDueSchedules implements store.Schedules.
func (s *Store) FireDueSchedules(ctx context.Context, p store.FireSchedulesParams) (store.FireSchedulesResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = store.FireBatchDefault
	}
	// Most passes find nothing due: look in a read transaction first, so
	// that an idle scheduler does not take the single write lock five
	// times a second.
	var due bool
	if err := s.read(ctx, "schedules_due", func(tx *preparedTx) error {
		return tx.QueryRowContext(ctx, qAnyScheduleDue, micros(s.clock(p.Now))).Scan(&due)
	}); err != nil {
		return store.FireSchedulesResult{}, err
	}
	if !due {
		return store.FireSchedulesResult{Now: s.clock(p.Now)}, nil
	}
	var res store.FireSchedulesResult
	err := s.write(ctx, "fire_schedules", func(tx *writeTx) error {
		res = store.FireSchedulesResult{}
		tx.wake = nil
		now := s.clock(p.Now)
		res.Now = now
		due, err := dueSchedules(ctx, tx, now, limit)
		if err != nil {
			return err
		}
		res.More = len(due) == limit
		if len(due) == 0 {
			var next sql.NullInt64
			if err := tx.QueryRowContext(ctx, qScheduleNextTick).Scan(&next); err != nil {
				return err
			}
			if next.Valid {
				res.NextTick = fromMicros(next.Int64)
			}
			return nil
		}
		for _, d := range due {
			f, err := store.PlanScheduleFiring(d, now)
			if err != nil {
				return fmt.Errorf("schedule %s: %w", d.Schedule.ID, err)
			}
			jobs := make([]store.CreateResult, len(f.Requests))
			for i, r := range f.Requests {
				if jobs[i], err = s.createTick(ctx, tx, d.Schedule.Tenant, r, now, windowOr(p.IdempotencyWindow)); err != nil {
					return fmt.Errorf("schedule %s: %w", d.Schedule.ID, err)
				}
			}
			adv, runs, sum := f.Finish(jobs, now)
			r, err := tx.ExecContext(ctx, qScheduleAdvance, adv.Tenant, adv.ID, micros(adv.OldNext), nullMicros(adv.Next),
				nullMicros(adv.LastTickAt), adv.LastJobID, adv.Paused, adv.PausedReason, adv.RunSeq)
			if err != nil {
				return err
			}
			if n, err := r.RowsAffected(); err != nil || n != 1 {
				return cmpErr(err, fmt.Errorf("schedule %s moved under the writer; nothing fired", adv.ID))
			}
			for _, run := range runs {
				if err := insertRun(ctx, tx, adv.Tenant, run); err != nil {
					return err
				}
			}
			if adv.PruneRunsUpTo > 0 {
				if _, err := tx.ExecContext(ctx, qScheduleRunsPrune, adv.Tenant, adv.ID, adv.PruneRunsUpTo); err != nil {
					return err
				}
			}
			res.Schedules = append(res.Schedules, sum)
		}
		return nil
	})
	return res, err
}

// createTick creates one tick's job in a savepoint: a tick whose
// idempotency key names a different request leaves nothing and answers a
// nil Job (Finish records it as skipped), so it holds up neither its
// schedule nor the pass.
func (s *Store) createTick(ctx context.Context, tx *writeTx, tenant string, r store.CreateRequest, now time.Time, window time.Duration) (store.CreateResult, error) {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT schedule_tick"); err != nil {
		return store.CreateResult{}, err
	}
	wake := len(tx.wake)
	res, err := s.createCall(ctx, tx, createCall{p: store.CreateJobsParams{Tenant: tenant, Requests: []store.CreateRequest{r}, Now: now}, window: window})
	switch {
	case errors.Is(err, store.ErrIdempotencyConflict):
		if _, rerr := tx.ExecContext(ctx, "ROLLBACK TO schedule_tick"); rerr != nil {
			return store.CreateResult{}, rerr
		}
		tx.wake = tx.wake[:wake]
		res = []store.CreateResult{{}}
	case err != nil:
		return store.CreateResult{}, err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE schedule_tick"); err != nil {
		return store.CreateResult{}, err
	}
	return res[0], nil
}

// dueSchedules reads up to limit schedules due at now, with their owners.
func dueSchedules(ctx context.Context, tx *writeTx, now time.Time, limit int) ([]store.DueSchedule, error) {
	rows, err := tx.QueryContext(ctx, qSchedulesDue, micros(now), limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var due []store.DueSchedule
	for rows.Next() {
		var d store.DueSchedule
		var ownerFound, revoked bool
		var queues string
		sc, err := scanSchedule(rows, &d.PreviousLive, &ownerFound, &revoked, &queues)
		if err != nil {
			return nil, err
		}
		d.Schedule = sc
		if sc.OwnerID != "" {
			var qs []string
			if err := json.Unmarshal([]byte(queues), &qs); err != nil {
				return nil, err
			}
			d.Owner = store.ScheduleOwner{Checked: true, Missing: !ownerFound, Revoked: revoked, Queues: qs}
		}
		due = append(due, d)
	}
	return due, rows.Err()
}
