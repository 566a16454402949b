package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// Bulk operations (store/operation.go has the model).
const (
	operationColumns = `tenant, id, kind, state, filter, reason, priority, actor, actor_name, queue_scope,
	created_at, updated_at, finished_at, matched, acted, skipped_changed, skipped_out_of_scope, failed,
	error, cancel_requested, lease_owner, lease_expires_at`

	// qLockTenantOperations serialises the starts of one tenant's
	// operations, so that two starts cannot both pass the running limit.
	qLockTenantOperations = `SELECT pg_advisory_xact_lock(hashtextextended('leasehold.operations:' || $1, 0))`

	qCountRunningOperations = `SELECT count(*) FROM operations WHERE tenant = $1 AND state = 'running'`

	qInsertOperation = `INSERT INTO operations (tenant, id, kind, state, filter, reason, priority, actor,
		actor_name, queue_scope, created_at)
	VALUES ($1, $2, $3, 'running', $4, $5, $6, $7, $8, $9, $10)`

	// qSetOperationMatched records the match; an empty one finishes the
	// operation at once.
	qSetOperationMatched = `UPDATE operations SET matched = $3::bigint,
		state = CASE WHEN $3::bigint = 0 THEN 'succeeded' ELSE state END,
		finished_at = CASE WHEN $3::bigint = 0 THEN $4::timestamptz END
	WHERE tenant = $1 AND id = $2 RETURNING ` + operationColumns

	qGetOperation  = `SELECT ` + operationColumns + ` FROM operations WHERE tenant = $1 AND id = $2`
	qLockOperation = qGetOperation + ` FOR UPDATE`

	qListOperations = `SELECT ` + operationColumns + ` FROM operations
	WHERE tenant = $1 AND ($2 = '' OR state = $2)
	  AND ($3::timestamptz IS NULL OR (created_at, id) < ($3::timestamptz, $4::text))
	ORDER BY created_at DESC, id DESC
	LIMIT $5`

	qRequestCancelOperation = `UPDATE operations SET cancel_requested = true
	WHERE tenant = $1 AND id = $2 AND state = 'running' RETURNING ` + operationColumns

	// qClaimOperation leases the oldest running operation that nobody
	// holds (or whose holder's lease expired, or that $1 holds already).
	qClaimOperation = `UPDATE operations o
	SET lease_owner = $1, lease_expires_at = coalesce($3::timestamptz, now()) + $2::bigint * interval '1 microsecond'
	FROM (
		SELECT tenant, id FROM operations
		WHERE state = 'running'
		  AND (lease_expires_at IS NULL OR lease_expires_at <= coalesce($3::timestamptz, now()) OR lease_owner = $1)
		ORDER BY created_at
		LIMIT 1
		FOR UPDATE SKIP LOCKED
	) c
	WHERE o.tenant = c.tenant AND o.id = c.id
	RETURNING ` + qualifiedOperationColumns

	qualifiedOperationColumns = `o.tenant, o.id, o.kind, o.state, o.filter, o.reason, o.priority, o.actor,
	o.actor_name, o.queue_scope, o.created_at, o.updated_at, o.finished_at, o.matched, o.acted,
	o.skipped_changed, o.skipped_out_of_scope, o.failed, o.error, o.cancel_requested, o.lease_owner,
	o.lease_expires_at`

	qPendingItems = `SELECT job_id FROM operation_items
	WHERE tenant = $1 AND operation_id = $2 AND result = 0
	ORDER BY job_id LIMIT $3`

	// qMarkItems records each item's result ($3 ids, $4 results).
	qMarkItems = `UPDATE operation_items i SET result = v.r
	FROM unnest($3::text[], $4::smallint[]) AS v(id, r)
	WHERE i.tenant = $1 AND i.operation_id = $2 AND i.job_id = v.id`

	// qAdvanceOperation adds a chunk's counts, extends the lease and,
	// when $10 is set, finishes the operation in that state.
	qAdvanceOperation = `UPDATE operations SET
		acted = acted + $3, skipped_changed = skipped_changed + $4,
		skipped_out_of_scope = skipped_out_of_scope + $5, failed = failed + $6,
		updated_at = $7::timestamptz, lease_expires_at = $7::timestamptz + $8::bigint * interval '1 microsecond',
		state = coalesce($9::text, state), finished_at = CASE WHEN $9::text IS NULL THEN NULL ELSE $7::timestamptz END,
		error = $10
	WHERE tenant = $1 AND id = $2 RETURNING ` + operationColumns

	qFailOperation = `UPDATE operations SET state = 'failed', finished_at = coalesce($4::timestamptz, now()),
		updated_at = coalesce($4::timestamptz, now()), error = $3
	WHERE tenant = $1 AND id = $2 AND state = 'running' AND lease_owner = $5
	RETURNING ` + operationColumns

	qPruneOperations = `DELETE FROM operations o USING (
		SELECT tenant, id FROM operations WHERE finished_at < $1 ORDER BY finished_at LIMIT $2
		FOR UPDATE SKIP LOCKED
	) v WHERE o.tenant = v.tenant AND o.id = v.id`

	// Per-row actions of a chunk: the set forms of the single-job calls'
	// statements (qCancelQueued, qRequestCancelLeased, qInsertJob of a
	// replay, qMarkReplayed, qMarkAbandoned), with the same conditions.
	qCancelQueuedMany = `UPDATE jobs
	SET state = 'cancelled', finished_at = $3, cancel_requested = true, cancel_reason = $4,
	    last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = ANY($2::text[]) AND state = 'queued'`

	qRequestCancelLeasedMany = `UPDATE jobs SET cancel_requested = true, cancel_reason = $3, last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = ANY($2::text[]) AND state = 'leased' AND NOT cancel_requested`

	// qReplayMany inserts the replays ($2 new ids) of the dead jobs $3,
	// each with its retry deadline ($4, NULL for none), as ReplayDeadJob
	// does one.
	qReplayMany = `INSERT INTO jobs (tenant, id, queue, kind, payload, metadata, priority, state,
		max_attempts, created_at, available_at, retry_deadline, replay_of, dependency, last_event_seq, concurrency_key)
	SELECT d.tenant, v.new_id, d.queue, d.kind, d.payload, d.metadata, d.priority, 'queued',
		d.max_attempts, $5, $5, v.deadline, d.id, d.dependency, 1, d.concurrency_key
	FROM unnest($2::text[], $3::text[], $4::timestamptz[]) AS v(new_id, dead_id, deadline)
	JOIN jobs d ON d.tenant = $1 AND d.id = v.dead_id
	WHERE d.state = 'dead' AND d.replayed_as = '' AND NOT d.abandoned`

	qMarkReplayedMany = `UPDATE jobs d SET replayed_as = v.new_id, last_event_seq = d.last_event_seq + 1
	FROM unnest($2::text[], $3::text[]) AS v(dead_id, new_id)
	WHERE d.tenant = $1 AND d.id = v.dead_id AND d.state = 'dead' AND d.replayed_as = '' AND NOT d.abandoned`

	qMarkAbandonedMany = `UPDATE jobs SET abandoned = true, last_event_seq = last_event_seq + 1
	WHERE tenant = $1 AND id = ANY($2::text[]) AND state = 'dead' AND replayed_as = '' AND NOT abandoned`

	// qInsertEventsMany appends one event per element of the arrays.
	qInsertEventsMany = `INSERT INTO job_events (tenant, job_id, seq, type, at, data)
	SELECT $1, v.job_id, v.seq, v.type, $5, v.data::jsonb
	FROM unnest($2::text[], $3::bigint[], $4::text[], $6::text[]) AS v(job_id, seq, type, data)`

	qMakeAvailable = `UPDATE jobs SET available_at = $3
	WHERE tenant = $1 AND id = ANY($2::text[]) AND state = 'queued' AND available_at > $3`

	qSetQueuedPriority = `UPDATE jobs SET priority = $3
	WHERE tenant = $1 AND id = ANY($2::text[]) AND state = 'queued'`

	// qDeleteFinishedJobs is qPruneJobs for named jobs of one tenant.
	qDeleteFinishedJobs = `WITH victims AS (
		SELECT tenant, id FROM jobs
		WHERE tenant = $1 AND id = ANY($2::text[])
		  AND state IN ('succeeded', 'failed', 'cancelled', 'dead')
	), keys AS (
		DELETE FROM idempotency_keys k USING victims v
		WHERE k.tenant = v.tenant AND k.job_id = v.id
	), events AS (
		DELETE FROM job_events e USING victims v WHERE e.tenant = v.tenant AND e.job_id = v.id
	), attempts AS (
		DELETE FROM job_attempts a USING victims v WHERE a.tenant = v.tenant AND a.job_id = v.id
	), checkpoints AS (
		DELETE FROM job_checkpoints c USING victims v WHERE c.tenant = v.tenant AND c.job_id = v.id
	), effects AS (
		DELETE FROM job_effects f USING victims v WHERE f.tenant = v.tenant AND f.job_id = v.id
	)
	DELETE FROM jobs j USING victims v WHERE j.tenant = v.tenant AND j.id = v.id`
)

