package postgres

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// Unique jobs (migration 010).
const (
	// qInsertUniqueJobs is qInsertJobs for a batch with unique jobs ($14
	// their keys, '' for none; $15 whether each has a period): a job whose
	// key a live job holds is not inserted (the partial unique index
	// jobs_unique_live_idx is the arbiter; no advisory lock), nor is a job
	// with a period whose unique_keys record is not its own (the same
	// statement batch took the free ones just before; a scalar subquery,
	// which PostgreSQL runs per row through the primary key, where an
	// EXISTS could be planned as a hashed scan of the whole table). The
	// caller passes
	// the rows sorted by key, so that two batches never wait on each other
	// in a cycle, and reads which were inserted (qInsertedJobs) only when
	// fewer rows than it sent were: a batch of fresh keys reads nothing
	// back.
	qInsertUniqueJobs = `INSERT INTO jobs_live (tenant, id, queue, kind, payload, metadata, priority, state,
		max_attempts, created_at, available_at, retry_deadline, dependency, last_event_seq, concurrency_key, unique_key,
		queued_available_at, events_stored_through)
	SELECT u.tenant, u.id, u.queue, u.kind, u.payload, u.metadata::jsonb, u.priority, 'queued',
		u.max_attempts, u.created_at, u.available_at, u.retry_deadline, u.dependency, 1, u.concurrency_key,
		nullif(u.unique_key, ''), nullif(u.available_at, u.created_at), 0
	FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bytea[], $6::text[], $7::int[], $8::int[],
		$9::timestamptz[], $10::timestamptz[], $11::timestamptz[], $12::text[], $13::text[], $14::text[], $15::bool[])
		AS u(tenant, id, queue, kind, payload, metadata, priority, max_attempts, created_at, available_at,
		     retry_deadline, dependency, concurrency_key, unique_key, periodic)
	WHERE NOT u.periodic
	   OR u.id = (SELECT k.job_id FROM unique_keys k WHERE k.tenant = u.tenant AND k.key = u.unique_key)
	ON CONFLICT (tenant, unique_key) WHERE unique_key IS NOT NULL AND state IN ('queued', 'leased') DO NOTHING`

	// qInsertedJobs reads which of the ids ($1 tenants, $2 ids) exist.
	qInsertedJobs = `SELECT j.id FROM unnest($1::text[], $2::text[]) AS u(tenant, id)
	JOIN jobs j ON j.tenant = u.tenant AND j.id = u.id`

	// qLiveUniqueHolders reads the live jobs that hold keys ($1 tenants,
	// $2 keys), with their latest checkpoints, each with its key.
	qLiveUniqueHolders = `SELECT ` + jobColumnsJ + `,
		c.id, c.job_id, c.phase, c.state, c.generation, c.parent_id, c.created_at, j.unique_key
	FROM unnest($1::text[], $2::text[]) AS r(tenant, key)
	JOIN jobs j ON j.tenant = r.tenant AND j.unique_key = r.key AND j.state IN ('queued', 'leased')
	LEFT JOIN LATERAL (
		SELECT cp.id, cp.job_id, cp.phase, cp.state, cp.generation, cp.parent_id, cp.created_at
		FROM job_checkpoints cp WHERE cp.tenant = j.tenant AND cp.job_id = j.id
		ORDER BY cp.seq DESC LIMIT 1
	) c ON true`

	// qTakeUniqueKeys takes period records ($1 tenants, $2 keys, $3 new
	// job ids, $4 expiries; sorted by the caller) and returns the keys it
	// took: the free ones, those expired at $5 and those already the same
	// job's (an earlier attempt's). A held record stays locked until the
	// transaction ends.
	qTakeUniqueKeys = `INSERT INTO unique_keys AS k (tenant, key, job_id, expires_at)
	SELECT u.tenant, u.key, u.job_id, u.expires
	FROM unnest($1::text[], $2::text[], $3::text[], $4::timestamptz[]) AS u(tenant, key, job_id, expires)
	ON CONFLICT (tenant, key) DO UPDATE SET job_id = excluded.job_id, expires_at = excluded.expires_at
	WHERE k.expires_at <= $5 OR k.job_id = excluded.job_id
	RETURNING k.tenant, k.key`

	// qHeldUniqueKeys reads the jobs of the period records qTakeUniqueKeys
	// did not take, by 1-based position.
	qHeldUniqueKeys = `SELECT r.ord, k.job_id
	FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS r(tenant, key, ord)
	JOIN unique_keys k ON k.tenant = r.tenant AND k.key = r.key`

	// qDropStaleUniqueKey drops a held record whose job retention
	// removed: such a record counts as expired.
	qDropStaleUniqueKey = `DELETE FROM unique_keys WHERE tenant = $1 AND key = $2 AND job_id = $3`

	// qReleaseUniqueKeys drops period records taken for jobs that were
	// not created.
	qReleaseUniqueKeys = `DELETE FROM unique_keys k
	USING unnest($1::text[], $2::text[], $3::text[]) AS u(tenant, key, job_id)
	WHERE k.tenant = u.tenant AND k.key = u.key AND k.job_id = u.job_id`

	// qPruneUniqueKeys deletes up to $2 period records expired at $1.
	qPruneUniqueKeys = `WITH victims AS (
		SELECT tenant, key FROM unique_keys
		WHERE expires_at <= coalesce($1::timestamptz, now())
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	DELETE FROM unique_keys k USING victims v WHERE k.tenant = v.tenant AND k.key = v.key`
)

