package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Bulk operations (store/operation.go has the model). SQLite has a single
// writer: a chunk's write transaction excludes every other write, so the
// rows it reads stay as read until it commits.
const (
	operationColumns = `tenant, id, kind, state, filter, reason, priority, actor, actor_name, queue_scope,
	created_at, updated_at, finished_at, matched, acted, skipped_changed, skipped_out_of_scope, failed,
	error, cancel_requested, lease_owner, lease_expires_at`

	qCountRunningOperations = `SELECT count(*) FROM operations WHERE tenant = ?1 AND state = 'running'`

	qInsertOperation = `INSERT INTO operations (tenant, id, kind, state, filter, reason, priority, actor,
	actor_name, queue_scope, created_at)
VALUES (?1, ?2, ?3, 'running', ?4, ?5, ?6, ?7, ?8, ?9, ?10)`

	qSetOperationMatched = `UPDATE operations SET matched = ?3,
	state = CASE WHEN ?3 = 0 THEN 'succeeded' ELSE state END,
	finished_at = CASE WHEN ?3 = 0 THEN ?4 END
WHERE tenant = ?1 AND id = ?2 RETURNING ` + operationColumns

	qGetOperation = `SELECT ` + operationColumns + ` FROM operations WHERE tenant = ?1 AND id = ?2`

	qListOperations = `SELECT ` + operationColumns + ` FROM operations
WHERE tenant = ?1 AND (?2 = '' OR state = ?2)
  AND (?3 IS NULL OR created_at < ?3 OR (created_at = ?3 AND id < ?4))
ORDER BY created_at DESC, id DESC
LIMIT ?5`

	qRequestCancelOperation = `UPDATE operations SET cancel_requested = 1
WHERE tenant = ?1 AND id = ?2 AND state = 'running' RETURNING ` + operationColumns

	qClaimOperation = `UPDATE operations SET lease_owner = ?1, lease_expires_at = ?3 + ?2
WHERE (tenant, id) = (
	SELECT tenant, id FROM operations
	WHERE state = 'running' AND (lease_expires_at IS NULL OR lease_expires_at <= ?3 OR lease_owner = ?1)
	ORDER BY created_at LIMIT 1)
RETURNING ` + operationColumns

	qPendingItems = `SELECT job_id FROM operation_items
WHERE tenant = ?1 AND operation_id = ?2 AND result = 0
ORDER BY job_id LIMIT ?3`

	qMarkItem = `UPDATE operation_items SET result = ?4 WHERE tenant = ?1 AND operation_id = ?2 AND job_id = ?3`

	qAdvanceOperation = `UPDATE operations SET
	acted = acted + ?3, skipped_changed = skipped_changed + ?4,
	skipped_out_of_scope = skipped_out_of_scope + ?5, failed = failed + ?6,
	updated_at = ?7, lease_expires_at = ?7 + ?8,
	state = coalesce(?9, state), finished_at = CASE WHEN ?9 IS NULL THEN NULL ELSE ?7 END
WHERE tenant = ?1 AND id = ?2 RETURNING ` + operationColumns

	qFailOperation = `UPDATE operations SET state = 'failed', finished_at = ?4, updated_at = ?4, error = ?3
WHERE tenant = ?1 AND id = ?2 AND state = 'running' AND lease_owner = ?5
RETURNING ` + operationColumns

	qPruneOperations = `DELETE FROM operations WHERE (tenant, id) IN (
	SELECT tenant, id FROM operations WHERE finished_at < ?1 ORDER BY finished_at LIMIT ?2)`

	qMakeAvailableOne = `UPDATE jobs SET available_at = ?3
WHERE tenant = ?1 AND id = ?2 AND state = 'queued' AND available_at > ?3`

	qSetQueuedPriorityOne = `UPDATE jobs SET priority = ?3 WHERE tenant = ?1 AND id = ?2 AND state = 'queued'`

	qDeleteIdempotencyKeysOfJob = `DELETE FROM idempotency_keys WHERE tenant = ?1 AND job_id = ?2`

	// qDeleteFinishedJob deletes a finished job; its events, attempts,
	// checkpoints and effects go with it by ON DELETE CASCADE.
	qDeleteFinishedJob = `DELETE FROM jobs WHERE tenant = ?1 AND id = ?2
AND state IN ('succeeded', 'failed', 'cancelled', 'dead')`
)

