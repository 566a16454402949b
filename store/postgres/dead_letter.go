package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// ListDeadJobs implements store.Store: DEAD jobs newest first (finished_at
// desc, id desc) with their attempt history; abandoned ones only when asked.
func (s *Store) ListDeadJobs(ctx context.Context, p store.ListDeadJobsParams) (*store.DeadJobPage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if p.Queue != "" {
		if err := validateQueue("queue", p.Queue); err != nil {
			return nil, err
		}
	}
	if err := p.Filter.Validate(); err != nil {
		return nil, err
	}
	limit, err := store.PageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var afterTime, afterID any
	if p.Cursor != "" {
		c, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		afterTime, afterID = c.at, c.id
	}
	q := qListDeadJobs
	if p.View == store.JobViewBasic {
		q = qListDeadJobsBasic
	}
	args := []any{p.Tenant, p.Queue, p.IncludeAbandoned, afterTime, afterID, limit + 1}
	if !p.Filter.IsZero() {
		var cond string
		cond, args = filterSQL(p.Filter, args)
		cols := jobColumns
		if p.View == store.JobViewBasic {
			cols = jobColumnsBasic
		}
		q = `SELECT ` + cols + qListDeadJobsWhere + ` AND ` + cond + qListDeadJobsOrder
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, s.readError(ctx, "list_dead_jobs", err)
	}
	recs, more, err := collectPage(rows, limit, p.MaxBytes)
	if err != nil {
		return nil, s.readError(ctx, "list_dead_jobs", err)
	}
	page := &store.DeadJobPage{}
	if len(recs) == 0 {
		return page, nil
	}
	ids := make([]string, 0, len(recs))
	for _, r := range recs {
		ids = append(ids, r.job.ID)
	}
	attempts, err := attemptsForJobs(ctx, s.pool, p.Tenant, ids)
	if err != nil {
		return nil, s.readError(ctx, "list_dead_jobs", err)
	}
	checkpoints, err := latestCheckpointsView(ctx, s.pool, p.Tenant, ids, p.View)
	if err != nil {
		return nil, s.readError(ctx, "list_dead_jobs", err)
	}
	for _, r := range recs {
		r.job.Checkpoint = checkpoints[r.job.ID]
		page.DeadJobs = append(page.DeadJobs, deadJob(r, attempts[r.job.ID]))
	}
	// Attempt histories and checkpoints count too: trim again with them.
	if n := store.FitPage(page.DeadJobs, p.MaxBytes, store.DeadJobSize); n < len(page.DeadJobs) {
		page.DeadJobs, more = page.DeadJobs[:n], true
	}
	if more {
		last := page.DeadJobs[len(page.DeadJobs)-1].Job
		page.NextCursor = encodeCursor(cursor{at: last.FinishedAt, id: last.ID})
	}
	return page, nil
}

func deadJob(r *jobRecord, attempts []store.Attempt) *store.DeadJob {
	return &store.DeadJob{Job: r.job, Attempts: attempts, ReplayedAs: r.replayedAs, Abandoned: r.abandoned}
}

func attemptsForJobs(ctx context.Context, q querier, tenant string, ids []string) (map[string][]store.Attempt, error) {
	rows, err := q.Query(ctx, qAttemptsForJobs, tenant, ids)
	if err != nil {
		return nil, err
	}
	as, err := collect(rows, scanAttempt)
	if err != nil {
		return nil, err
	}
	out := map[string][]store.Attempt{}
	for _, a := range as {
		out[a.JobID] = append(out[a.JobID], *a)
	}
	logs, err := attemptLogs(ctx, q, tenant, ids)
	if err != nil {
		return nil, err
	}
	for id, log := range logs {
		out[id] = store.MergeAttempts(out[id], log)
	}
	return out, nil
}