// insertUnique inserts a batch with unique jobs, in one round trip when
// no key is held: the period records are taken and the jobs inserted in
// one statement batch (insertUniqueJobs). A job whose period record
// another job holds answers that job; one whose key a live job holds
// answers the live job. When the holder finished (or was pruned) between
// the insert and the read of it, the key is free again and the job is
// inserted again (at most store.UniqueInsertAttempts times). A request
// that asked to fail on a duplicate fails its call. Whatever a duplicate
// took (a request id, a period record) is given back: only created jobs
// are recorded.
func (s *Store) insertUnique(ctx context.Context, tx *lazyTx, calls []createCall, inserts []*pendingCreate, dbNow time.Time,
	h *handoff, out []createAnswer) error {
	held := map[*pendingCreate]*store.Job{}
	periodTaken := map[*pendingCreate]bool{}
	todo := inserts
	for attempt := 1; len(todo) > 0; attempt++ {
		inserted, taken, err := s.insertUniqueJobs(ctx, tx, calls, todo, dbNow, h)
		if err != nil {
			return err
		}
		var byPeriod, byLive []*pendingCreate
		for _, pc := range todo {
			if taken[pc] {
				periodTaken[pc] = true
			}
			switch {
			case inserted[pc.job.ID]:
			case pc.uq.Period > 0 && !taken[pc]:
				byPeriod = append(byPeriod, pc)
			default:
				byLive = append(byLive, pc)
			}
		}
		if len(byPeriod)+len(byLive) == 0 {
			break
		}
		if hook := s.opts.UniqueHeld; hook != nil {
			var keys []string
			for _, pc := range append(slices.Clone(byPeriod), byLive...) {
				keys = append(keys, pc.uq.Key)
			}
			hook(keys)
		}
		again, err := s.resolveHolders(ctx, tx, calls, byPeriod, byLive, held)
		if err != nil {
			return err
		}
		if len(again) > 0 && attempt >= store.UniqueInsertAttempts {
			return fmt.Errorf("%w: unique keys were taken and freed again %d times while creating", store.ErrUnavailable, attempt)
		}
		todo = again
	}
	var undoKeys, undoPeriods []*pendingCreate
	for _, pc := range inserts {
		j := held[pc]
		if j == nil {
			continue
		}
		n := len(calls[pc.call].p.Requests)
		res, err := store.DecideUniqueHeld(pc.uq, pc.idx, n, j)
		if err != nil {
			out[pc.call] = createAnswer{err: err}
			continue
		}
		if out[pc.call].err == nil {
			out[pc.call].results[pc.idx] = res
		}
		if pc.key != "" {
			undoKeys = append(undoKeys, pc)
		}
		if periodTaken[pc] {
			undoPeriods = append(undoPeriods, pc)
		}
	}
	if len(undoKeys) > 0 {
		if err := s.releaseKeys(ctx, tx, calls, undoKeys); err != nil {
			return err
		}
	}
	return releasePeriods(ctx, tx, undoPeriods)
}

