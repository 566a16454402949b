package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
)

// The schedule statements. The row is read with its owner and whether its
// last run's job is live, which is all store.DecideScheduleTicks needs.
const (
	scheduleCols = `s.tenant, s.id, s.name, s.spec, s.paused, s.paused_reason, s.next_tick_at, s.last_tick_at,
		s.last_job_id, s.owner_id, s.owner, s.run_seq, s.created_at, s.updated_at`

	qScheduleCount = `SELECT count(*) FROM schedules WHERE tenant = $1`
	// qScheduleTenantLock serialises creates of one tenant, so that the
	// cap holds under concurrent creates.
	qScheduleTenantLock = `SELECT pg_advisory_xact_lock(hashtextextended('leasehold.schedules:' || $1, 0))`
	qScheduleInsert     = `INSERT INTO schedules (tenant, id, name, queue, spec, paused, paused_reason, next_tick_at,
		owner_id, owner, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11)`
	qScheduleGet = `SELECT ` + scheduleCols + ` FROM schedules s
		WHERE s.tenant = $1 AND (s.id = $2 OR s.name = $2) ORDER BY s.id = $2 DESC LIMIT 1`
	qScheduleGetForUpdate = qScheduleGet + ` FOR UPDATE`
	qScheduleList         = `SELECT ` + scheduleCols + ` FROM schedules s
		WHERE s.tenant = $1 AND ($2 = '' OR s.queue = $2) AND s.name > $3 ORDER BY s.name LIMIT $4`
	qScheduleUpdate = `UPDATE schedules SET queue = $3, spec = $4, paused = $5, paused_reason = $6, next_tick_at = $7,
		updated_at = $8 WHERE tenant = $1 AND id = $2`
	qScheduleDelete = `DELETE FROM schedules s WHERE s.tenant = $1 AND s.id = (
		SELECT id FROM schedules WHERE tenant = $1 AND (id = $2 OR name = $2) ORDER BY id = $2 DESC LIMIT 1)`
	qScheduleRuns = `SELECT r.schedule_id, r.seq, r.tick_at, r.outcome, r.job_id, r.missed, r.reason, r.recorded_at
		FROM schedule_runs r WHERE r.tenant = $1 AND r.schedule_id = $2 ORDER BY r.seq DESC LIMIT $3`
	// qSchedulesDue locks due schedules of every tenant, skipping those
	// another coordinator is firing.
	qSchedulesDue = `SELECT ` + scheduleCols + `,
		coalesce(j.state IN ('queued', 'leased'), false),
		p.id IS NOT NULL, p.revoked_at IS NOT NULL, coalesce(p.queues, '{}')
		FROM schedules s
		LEFT JOIN jobs j ON j.tenant = s.tenant AND j.id = s.last_job_id AND s.last_job_id <> ''
		LEFT JOIN principals p ON p.tenant = s.tenant AND p.id = s.owner_id AND s.owner_id <> ''
		WHERE s.next_tick_at IS NOT NULL AND s.next_tick_at <= $1
		ORDER BY s.next_tick_at LIMIT $2
		FOR UPDATE OF s SKIP LOCKED`
	// qScheduleNextTick is the earliest tick of every tenant's schedules.
	qScheduleNextTick = `SELECT min(next_tick_at) FROM schedules`
	// qScheduleAdvance is the conditional update of the high-water mark:
	// it holds only while next_tick_at is the value the decision read.
	qScheduleAdvance = `UPDATE schedules SET next_tick_at = $4, last_tick_at = coalesce($5, last_tick_at),
		last_job_id = CASE WHEN $6 = '' THEN last_job_id ELSE $6 END, paused = $7,
		paused_reason = CASE WHEN $7 THEN $8 ELSE paused_reason END, run_seq = $9
		WHERE tenant = $1 AND id = $2 AND next_tick_at = $3`
	qScheduleRunInsert = `INSERT INTO schedule_runs (tenant, schedule_id, seq, tick_at, outcome, job_id, missed, reason, recorded_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	qScheduleRunsPrune   = `DELETE FROM schedule_runs WHERE tenant = $1 AND schedule_id = $2 AND seq <= $3`
	qScheduleTriggerMark = `UPDATE schedules SET last_job_id = $3, run_seq = $4 WHERE tenant = $1 AND id = $2`
)

// scheduleNameConstraint is the unique (tenant, name) constraint.
const scheduleNameConstraint = "schedules_name_key"

func scanSchedule(row pgx.Row, extra ...any) (*store.Schedule, error) {
	var (
		sc         store.Schedule
		spec       []byte
		next, last *time.Time
	)
	dest := append([]any{&sc.Tenant, &sc.ID, &sc.Name, &spec, &sc.Paused, &sc.PausedReason, &next, &last,
		&sc.LastJobID, &sc.OwnerID, &sc.OwnerIdentity, &sc.RunSeq, &sc.CreatedAt, &sc.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return nil, err
	}
	var err error
	if sc.Spec, err = store.DecodeScheduleSpec(spec); err != nil {
		return nil, err
	}
	if next != nil {
		sc.NextTickAt = next.UTC()
	}
	if last != nil {
		sc.LastTickAt = last.UTC()
	}
	sc.CreatedAt, sc.UpdatedAt = sc.CreatedAt.UTC(), sc.UpdatedAt.UTC()
	return &sc, nil
}

func nullTime(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
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
	err = s.withTx(ctx, "create_schedule", func(tx pgx.Tx) error {
		now, err := s.txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qScheduleTenantLock, p.Tenant); err != nil {
			return err
		}
		var n int
		if err := tx.QueryRow(ctx, qScheduleCount, p.Tenant).Scan(&n); err != nil {
			return err
		}
		if n >= p.Limit {
			return fmt.Errorf("%w: the tenant has %d schedules, the most allowed; delete one first", store.ErrScheduleLimit, n)
		}
		id, err := s.newID()
		if err != nil {
			return err
		}
		sc, err := store.NewSchedule(p, id, now)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, qScheduleInsert, sc.Tenant, sc.ID, sc.Name, sc.Spec.Queue, spec, sc.Paused, sc.PausedReason,
			nullTime(sc.NextTickAt), sc.OwnerID, sc.OwnerIdentity, sc.CreatedAt)
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.ConstraintName == scheduleNameConstraint {
			return store.ErrScheduleExists
		}
		out = sc
		return err
	})
	return out, err
}

// txNow is now, or the database's clock when now is zero.
func (s *Store) txNow(ctx context.Context, q queryer, now time.Time) (time.Time, error) {
	if !now.IsZero() {
		return now.UTC(), nil
	}
	var db time.Time
	if err := q.QueryRow(ctx, qNow).Scan(&db); err != nil {
		return time.Time{}, err
	}
	return db.UTC(), nil
}

// GetSchedule implements store.Schedules.
func (s *Store) GetSchedule(ctx context.Context, tenant, idOrName string) (*store.Schedule, error) {
	if err := store.ValidateScheduleRef(tenant, idOrName); err != nil {
		return nil, err
	}
	sc, err := scanSchedule(s.pool.QueryRow(ctx, qScheduleGet, tenant, idOrName))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.ErrScheduleNotFound
	}
	if err != nil {
		return nil, s.readError(ctx, "get_schedule", err)
	}
	return sc, nil
}

// ListSchedules implements store.Schedules.
func (s *Store) ListSchedules(ctx context.Context, p store.ListSchedulesParams) (*store.SchedulePage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qScheduleList, p.Tenant, p.Queue, p.After, p.Limit+1)
	if err != nil {
		return nil, s.readError(ctx, "list_schedules", err)
	}
	defer rows.Close()
	page := &store.SchedulePage{}
	for rows.Next() {
		sc, err := scanSchedule(rows)
		if err != nil {
			return nil, s.readError(ctx, "list_schedules", err)
		}
		page.Schedules = append(page.Schedules, sc)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readError(ctx, "list_schedules", err)
	}
	if len(page.Schedules) > p.Limit {
		page.Schedules = page.Schedules[:p.Limit]
		page.NextAfter = page.Schedules[p.Limit-1].Name
	}
	return page, nil
}

// changeSchedule reads a schedule for update, lets change edit it, and
// writes it back.
func (s *Store) changeSchedule(ctx context.Context, op, tenant, idOrName string, now time.Time, change func(sc *store.Schedule, now time.Time) error) (*store.Schedule, error) {
	var out *store.Schedule
	err := s.withTx(ctx, op, func(tx pgx.Tx) error {
		now, err := s.txNow(ctx, tx, now)
		if err != nil {
			return err
		}
		sc, err := scanSchedule(tx.QueryRow(ctx, qScheduleGetForUpdate, tenant, idOrName))
		if errors.Is(err, pgx.ErrNoRows) {
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
		_, err = tx.Exec(ctx, qScheduleUpdate, sc.Tenant, sc.ID, sc.Spec.Queue, spec, sc.Paused, sc.PausedReason,
			nullTime(sc.NextTickAt), sc.UpdatedAt)
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
	tag, err := s.pool.Exec(ctx, qScheduleDelete, tenant, idOrName)
	if err != nil {
		return s.readError(ctx, "delete_schedule", err)
	}
	if tag.RowsAffected() == 0 {
		return store.ErrScheduleNotFound
	}
	return nil
}

// ListScheduleRuns implements store.Schedules.
func (s *Store) ListScheduleRuns(ctx context.Context, p store.ListScheduleRunsParams) ([]store.ScheduleRun, error) {
	sc, err := s.GetSchedule(ctx, p.Tenant, p.IDOrName)
	if err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qScheduleRuns, p.Tenant, sc.ID, max(1, p.Limit))
	if err != nil {
		return nil, s.readError(ctx, "list_schedule_runs", err)
	}
	runs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.ScheduleRun, error) {
		var r store.ScheduleRun
		var outcome string
		err := row.Scan(&r.ScheduleID, &r.Seq, &r.TickAt, &outcome, &r.JobID, &r.Missed, &r.Reason, &r.RecordedAt)
		r.Outcome, r.TickAt, r.RecordedAt = store.ScheduleRunOutcome(outcome), r.TickAt.UTC(), r.RecordedAt.UTC()
		return r, err
	})
	if err != nil {
		return nil, s.readError(ctx, "list_schedule_runs", err)
	}
	return runs, nil
}

// TriggerSchedule implements store.Schedules.
func (s *Store) TriggerSchedule(ctx context.Context, p store.TriggerScheduleParams) (*store.ScheduleRun, error) {
	if err := store.ValidateTrigger(p); err != nil {
		return nil, err
	}
	var out *store.ScheduleRun
	err := s.withLazyTx(ctx, "trigger_schedule", func(tx *lazyTx) error {
		now, err := s.txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		sc, err := scanSchedule(tx.QueryRow(ctx, qScheduleGetForUpdate, p.Tenant, p.IDOrName))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.ErrScheduleNotFound
		}
		if err != nil {
			return err
		}
		req, run := store.PlanTrigger(sc, p, now)
		answers, err := s.createCalls(ctx, tx, []createCall{{p: store.CreateJobsParams{Tenant: sc.Tenant, Requests: []store.CreateRequest{req}, Now: p.Now},
			window: cmpWindow(p.IdempotencyWindow)}}, nil)
		if err != nil {
			return err
		}
		if answers[0].err != nil {
			return answers[0].err
		}
		run.JobID = answers[0].results[0].Job.ID
		if answers[0].results[0].Replayed {
			run.Reason = "replayed: this request_id already triggered this job"
			out = &run
			return nil
		}
		b := &pgx.Batch{}
		b.Queue(qScheduleTriggerMark, sc.Tenant, sc.ID, run.JobID, run.Seq)
		b.Queue(qScheduleRunInsert, sc.Tenant, sc.ID, run.Seq, run.TickAt, string(run.Outcome), run.JobID, run.Missed, run.Reason, run.RecordedAt)
		b.Queue(qScheduleRunsPrune, sc.Tenant, sc.ID, run.Seq-store.ScheduleRunsKept)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		out = &run
		return nil
	})
	return out, err
}

func cmpWindow(w time.Duration) time.Duration {
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
	var res store.FireSchedulesResult
	err := s.withLazyTx(ctx, "fire_schedules", func(tx *lazyTx) error {
		res = store.FireSchedulesResult{}
		now, err := s.txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		res.Now = now
		due, err := dueSchedules(ctx, tx, now, limit)
		if err != nil {
			return err
		}
		res.More = len(due) == limit
		if len(due) == 0 {
			var next *time.Time
			if err := tx.QueryRow(ctx, qScheduleNextTick).Scan(&next); err != nil {
				return err
			}
			if next != nil {
				res.NextTick = *next
			}
			return nil
		}
		firings := make([]store.ScheduleFiring, 0, len(due))
		var calls []createCall
		for _, d := range due {
			f, err := store.PlanScheduleFiring(d, now)
			if err != nil {
				return fmt.Errorf("schedule %s: %w", d.Schedule.ID, err)
			}
			firings = append(firings, f)
			for _, r := range f.Requests {
				calls = append(calls, createCall{p: store.CreateJobsParams{Tenant: d.Schedule.Tenant, Requests: []store.CreateRequest{r}, Now: p.Now},
					window: cmpWindow(p.IdempotencyWindow)})
			}
		}
		var answers []createAnswer
		if len(calls) > 0 {
			if answers, err = s.createCalls(ctx, tx, calls, nil); err != nil {
				return err
			}
		}
		b := &pgx.Batch{}
		ai := 0
		counts := make([]int, len(firings)) // statements queued after each advance
		for fi, f := range firings {
			jobs := make([]store.CreateResult, len(f.Requests))
			for i := range jobs {
				a := answers[ai]
				ai++
				switch {
				case errors.Is(a.err, store.ErrIdempotencyConflict):
					// Left nil: Finish records the tick as skipped.
				case a.err != nil:
					return fmt.Errorf("schedule %s tick %s: %w", f.Due.Schedule.ID, f.Decision.Fire[i].Format(time.RFC3339Nano), a.err)
				default:
					jobs[i] = a.results[0]
				}
			}
			adv, runs, sum := f.Finish(jobs, now)
			b.Queue(qScheduleAdvance, adv.Tenant, adv.ID, adv.OldNext, nullTime(adv.Next), nullTime(adv.LastTickAt), adv.LastJobID,
				adv.Paused, adv.PausedReason, adv.RunSeq)
			for _, r := range runs {
				b.Queue(qScheduleRunInsert, adv.Tenant, adv.ID, r.Seq, r.TickAt, string(r.Outcome), r.JobID, r.Missed, r.Reason, r.RecordedAt)
			}
			counts[fi] = len(runs)
			if adv.PruneRunsUpTo > 0 {
				b.Queue(qScheduleRunsPrune, adv.Tenant, adv.ID, adv.PruneRunsUpTo)
				counts[fi]++
			}
			res.Schedules = append(res.Schedules, sum)
		}
		br := tx.SendBatch(ctx, b)
		for fi, f := range firings {
			tag, err := br.Exec()
			if err != nil {
				br.Close()
				return err
			}
			if tag.RowsAffected() != 1 {
				br.Close()
				// The row is locked, so this is a bug, not a race: roll
				// back rather than fire a tick twice.
				return engineErrorf("schedule %s moved under its lock; nothing fired", f.Due.Schedule.ID)
			}
			for range counts[fi] {
				if _, err := br.Exec(); err != nil {
					br.Close()
					return err
				}
			}
		}
		return br.Close()
	})
	return res, err
}

// dueSchedules reads up to limit schedules due at now, with their owners.
func dueSchedules(ctx context.Context, tx *lazyTx, now time.Time, limit int) ([]store.DueSchedule, error) {
	rows, err := tx.Query(ctx, qSchedulesDue, now, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var due []store.DueSchedule
	for rows.Next() {
		var d store.DueSchedule
		var ownerFound, revoked bool
		var queues []string
		sc, err := scanSchedule(rows, &d.PreviousLive, &ownerFound, &revoked, &queues)
		if err != nil {
			return nil, err
		}
		d.Schedule = sc
		if sc.OwnerID != "" {
			d.Owner = store.ScheduleOwner{Checked: true, Missing: !ownerFound, Revoked: revoked, Queues: queues}
		}
		due = append(due, d)
	}
	return due, rows.Err()
}