func scanOperation(row pgx.Row) (*store.Operation, error) {
	var (
		o                           store.Operation
		kind, state, scope          string
		updated, finished, leaseExp *time.Time
	)
	err := row.Scan(&o.Tenant, &o.ID, &kind, &state, &o.Filter, &o.Reason, &o.Priority, &o.Actor, &o.ActorName, &scope,
		&o.CreatedAt, &updated, &finished, &o.Counts.Matched, &o.Counts.Acted, &o.Counts.SkippedChanged,
		&o.Counts.SkippedOutOfScope, &o.Counts.Failed, &o.Error, &o.CancelRequested, &o.LeaseOwner, &leaseExp)
	if err != nil {
		return nil, err
	}
	o.Kind, o.State = store.OperationKind(kind), store.OperationState(state)
	if o.QueueScope, err = store.DecodeQueueScope(scope); err != nil {
		return nil, err
	}
	o.CreatedAt = o.CreatedAt.UTC()
	for _, p := range []struct {
		src *time.Time
		dst *time.Time
	}{{updated, &o.UpdatedAt}, {finished, &o.FinishedAt}, {leaseExp, &o.LeaseExpiresAt}} {
		if p.src != nil {
			*p.dst = p.src.UTC()
		}
	}
	return &o, nil
}