// resolveHolders reads the jobs that hold the keys of the requests not
// inserted — by their period record (byPeriod) or as the live job
// (byLive) — into held, and returns the requests whose holder is gone
// (finished, or pruned), to insert again.
func (s *Store) resolveHolders(ctx context.Context, tx *lazyTx, calls []createCall, byPeriod, byLive []*pendingCreate,
	held map[*pendingCreate]*store.Job) ([]*pendingCreate, error) {
	var again []*pendingCreate
	if len(byPeriod) > 0 {
		holders, jobIDs, err := periodHolders(ctx, tx, byPeriod)
		if err != nil {
			return nil, err
		}
		for i, pc := range byPeriod {
			if j := holders[i]; j != nil {
				held[pc] = j
				continue
			}
			// Its job was pruned (or the record vanished): the key is free.
			if _, err := tx.Exec(ctx, qDropStaleUniqueKey, pc.job.Tenant, pc.uq.Key, jobIDs[i]); err != nil {
				return nil, err
			}
			again = append(again, pc)
		}
	}
	if len(byLive) > 0 {
		holders, err := liveHolders(ctx, tx, calls, byLive)
		if err != nil {
			return nil, err
		}
		for _, pc := range byLive {
			if j := holders[store.QueueRef{Tenant: pc.job.Tenant, Queue: pc.uq.Key}]; j != nil {
				held[pc] = j
			} else {
				again = append(again, pc) // the holder finished meanwhile
			}
		}
	}
	return again, nil
}

// insertUniqueJobs takes the period records of todo's requests that have
// a period, inserts the jobs with qInsertUniqueJobs, their QUEUED events
// and the notifications, in one round trip; drops the events of the jobs
// it did not insert; and returns the ids it inserted and the requests
// whose period record it took.
func (s *Store) insertUniqueJobs(ctx context.Context, tx *lazyTx, calls []createCall, todo []*pendingCreate, dbNow time.Time,
	h *handoff) (inserted map[string]bool, taken map[*pendingCreate]bool, err error) {
	todo = slices.SortedStableFunc(slices.Values(todo), func(a, b *pendingCreate) int {
		return cmp.Or(cmp.Compare(a.job.Tenant, b.job.Tenant), cmp.Compare(a.uq.Key, b.uq.Key))
	})
	args, err := insertArgs(todo)
	if err != nil {
		return nil, nil, err
	}
	periodic := make([]bool, len(todo))
	var p periodArgs
	for i, pc := range todo {
		if pc.uq.Period > 0 {
			periodic[i] = true
			p.add(pc, cmp.Or(calls[pc.call].p.Now, dbNow))
		}
	}
	b := &pgx.Batch{}
	if len(p.pcs) > 0 {
		b.Queue(qTakeUniqueKeys, p.tenants, p.keys, p.ids, nowArgs(p.expires), normTime(p.minNow))
	}
	b.Queue(qInsertUniqueJobs, append(args, periodic)...)
	wake := s.queueNotifications(b, todo, h)
	br := tx.SendBatch(ctx, b)
	taken, err = p.read(br)
	if err != nil {
		_ = br.Close()
		return nil, nil, err
	}
	tag, err := br.Exec()
	if err != nil {
		_ = br.Close()
		return nil, nil, duplicateIDError(err)
	}
	for range wake {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return nil, nil, err
		}
	}
	if err := br.Close(); err != nil {
		return nil, nil, err
	}
	inserted = make(map[string]bool, len(todo))
	if tag.RowsAffected() == int64(len(todo)) {
		for _, pc := range todo {
			inserted[pc.job.ID] = true
		}
		return inserted, taken, nil
	}
	inserted, err = s.dropUninserted(ctx, tx, todo, inserted)
	return inserted, taken, err
}

// periodArgs are qTakeUniqueKeys' arrays for the requests with a period.
type periodArgs struct {
	pcs                []*pendingCreate
	tenants, keys, ids []string
	expires            []time.Time
	minNow             time.Time
}

func (p *periodArgs) add(pc *pendingCreate, now time.Time) {
	if p.minNow.IsZero() || now.Before(p.minNow) {
		p.minNow = now
	}
	p.pcs = append(p.pcs, pc)
	p.tenants, p.keys, p.ids = append(p.tenants, pc.job.Tenant), append(p.keys, pc.uq.Key), append(p.ids, pc.job.ID)
	p.expires = append(p.expires, now.Add(pc.uq.Period))
}

