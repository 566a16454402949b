package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/leasehold/leasehold/store"
)

// The dead-letter queue: DEAD jobs with their evidence (payload, last error,
// attempt history), replayed as new jobs or abandoned, never deleted except
// by retention.

// deadJobTx assembles a DeadJob from a job row.
func deadJobTx(ctx context.Context, q querier, row *jobRow) (*store.DeadJob, error) {
	attempts, err := listAttemptsTx(ctx, q, row.job.Tenant, row.job.ID)
	if err != nil {
		return nil, err
	}
	return &store.DeadJob{Job: row.job, Attempts: attempts, ReplayedAs: row.replayedAs, Abandoned: row.abandoned}, nil
}

// ListDeadJobs implements store.Store.
func (s *Store) ListDeadJobs(ctx context.Context, p store.ListDeadJobsParams) (*store.DeadJobPage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if p.Queue != "" && !store.ValidName(p.Queue) {
		return nil, store.Invalid("queue", "must be a valid queue name")
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
		c, err := decodeCursor(cursorDead, p.Cursor)
		if err != nil {
			return nil, err
		}
		after, afterID = sql.NullInt64{Int64: micros(c.at), Valid: true}, c.id
	}
	q := qListDeadJobs
	if p.View == store.JobViewBasic {
		q = qListDeadJobsBasic
	}
	args := []any{p.Tenant, p.Queue, p.IncludeAbandoned, after, afterID, limit + 1}
	if !p.Filter.IsZero() {
		var cond string
		cond, args = filterSQL(p.Filter, args)
		sel := jobSelect
		if p.View == store.JobViewBasic {
			sel = jobSelectBasic
		}
		q = sel + qListDeadJobsConds + ` AND ` + cond + qListDeadJobsOrder
	}
	page := &store.DeadJobPage{}
	err = s.read(ctx, "list dead jobs", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, q, args...)
		if err != nil {
			return err
		}
		// As in ListJobs: reading stops at the first row off the page.
		budget := store.NewPageBudget(p.MaxBytes)
		more := false
		var jobs []*jobRow
		for rows.Next() {
			if len(jobs) == limit {
				more = true
				break
			}
			row, err := scanJob(rows)
			if err != nil {
				rows.Close()
				return err
			}
			if !budget.Take(store.JobSize(row.job)) {
				more = true
				break
			}
			jobs = append(jobs, row)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, row := range jobs {
			dj, err := deadJobTx(ctx, tx, row)
			if err != nil {
				return err
			}
			page.DeadJobs = append(page.DeadJobs, dj)
		}
		// Attempt histories count too: trim again with them.
		if n := store.FitPage(page.DeadJobs, p.MaxBytes, store.DeadJobSize); n < len(page.DeadJobs) {
			page.DeadJobs, more = page.DeadJobs[:n], true
		}
		if more {
			last := page.DeadJobs[len(page.DeadJobs)-1].Job
			page.NextCursor = encodeCursor(cursorDead, last.FinishedAt, last.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return page, nil
}

// GetDeadJob implements store.Store.
func (s *Store) GetDeadJob(ctx context.Context, tenant, jobID string) (*store.DeadJob, error) {
	if err := store.ValidateJobRef(tenant, jobID); err != nil {
		return nil, err
	}
	var dj *store.DeadJob
	err := s.read(ctx, "get dead job", func(tx *preparedTx) error {
		row, err := getJobTx(ctx, tx, tenant, jobID)
		if err != nil {
			return err
		}
		if row.job.State != store.JobStateDead {
			return fmt.Errorf("job %q is %s: %w", jobID, row.job.State, store.ErrNotDead)
		}
		dj, err = deadJobTx(ctx, tx, row)
		return err
	})
	return dj, err
}

// ReplayDeadJob implements store.Store. Replaying twice is idempotent: the
// second call returns the first replay's job with alreadyReplayed = true.
func (s *Store) ReplayDeadJob(ctx context.Context, p store.ReplayDeadJobParams) (*store.Job, bool, error) {
	if err := store.ValidateJobRef(p.Tenant, p.JobID); err != nil {
		return nil, false, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, false, err
	}
	var (
		job      *store.Job
		replayed bool
	)
	err := s.write(ctx, "replay", func(tx *writeTx) error {
		job, replayed = nil, false
		now := s.clock(p.Now)
		row, err := getJobTx(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return err
		}
		dead := row.job
		if replayed, err = store.DecideReplay(dead, row.abandoned, row.replayedAs); err != nil {
			return err
		}
		if replayed {
			prev, err := getJobTx(ctx, tx, p.Tenant, row.replayedAs)
			if errors.Is(err, store.ErrNotFound) {
				return store.ReplayGone(p.JobID, row.replayedAs)
			}
			if err != nil {
				return err
			}
			job = prev.job
			return nil
		}
		pol, err := policyTx(ctx, tx, p.Tenant, dead.Queue)
		if err != nil {
			return err
		}
		plan := store.PlanReplay(*pol, dead, s.opts.NewID(), now, store.ClientChange{Actor: p.Actor, Reason: p.Reason})
		j := plan.Job
		if err := insertNewJob(ctx, tx, j, plan.Queued); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qMarkReplayed, p.Tenant, dead.ID, j.ID); err != nil {
			return fmt.Errorf("mark replayed: %w", err)
		}
		if _, err := appendEvent(ctx, tx, p.Tenant, dead.ID, now, plan.Replayed); err != nil {
			return err
		}
		created, err := getJobTx(ctx, tx, p.Tenant, j.ID)
		if err != nil {
			return err
		}
		job = created.job
		tx.wake = append(tx.wake, store.QueueRef{Tenant: p.Tenant, Queue: j.Queue})
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return job, replayed, nil
}

// AbandonDeadJob implements store.Store.
func (s *Store) AbandonDeadJob(ctx context.Context, p store.AbandonDeadJobParams) (*store.DeadJob, error) {
	if err := store.ValidateJobRef(p.Tenant, p.JobID); err != nil {
		return nil, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	var dj *store.DeadJob
	err := s.write(ctx, "abandon", func(tx *writeTx) error {
		now := s.clock(p.Now)
		row, err := getJobTx(ctx, tx, p.Tenant, p.JobID)
		if err != nil {
			return err
		}
		change, err := store.DecideAbandon(row.job, row.abandoned, row.replayedAs)
		if err != nil {
			return err
		}
		if change {
			if _, err := tx.ExecContext(ctx, qMarkAbandoned, p.Tenant, p.JobID); err != nil {
				return fmt.Errorf("abandon: %w", err)
			}
			if _, err := appendEvent(ctx, tx, p.Tenant, p.JobID, now, store.AbandonEvent(store.ClientChange{Actor: p.Actor, Reason: p.Reason})); err != nil {
				return err
			}
			if row, err = getJobTx(ctx, tx, p.Tenant, p.JobID); err != nil {
				return err
			}
		}
		dj, err = deadJobTx(ctx, tx, row)
		return err
	})
	if err != nil {
		return nil, err
	}
	return dj, nil
}