// loadDeadJob reads a job with its evidence; ErrNotFound when missing,
// ErrNotDead when not DEAD. lock takes the row lock for a change.
func loadDeadJob(ctx context.Context, q querier, tenant, id string, lock bool) (*store.DeadJob, error) {
	query := qGetJob
	if lock {
		query = qLockJob
	}
	rec, err := scanJob(q.QueryRow(ctx, query, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("job %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if rec.job.State != store.JobStateDead {
		return nil, fmt.Errorf("job %s is %s: %w", id, rec.job.State, store.ErrNotDead)
	}
	if err := attachCheckpoint(ctx, q, rec.job); err != nil {
		return nil, err
	}
	attempts, err := attemptsForJobs(ctx, q, tenant, []string{id})
	if err != nil {
		return nil, err
	}
	return deadJob(rec, attempts[id]), nil
}

func validateDeadJobCall(tenant, id, reason string) error {
	if err := store.ValidateTenant(tenant); err != nil {
		return err
	}
	if err := validateJobID(id); err != nil {
		return err
	}
	return store.ValidateReason(reason)
}

// GetDeadJob implements store.Store.
func (s *Store) GetDeadJob(ctx context.Context, tenant, jobID string) (*store.DeadJob, error) {
	if err := validateDeadJobCall(tenant, jobID, ""); err != nil {
		return nil, err
	}
	dj, err := loadDeadJob(ctx, s.pool, tenant, jobID, false)
	if err != nil {
		return nil, s.readError(ctx, "get_dead_job", err)
	}
	return dj, nil
}

// ReplayDeadJob implements store.Store. The new job gets a new id, the dead
// job's queue, kind, payload, metadata, priority, max attempts and
// dependency, replay_of set, a fresh retry deadline from the queue policy
// and its own QUEUED event; the dead job stays DEAD as evidence, with
// replayed_as set and a REPLAYED event. Replaying again is idempotent: it
// returns the first replay's job with alreadyReplayed = true.
func (s *Store) ReplayDeadJob(ctx context.Context, p store.ReplayDeadJobParams) (*store.Job, bool, error) {
	if err := validateDeadJobCall(p.Tenant, p.JobID, p.Reason); err != nil {
		return nil, false, err
	}
	var (
		out     *store.Job
		already bool
	)
	err := s.withTx(ctx, "replay", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		dj, err := loadDeadJob(ctx, tx, p.Tenant, p.JobID, true)
		if err != nil {
			return err
		}
		dead := dj.Job
		if already, err = store.DecideReplay(dead, dj.Abandoned, dj.ReplayedAs); err != nil {
			return err
		}
		if already {
			out, err = getJob(ctx, tx, p.Tenant, dj.ReplayedAs)
			if errors.Is(err, pgx.ErrNoRows) {
				return store.ReplayGone(p.JobID, dj.ReplayedAs)
			}
			return err
		}
		policy, err := getPolicy(ctx, tx, p.Tenant, dead.Queue)
		if err != nil {
			return err
		}
		id, err := s.newID()
		if err != nil {
			return err
		}
		plan := store.PlanReplay(*policy, dead, id, now, store.ClientChange{Actor: p.Actor, Reason: p.Reason})
		j := plan.Job
		var deadline any
		if !j.RetryDeadline.IsZero() {
			deadline = j.RetryDeadline
		}
		metadata, err := metadataJSON(j.Metadata)
		if err != nil {
			return err
		}
		rec, err := scanJob(tx.QueryRow(ctx, qInsertJob, p.Tenant, id, j.Queue, j.Kind, blobArg(j.Payload),
			metadata, j.Priority, j.MaxAttempts, j.CreatedAt, j.AvailableAt, deadline, j.ReplayOf, j.Dependency, j.ConcurrencyKey))
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qInsertEvent, p.Tenant, id, int64(1), string(plan.Queued.Type), now, plan.Queued.Data); err != nil {
			return err
		}
		var seq int64
		if err := tx.QueryRow(ctx, qMarkReplayed, p.Tenant, dead.ID, id).Scan(&seq); err != nil {
			return err
		}
		if err := appendReserved(ctx, tx, p.Tenant, dead.ID, seq, now, plan.Replayed); err != nil {
			return err
		}
		out = rec.job
		return s.notify(ctx, tx, p.Tenant, dead.Queue)
	})
	if err != nil {
		return nil, false, err
	}
	return out, already, nil
}

// AbandonDeadJob implements store.Store: the job stays DEAD, marked
// abandoned, with an ABANDONED event; repeating it returns the job.
func (s *Store) AbandonDeadJob(ctx context.Context, p store.AbandonDeadJobParams) (*store.DeadJob, error) {
	if err := validateDeadJobCall(p.Tenant, p.JobID, p.Reason); err != nil {
		return nil, err
	}
	var out *store.DeadJob
	err := s.withTx(ctx, "abandon", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		dj, err := loadDeadJob(ctx, tx, p.Tenant, p.JobID, true)
		if err != nil {
			return err
		}
		change, err := store.DecideAbandon(dj.Job, dj.Abandoned, dj.ReplayedAs)
		if err != nil {
			return err
		}
		if !change {
			out = dj
			return nil
		}
		rec, err := scanJob(tx.QueryRow(ctx, qMarkAbandoned, p.Tenant, p.JobID))
		if err != nil {
			return err
		}
		if err := appendReserved(ctx, tx, p.Tenant, p.JobID, rec.lastEventSeq, now,
			store.AbandonEvent(store.ClientChange{Actor: p.Actor, Reason: p.Reason})); err != nil {
			return err
		}
		rec.job.Checkpoint = dj.Job.Checkpoint
		out = deadJob(rec, dj.Attempts)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