func scanOperation(r rowScanner) (*store.Operation, error) {
	var (
		o                           store.Operation
		kind, state, scope          string
		created                     int64
		updated, finished, leaseExp sql.NullInt64
	)
	err := r.Scan(&o.Tenant, &o.ID, &kind, &state, &o.Filter, &o.Reason, &o.Priority, &o.Actor, &o.ActorName, &scope,
		&created, &updated, &finished, &o.Counts.Matched, &o.Counts.Acted, &o.Counts.SkippedChanged,
		&o.Counts.SkippedOutOfScope, &o.Counts.Failed, &o.Error, &o.CancelRequested, &o.LeaseOwner, &leaseExp)
	if err != nil {
		return nil, err
	}
	o.Kind, o.State = store.OperationKind(kind), store.OperationState(state)
	if o.QueueScope, err = store.DecodeQueueScope(scope); err != nil {
		return nil, err
	}
	o.CreatedAt = fromMicros(created)
	if updated.Valid {
		o.UpdatedAt = fromMicros(updated.Int64)
	}
	if finished.Valid {
		o.FinishedAt = fromMicros(finished.Int64)
	}
	if leaseExp.Valid {
		o.LeaseExpiresAt = fromMicros(leaseExp.Int64)
	}
	return &o, nil
}

func operationRef(tenant, id string) error {
	if err := store.ValidateTenant(tenant); err != nil {
		return err
	}
	return store.ValidateText("operation", id, store.NameMaxLen, true)
}

func notFoundOperation(id string, err error) error {
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("operation %s: %w", id, store.ErrOperationNotFound)
	}
	return err
}