func operationRef(tenant, id string) error {
	if err := store.ValidateTenant(tenant); err != nil {
		return err
	}
	return store.ValidateText("operation", id, store.NameMaxLen, true)
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
	id := p.ID
	if id == "" {
		if id, err = s.newID(); err != nil {
			return nil, err
		}
	}
	limit := cmp.Or(p.Limit, store.OperationsRunningDefault)
	var out *store.Operation
	err = s.withTx(ctx, "start_operation", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, qLockTenantOperations, p.Tenant); err != nil {
			return err
		}
		var running int
		if err := tx.QueryRow(ctx, qCountRunningOperations, p.Tenant).Scan(&running); err != nil {
			return err
		}
		if running >= limit {
			return fmt.Errorf("tenant runs %d operations (at most %d at once): %w", running, limit, store.ErrOperationLimit)
		}
		if _, err := tx.Exec(ctx, qInsertOperation, p.Tenant, id, string(p.Kind), p.FilterText, p.Reason, p.Priority,
			p.Actor, p.ActorName, store.EncodeQueueScope(p.QueueScope), now); err != nil {
			return err
		}
		// The match: every job of the tenant the filter selects now, in
		// one statement (one snapshot). Jobs created later are not in it.
		cond, args := filterSQL(f, []any{p.Tenant, id})
		tag, err := tx.Exec(ctx, `INSERT INTO operation_items (tenant, operation_id, job_id)
			SELECT j.tenant, $2, j.id FROM jobs j WHERE j.tenant = $1 AND `+cond, args...)
		if err != nil {
			return err
		}
		out, err = scanOperation(tx.QueryRow(ctx, qSetOperationMatched, p.Tenant, id, tag.RowsAffected(), now))
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// GetOperation implements store.Store.
func (s *Store) GetOperation(ctx context.Context, tenant, id string) (*store.Operation, error) {
	if err := operationRef(tenant, id); err != nil {
		return nil, err
	}
	op, err := scanOperation(s.pool.QueryRow(ctx, qGetOperation, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("operation %s: %w", id, store.ErrOperationNotFound)
	}
	if err != nil {
		return nil, s.readError(ctx, "get_operation", err)
	}
	return op, nil
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
	var afterTime, afterID any
	if p.Cursor != "" {
		c, err := decodeCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		afterTime, afterID = c.at, c.id
	}
	rows, err := s.pool.Query(ctx, qListOperations, p.Tenant, string(p.State), afterTime, afterID, limit+1)
	if err != nil {
		return nil, s.readError(ctx, "list_operations", err)
	}
	ops, err := collect(rows, scanOperation)
	if err != nil {
		return nil, s.readError(ctx, "list_operations", err)
	}
	page := &store.OperationPage{Operations: ops}
	if len(ops) > limit {
		page.Operations = ops[:limit]
		last := page.Operations[limit-1]
		page.NextCursor = encodeCursor(cursor{at: last.CreatedAt, id: last.ID})
	}
	return page, nil
}

// CancelOperation implements store.Store.
func (s *Store) CancelOperation(ctx context.Context, tenant, id string, now time.Time) (*store.Operation, error) {
	if err := operationRef(tenant, id); err != nil {
		return nil, err
	}
	var out *store.Operation
	err := s.withTx(ctx, "cancel_operation", func(tx pgx.Tx) error {
		op, err := scanOperation(tx.QueryRow(ctx, qRequestCancelOperation, tenant, id))
		if errors.Is(err, pgx.ErrNoRows) {
			op, err = scanOperation(tx.QueryRow(ctx, qGetOperation, tenant, id))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("operation %s: %w", id, store.ErrOperationNotFound)
			}
		}
		out = op
		return err
	})
	return out, err
}

// ClaimOperation implements store.Store.
func (s *Store) ClaimOperation(ctx context.Context, p store.ClaimOperationParams) (*store.Operation, error) {
	if p.Owner == "" || p.LeaseTTL <= 0 {
		return nil, store.Invalid("owner", "an owner and a positive lease are required")
	}
	var out *store.Operation
	err := s.withTx(ctx, "claim_operation", func(tx pgx.Tx) error {
		op, err := scanOperation(tx.QueryRow(ctx, qClaimOperation, p.Owner, p.LeaseTTL.Microseconds(), nowArg(p.Now)))
		if errors.Is(err, pgx.ErrNoRows) {
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
	err := s.withTx(ctx, "fail_operation", func(tx pgx.Tx) error {
		op, err := scanOperation(tx.QueryRow(ctx, qFailOperation, p.Tenant, p.ID, p.Error, nowArg(p.Now), p.Owner))
		if errors.Is(err, pgx.ErrNoRows) {
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
	err := s.withTx(ctx, "prune_operations", func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, qPruneOperations, normTime(before), cmp.Or(limit, store.PruneBatchSizeDefault))
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// RunOperationChunk implements store.Store: one transaction that locks
// the operation (fenced on its lease), locks the next pending items'
// jobs, decides each (store.DecideOperationRow), applies the actions with
// the single-job calls' statements sent as one batch, and records the
// results and counts.
func (s *Store) RunOperationChunk(ctx context.Context, p store.RunChunkParams) (store.ChunkResult, error) {
	if err := operationRef(p.Tenant, p.ID); err != nil {
		return store.ChunkResult{}, err
	}
	limit := store.ChunkLimit(p.Limit)
	var res store.ChunkResult
	err := s.withTx(ctx, "operation_chunk", func(tx pgx.Tx) error {
		res = store.ChunkResult{}
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		op, err := scanOperation(tx.QueryRow(ctx, qLockOperation, p.Tenant, p.ID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("operation %s: %w", p.ID, store.ErrOperationNotFound)
		}
		if err != nil {
			return err
		}
		if op.State != store.OperationRunning || op.LeaseOwner != p.Owner {
			return fmt.Errorf("operation %s (%s, held by %q): %w", p.ID, op.State, op.LeaseOwner, store.ErrOperationLeaseLost)
		}
		var rows []store.OperationRow
		if !op.CancelRequested {
			if rows, err = lockOperationRows(ctx, tx, op, limit); err != nil {
				return err
			}
		}
		ids, results := make([]string, len(rows)), make([]int16, len(rows))
		plan := chunkPlan{op: op, now: now}
		for i, r := range rows {
			d := store.DecideOperationRow(op, r, now)
			ids[i], results[i] = r.JobID, int16(d.Result)
			res.Rows.Add(d.Result, 1)
			if d.Result == store.RowActed {
				plan.add(d.Action, r)
			}
		}
		// Every write of the chunk goes in one batch (one round trip), so
		// the transaction holds its locks and its WAL for as short as can be.
		b := &pgx.Batch{}
		if err := s.applyChunk(ctx, tx, &plan, b); err != nil {
			return err
		}
		if len(ids) > 0 {
			b.Queue(qMarkItems, p.Tenant, p.ID, ids, results)
		}
		state, finished := store.FinishState(op, len(rows) == limit)
		var stateArg any
		if finished {
			stateArg = string(state)
		}
		b.Queue(qAdvanceOperation, p.Tenant, p.ID, res.Rows.Acted, res.Rows.SkippedChanged,
			res.Rows.SkippedOutOfScope, res.Rows.Failed, now, p.LeaseTTL.Microseconds(), stateArg, op.Error).
			QueryRow(func(row pgx.Row) error {
				op, err = scanOperation(row)
				return err
			})
		for q := range plan.wake {
			b.Queue(qNotify, s.channel, encodeNotification(p.Tenant, q))
			res.Queues = append(res.Queues, store.QueueRef{Tenant: p.Tenant, Queue: q})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		res.Operation, res.Handled, res.Finished = op, len(rows), finished
		return nil
	})
	if err != nil {
		return store.ChunkResult{}, err
	}
	return res, nil
}

// lockOperationRows reads the next pending items of op with their jobs,
// locked, and whether each job still matches the operation's filter.
func lockOperationRows(ctx context.Context, tx pgx.Tx, op *store.Operation, limit int) ([]store.OperationRow, error) {
	f, err := store.ParseJobFilter(op.Filter)
	if err != nil {
		return nil, fmt.Errorf("operation %s: its filter no longer parses: %w", op.ID, err)
	}
	if f, err = store.OperationFilter(op.Kind, f); err != nil {
		return nil, err
	}
	irows, err := tx.Query(ctx, qPendingItems, op.Tenant, op.ID, limit)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(irows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	cond, args := filterSQL(f, []any{op.Tenant, ids})
	jrows, err := tx.Query(ctx, `SELECT `+jobColumnsJ+`, `+cond+` FROM jobs j
		WHERE j.tenant = $1 AND j.id = ANY($2::text[]) ORDER BY j.id FOR UPDATE`, args...)
	if err != nil {
		return nil, err
	}
	found := make(map[string]store.OperationRow, len(ids))
	for jrows.Next() {
		var matches bool
		rec, err := scanJob(jrows, &matches)
		if err != nil {
			jrows.Close()
			return nil, err
		}
		found[rec.job.ID] = store.OperationRow{JobID: rec.job.ID, Job: rec.job, Matches: matches,
			ReplayedAs: rec.replayedAs, Abandoned: rec.abandoned, LastEventSeq: rec.lastEventSeq}
	}
	jrows.Close()
	if err := jrows.Err(); err != nil {
		return nil, err
	}
	out := make([]store.OperationRow, len(ids))
	for i, id := range ids {
		r, ok := found[id]
		if !ok {
			r = store.OperationRow{JobID: id} // gone since the match
		}
		out[i] = r
	}
	return out, nil
}

// chunkPlan gathers a chunk's actions by kind.
type chunkPlan struct {
	op  *store.Operation
	now time.Time
	// per action, the rows it applies to
	cancelQueued, requestCancel, replay, abandon []store.OperationRow
	makeAvailable, deletes, setPriority          []string
	wake                                         map[string]bool
}

func (p *chunkPlan) add(a store.RowAction, r store.OperationRow) {
	j := r.Job
	switch a {
	case store.ActCancelQueued:
		p.cancelQueued = append(p.cancelQueued, r)
	case store.ActRequestCancel:
		p.requestCancel = append(p.requestCancel, r)
	case store.ActReplay:
		p.replay = append(p.replay, r)
	case store.ActAbandon:
		p.abandon = append(p.abandon, r)
	case store.ActMakeAvailable:
		p.makeAvailable = append(p.makeAvailable, j.ID)
		p.woke(j.Queue)
	case store.ActDelete:
		p.deletes = append(p.deletes, j.ID)
	case store.ActSetPriority:
		p.setPriority = append(p.setPriority, j.ID)
	case store.ActNone:
	}
}

func (p *chunkPlan) woke(queue string) {
	if p.wake == nil {
		p.wake = map[string]bool{}
	}
	p.wake[queue] = true
}

// opData is the event data of a job acted on by op.
func opData(op *store.Operation, data map[string]any) map[string]any {
	data["operation"] = op.ID
	return withActor(data, op.Actor)
}

// applyChunk queues the plan's statements on b, set-based: one statement
// per action over the chunk's rows (each the single-job call's statement,
// on arrays) and one insert of every event. Every job is locked by the
// chunk, so each event's sequence is the row's last_event_seq plus one, as
// the single-job calls' appends make it.
func (s *Store) applyChunk(ctx context.Context, tx pgx.Tx, p *chunkPlan, b *pgx.Batch) error {
	op, now, tenant := p.op, p.now, p.op.Tenant
	var ev events
	if ids := rowIDs(p.cancelQueued); len(ids) > 0 {
		b.Queue(qCancelQueuedMany, tenant, ids, now, op.Reason)
		data := event{data: opData(op, map[string]any{"reason": op.Reason, "by": "client"})}.json()
		for _, r := range p.cancelQueued {
			ev.add(r.JobID, r.LastEventSeq+1, store.EventCancelled, data)
		}
	}
	if ids := rowIDs(p.requestCancel); len(ids) > 0 {
		b.Queue(qRequestCancelLeasedMany, tenant, ids, op.Reason)
		for _, r := range p.requestCancel {
			ev.add(r.JobID, r.LastEventSeq+1, store.EventCancelRequested, event{data: opData(op, map[string]any{
				"reason": op.Reason, "worker_id": r.Job.LeaseOwner, "lease_generation": r.Job.LeaseGeneration,
			})}.json())
		}
	}
	if len(p.replay) > 0 {
		policies := map[string]*store.QueuePolicy{}
		newIDs, deadIDs := make([]string, len(p.replay)), make([]string, len(p.replay))
		deadlines := make([]*time.Time, len(p.replay))
		for i, r := range p.replay {
			dead := r.Job
			pol, ok := policies[dead.Queue]
			if !ok {
				var err error
				if pol, err = getPolicy(ctx, tx, tenant, dead.Queue); err != nil {
					return err
				}
				policies[dead.Queue] = pol
			}
			if pol.Retry.TotalRetryDeadline > 0 {
				d := now.Add(pol.Retry.TotalRetryDeadline)
				deadlines[i] = &d
			}
			id, err := s.newID()
			if err != nil {
				return err
			}
			newIDs[i], deadIDs[i] = id, dead.ID
			key := store.OperationReplayKey(op.ID, dead.ID)
			ev.add(id, 1, store.EventQueued, event{data: opData(op, map[string]any{"queue": dead.Queue, "available_at": now,
				"replay_of": dead.ID, "reason": op.Reason, "replay_key": key})}.json())
			ev.add(dead.ID, r.LastEventSeq+1, store.EventReplayed, event{data: opData(op, map[string]any{
				"replayed_as": id, "reason": op.Reason, "replay_key": key})}.json())
			p.woke(dead.Queue)
		}
		b.Queue(qReplayMany, tenant, newIDs, deadIDs, deadlines, now)
		b.Queue(qMarkReplayedMany, tenant, deadIDs, newIDs)
	}
	if ids := rowIDs(p.abandon); len(ids) > 0 {
		b.Queue(qMarkAbandonedMany, tenant, ids)
		data := event{data: opData(op, map[string]any{"reason": op.Reason})}.json()
		for _, r := range p.abandon {
			ev.add(r.JobID, r.LastEventSeq+1, store.EventAbandoned, data)
		}
	}
	if len(p.makeAvailable) > 0 {
		b.Queue(qMakeAvailable, tenant, p.makeAvailable, now)
	}
	if len(p.deletes) > 0 {
		b.Queue(qDeleteFinishedJobs, tenant, p.deletes)
	}
	if len(p.setPriority) > 0 {
		b.Queue(qSetQueuedPriority, tenant, p.setPriority, op.Priority)
	}
	if len(ev.jobs) > 0 {
		b.Queue(qInsertEventsMany, tenant, ev.jobs, ev.seqs, ev.types, now, ev.data)
	}
	return nil
}

func rowIDs(rows []store.OperationRow) []string {
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.JobID
	}
	return ids
}

// events gathers a chunk's events as the parallel arrays of
// qInsertEventsMany.
type events struct {
	jobs, types, data []string
	seqs              []int64
}

func (e *events) add(jobID string, seq int64, typ store.EventType, data string) {
	e.jobs, e.seqs, e.types, e.data = append(e.jobs, jobID), append(e.seqs, seq), append(e.types, string(typ)), append(e.data, data)
}