// read reads qTakeUniqueKeys' answer off br (nothing when there were no
// period records to take): the requests whose record was taken.
func (p *periodArgs) read(br pgx.BatchResults) (map[*pendingCreate]bool, error) {
	taken := map[*pendingCreate]bool{}
	if len(p.pcs) == 0 {
		return taken, nil
	}
	byKey := make(map[store.QueueRef]*pendingCreate, len(p.pcs))
	for _, pc := range p.pcs {
		byKey[store.QueueRef{Tenant: pc.job.Tenant, Queue: pc.uq.Key}] = pc
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var tenant, key string
		if err := rows.Scan(&tenant, &key); err != nil {
			return nil, err
		}
		taken[byKey[store.QueueRef{Tenant: tenant, Queue: key}]] = true
	}
	return taken, rows.Err()
}

// dropUninserted reads which jobs of todo were inserted (into inserted)
// (a job's QUEUED event is its row's: the others left nothing behind).
func (s *Store) dropUninserted(ctx context.Context, tx *lazyTx, todo []*pendingCreate, inserted map[string]bool) (map[string]bool, error) {
	tenants, ids := make([]string, len(todo)), make([]string, len(todo))
	for i, pc := range todo {
		tenants[i], ids[i] = pc.job.Tenant, pc.job.ID
	}
	rows, err := tx.Query(ctx, qInsertedJobs, tenants, ids)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			rows.Close()
			return nil, err
		}
		inserted[id] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return inserted, nil
}

// liveHolders reads the live jobs holding the keys of pcs, keyed by
// (tenant, key) as a QueueRef's two strings.
func liveHolders(ctx context.Context, tx *lazyTx, calls []createCall, pcs []*pendingCreate) (map[store.QueueRef]*store.Job, error) {
	tenants, keys := make([]string, len(pcs)), make([]string, len(pcs))
	for i, pc := range pcs {
		tenants[i], keys[i] = calls[pc.call].p.Tenant, pc.uq.Key
	}
	rows, err := tx.Query(ctx, qLiveUniqueHolders, tenants, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[store.QueueRef]*store.Job, len(pcs))
	for rows.Next() {
		var (
			cp  checkpointCols
			key string
		)
		rec, err := scanJob(rows, append(cp.dest(), &key)...)
		if err != nil {
			return nil, err
		}
		rec.job.Checkpoint = cp.checkpoint()
		out[store.QueueRef{Tenant: rec.job.Tenant, Queue: key}] = rec.job
	}
	return out, rows.Err()
}

// periodHolders reads the jobs of the period records that hold pcs' keys,
// by position (nil where the record's job is gone), and the records' job
// ids.
func periodHolders(ctx context.Context, tx *lazyTx, pcs []*pendingCreate) ([]*store.Job, []string, error) {
	n := len(pcs)
	tenants, keys := make([]string, n), make([]string, n)
	for i, pc := range pcs {
		tenants[i], keys[i] = pc.job.Tenant, pc.uq.Key
	}
	rows, err := tx.Query(ctx, qHeldUniqueKeys, tenants, keys)
	if err != nil {
		return nil, nil, err
	}
	jobIDs := make([]string, n)
	for rows.Next() {
		var (
			ord   int64
			jobID string
		)
		if err := rows.Scan(&ord, &jobID); err != nil {
			rows.Close()
			return nil, nil, err
		}
		jobIDs[ord-1] = jobID
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	jobs, err := jobsByID(ctx, tx, tenants, jobIDs)
	if err != nil {
		return nil, nil, err
	}
	out := make([]*store.Job, n)
	for i := range pcs {
		out[i] = jobs[store.QueueRef{Tenant: tenants[i], Queue: jobIDs[i]}]
	}
	return out, jobIDs, nil
}

// releasePeriods drops the period records taken for jobs that were not
// created.
func releasePeriods(ctx context.Context, tx *lazyTx, pcs []*pendingCreate) error {
	if len(pcs) == 0 {
		return nil
	}
	n := len(pcs)
	tenants, keys, ids := make([]string, n), make([]string, n), make([]string, n)
	for i, pc := range pcs {
		tenants[i], keys[i], ids[i] = pc.job.Tenant, pc.uq.Key, pc.job.ID
	}
	_, err := tx.Exec(ctx, qReleaseUniqueKeys, tenants, keys, ids)
	return err
}