// StartOperation implements store.Store.
func (s *Store) StartOperation(ctx context.Context, p store.StartOperationParams) (*store.Operation, error) {
	if err := store.ValidateStartOperation(p); err != nil {
		return nil, err
	}
	f, err := store.OperationFilter(p.Kind, p.Filter)
	if err != nil {
		return nil, err
	}
	id := cmp.Or(p.ID, s.opts.NewID())
	limit := cmp.Or(p.Limit, store.OperationsRunningDefault)
	var out *store.Operation
	err = s.write(ctx, "start_operation", func(tx *writeTx) error {
		now := s.clock(p.Now)
		var running int
		if err := tx.QueryRowContext(ctx, qCountRunningOperations, p.Tenant).Scan(&running); err != nil {
			return err
		}
		if running >= limit {
			return fmt.Errorf("tenant runs %d operations (at most %d at once): %w", running, limit, store.ErrOperationLimit)
		}
		if _, err := tx.ExecContext(ctx, qInsertOperation, p.Tenant, id, string(p.Kind), p.FilterText, p.Reason, p.Priority,
			p.Actor, p.ActorName, store.EncodeQueueScope(p.QueueScope), micros(now)); err != nil {
			return err
		}
		cond, args := filterSQL(f, []any{p.Tenant, id})
		res, err := tx.ExecContext(ctx, `INSERT INTO operation_items (tenant, operation_id, job_id)
			SELECT j.tenant, ?2, j.id FROM jobs j WHERE j.tenant = ?1 AND `+cond, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		out, err = scanOperation(tx.QueryRowContext(ctx, qSetOperationMatched, p.Tenant, id, n, micros(now)))
		return err
	})
	return out, err
}

// GetOperation implements store.Store.
func (s *Store) GetOperation(ctx context.Context, tenant, id string) (*store.Operation, error) {
	if err := operationRef(tenant, id); err != nil {
		return nil, err
	}
	var out *store.Operation
	err := s.read(ctx, "get_operation", func(tx *preparedTx) error {
		op, err := scanOperation(tx.QueryRowContext(ctx, qGetOperation, tenant, id))
		out = op
		return notFoundOperation(id, err)
	})
	return out, err
}

// ListOperations implements store.Store.
func (s *Store) ListOperations(ctx context.Context, p store.ListOperationsParams) (*store.OperationPage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	limit, err := store.PageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var after sql.NullInt64
	var afterID string
	if p.Cursor != "" {
		c, err := decodeCursor(cursorOperations, p.Cursor)
		if err != nil {
			return nil, err
		}
		after, afterID = sql.NullInt64{Int64: micros(c.at), Valid: true}, c.id
	}
	page := &store.OperationPage{}
	err = s.read(ctx, "list_operations", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qListOperations, p.Tenant, string(p.State), after, afterID, limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			op, err := scanOperation(rows)
			if err != nil {
				return err
			}
			page.Operations = append(page.Operations, op)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if len(page.Operations) > limit {
		page.Operations = page.Operations[:limit]
		last := page.Operations[limit-1]
		page.NextCursor = encodeCursor(cursorOperations, last.CreatedAt, last.ID)
	}
	return page, nil
}

// CancelOperation implements store.Store.
func (s *Store) CancelOperation(ctx context.Context, tenant, id string, _ time.Time) (*store.Operation, error) {
	if err := operationRef(tenant, id); err != nil {
		return nil, err
	}
	var out *store.Operation
	err := s.write(ctx, "cancel_operation", func(tx *writeTx) error {
		op, err := scanOperation(tx.QueryRowContext(ctx, qRequestCancelOperation, tenant, id))
		if errors.Is(err, sql.ErrNoRows) {
			op, err = scanOperation(tx.QueryRowContext(ctx, qGetOperation, tenant, id))
		}
		out = op
		return notFoundOperation(id, err)
	})
	return out, err
}

// ClaimOperation implements store.Store.
func (s *Store) ClaimOperation(ctx context.Context, p store.ClaimOperationParams) (*store.Operation, error) {
	if p.Owner == "" || p.LeaseTTL <= 0 {
		return nil, store.Invalid("owner", "an owner and a positive lease are required")
	}
	var out *store.Operation
	err := s.write(ctx, "claim_operation", func(tx *writeTx) error {
		out = nil
		op, err := scanOperation(tx.QueryRowContext(ctx, qClaimOperation, p.Owner, p.LeaseTTL.Microseconds(), micros(s.clock(p.Now))))
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		out = op
		return err
	})
	return out, err
}

// FailOperation implements store.Store.
func (s *Store) FailOperation(ctx context.Context, p store.FailOperationParams) (*store.Operation, error) {
	if err := operationRef(p.Tenant, p.ID); err != nil {
		return nil, err
	}
	var out *store.Operation
	err := s.write(ctx, "fail_operation", func(tx *writeTx) error {
		op, err := scanOperation(tx.QueryRowContext(ctx, qFailOperation, p.Tenant, p.ID, p.Error, micros(s.clock(p.Now)), p.Owner))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("operation %s: %w", p.ID, store.ErrOperationLeaseLost)
		}
		out = op
		return err
	})
	return out, err
}

// PruneOperations implements store.Store.
func (s *Store) PruneOperations(ctx context.Context, before time.Time, limit int) (int64, error) {
	var n int64
	err := s.write(ctx, "prune_operations", func(tx *writeTx) error {
		res, err := tx.ExecContext(ctx, qPruneOperations, micros(before), cmp.Or(limit, store.PruneBatchSizeDefault))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// RunOperationChunk implements store.Store: one write transaction that
// checks the lease, reads the next pending items' jobs, decides each
// (store.DecideOperationRow), applies each action with the single-job
// call's statements, and records the results and counts.
func (s *Store) RunOperationChunk(ctx context.Context, p store.RunChunkParams) (store.ChunkResult, error) {
	if err := operationRef(p.Tenant, p.ID); err != nil {
		return store.ChunkResult{}, err
	}
	limit := store.ChunkLimit(p.Limit)
	var res store.ChunkResult
	err := s.write(ctx, "operation_chunk", func(tx *writeTx) error {
		res = store.ChunkResult{}
		now := s.clock(p.Now)
		op, err := scanOperation(tx.QueryRowContext(ctx, qGetOperation, p.Tenant, p.ID))
		if err != nil {
			return notFoundOperation(p.ID, err)
		}
		if op.State != store.OperationRunning || op.LeaseOwner != p.Owner {
			return fmt.Errorf("operation %s (%s, held by %q): %w", p.ID, op.State, op.LeaseOwner, store.ErrOperationLeaseLost)
		}
		var rows []store.OperationRow
		if !op.CancelRequested {
			if rows, err = readOperationRows(ctx, tx, op, limit); err != nil {
				return err
			}
		}
		wake := map[string]bool{}
		for _, r := range rows {
			d := store.DecideOperationRow(op, r, now)
			if d.Result == store.RowActed {
				if err := s.applyRow(ctx, tx, op, d.Action, r, now); err != nil {
					return err
				}
				if d.Action == store.ActReplay || d.Action == store.ActMakeAvailable {
					wake[r.Job.Queue] = true
				}
			}
			if _, err := tx.ExecContext(ctx, qMarkItem, p.Tenant, p.ID, r.JobID, int(d.Result)); err != nil {
				return err
			}
			res.Rows.Add(d.Result, 1)
		}
		state, finished := store.FinishState(op, len(rows) == limit)
		var stateArg any
		if finished {
			stateArg = string(state)
		}
		op, err = scanOperation(tx.QueryRowContext(ctx, qAdvanceOperation, p.Tenant, p.ID, res.Rows.Acted, res.Rows.SkippedChanged,
			res.Rows.SkippedOutOfScope, res.Rows.Failed, micros(now), p.LeaseTTL.Microseconds(), stateArg))
		if err != nil {
			return err
		}
		for q := range wake {
			ref := store.QueueRef{Tenant: p.Tenant, Queue: q}
			tx.wake = append(tx.wake, ref)
			res.Queues = append(res.Queues, ref)
		}
		res.Operation, res.Handled, res.Finished = op, len(rows), finished
		return nil
	})
	if err != nil {
		return store.ChunkResult{}, err
	}
	return res, nil
}

// readOperationRows reads the next pending items of op with their jobs and
// whether each still matches the operation's filter.
func readOperationRows(ctx context.Context, tx *writeTx, op *store.Operation, limit int) ([]store.OperationRow, error) {
	f, err := store.ParseJobFilter(op.Filter)
	if err != nil {
		return nil, fmt.Errorf("operation %s: its filter no longer parses: %w", op.ID, err)
	}
	if f, err = store.OperationFilter(op.Kind, f); err != nil {
		return nil, err
	}
	ids, err := pendingItems(ctx, tx, op, limit)
	if err != nil {
		return nil, err
	}
	cond, args := filterSQL(f, []any{op.Tenant, ""})
	q := jobSelectColumns + `, j.last_event_seq, ` + cond + jobSelectFrom + `WHERE j.tenant = ?1 AND j.id = ?2`
	out := make([]store.OperationRow, len(ids))
	for i, id := range ids {
		args[1] = id
		var seq int64
		var matches bool
		row, err := scanJob(tx.QueryRowContext(ctx, q, args...), &seq, &matches)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			out[i] = store.OperationRow{JobID: id} // gone since the match
			continue
		case err != nil:
			return nil, err
		}
		out[i] = store.OperationRow{JobID: id, Job: row.job, Matches: matches, ReplayedAs: row.replayedAs,
			Abandoned: row.abandoned, LastEventSeq: seq}
	}
	return out, nil
}

// applyRow applies one decided action with the single-job call's
// statements and events.
func (s *Store) applyRow(ctx context.Context, tx *writeTx, op *store.Operation, a store.RowAction, r store.OperationRow, now time.Time) error {
	tenant, id, j := op.Tenant, r.JobID, r.Job
	change := store.ClientChange{Actor: op.Actor, Reason: op.Reason, Operation: op.ID}
	switch a {
	case store.ActCancelQueued:
		if _, err := tx.ExecContext(ctx, qCancelQueued, tenant, id, micros(now), op.Reason); err != nil {
			return fmt.Errorf("cancel: %w", err)
		}
		_, err := appendEvent(ctx, tx, tenant, id, now, store.CancelEvent(j, change))
		return err
	case store.ActRequestCancel:
		if _, err := tx.ExecContext(ctx, qRequestCancelLeased, tenant, id, op.Reason); err != nil {
			return fmt.Errorf("request cancel: %w", err)
		}
		_, err := appendEvent(ctx, tx, tenant, id, now, store.CancelEvent(j, change))
		return err
	case store.ActReplay:
		pol, err := policyTx(ctx, tx, tenant, j.Queue)
		if err != nil {
			return err
		}
		plan := store.PlanReplay(*pol, j, s.opts.NewID(), now, change)
		if err := insertNewJob(ctx, tx, plan.Job, plan.Queued); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, qMarkReplayed, tenant, j.ID, plan.Job.ID); err != nil {
			return fmt.Errorf("mark replayed: %w", err)
		}
		_, err = appendEvent(ctx, tx, tenant, j.ID, now, plan.Replayed)
		return err
	case store.ActAbandon:
		if _, err := tx.ExecContext(ctx, qMarkAbandoned, tenant, id); err != nil {
			return fmt.Errorf("abandon: %w", err)
		}
		_, err := appendEvent(ctx, tx, tenant, id, now, store.AbandonEvent(change))
		return err
	case store.ActMakeAvailable:
		_, err := tx.ExecContext(ctx, qMakeAvailableOne, tenant, id, micros(now))
		return err
	case store.ActSetPriority:
		_, err := tx.ExecContext(ctx, qSetQueuedPriorityOne, tenant, id, op.Priority)
		return err
	case store.ActDelete:
		if _, err := tx.ExecContext(ctx, qDeleteIdempotencyKeysOfJob, tenant, id); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, qDeleteFinishedJob, tenant, id)
		return err
	case store.ActNone:
	}
	return nil
}

// pendingItems reads the ids of op's next pending items.
func pendingItems(ctx context.Context, tx *writeTx, op *store.Operation, limit int) ([]string, error) {
	rows, err := tx.QueryContext(ctx, qPendingItems, op.Tenant, op.ID, limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}
