package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/internal/groupcommit"
	"github.com/leasehold/leasehold/store"
)

// jobsPrimaryKey is the constraint a duplicate job id violates.
const jobsPrimaryKey = "jobs_pkey"

// createCall is one CreateJobs call waiting in the create committer, and
// createAnswer its answer: the results, or the call's own refusal (an
// idempotency conflict) that leaves the other calls of the batch alone.
type (
	createCall struct {
		p       store.CreateJobsParams
		window  time.Duration
		handoff []store.ClaimManyParams
	}
	createAnswer struct {
		results []store.CreateResult
		err     error
		leased  []*jobRecord // by the call's handoff claims
	}
)

// CreateJobs implements store.Store. The call joins the store's create
// committer: concurrent calls share one transaction and one commit
// (createBatch), each still all-or-nothing for its own requests. Each new
// job, its QUEUED event and its idempotency record commit together.
//
// Idempotency: a request with a RequestID takes its key (a set-based
// INSERT … ON CONFLICT DO UPDATE … WHERE expired). If a live record holds
// the key, the request replays that record's job when the fingerprints
// match, and fails its call with ErrIdempotencyConflict when they differ.
// Two requests with the same key in one batch behave the same way, the
// second replaying the first.
func (s *Store) CreateJobs(ctx context.Context, p store.CreateJobsParams) ([]store.CreateResult, error) {
	res, _, err := s.create(ctx, p, nil)
	return res, err
}

// CreateJobsHandoff implements store.HandoffCreator: the claims run in the
// create committer's transaction after every call's inserts (handoff).
func (s *Store) CreateJobsHandoff(ctx context.Context, p store.CreateJobsParams, claims []store.ClaimManyParams) ([]store.CreateResult, []store.ClaimedJob, error) {
	if err := store.ValidateHandoff(p.Tenant, claims); err != nil {
		return nil, nil, err
	}
	return s.create(ctx, p, claims)
}

func (s *Store) create(ctx context.Context, p store.CreateJobsParams, claims []store.ClaimManyParams) ([]store.CreateResult, []store.ClaimedJob, error) {
	if err := store.ValidateCreate(p); err != nil {
		return nil, nil, err
	}
	call := createCall{p: p, window: cmp.Or(p.IdempotencyWindow, store.IdempotencyWindowDefault), handoff: claims}
	var (
		res []createAnswer
		err error
	)
	if hasUnique(p) {
		res, err = s.createAlone(ctx, call)
	} else {
		res, err = s.creates.Do(ctx, call)
	}
	if errors.Is(err, groupcommit.ErrClosed) {
		return nil, nil, fmt.Errorf("%w: the store is closed", store.ErrUnavailable)
	}
	if err != nil {
		return nil, nil, err
	}
	a := res[0]
	if a.err != nil || len(a.leased) == 0 {
		return a.results, nil, a.err
	}
	leased, err := s.claimedJobs(ctx, p.Tenant, a.leased)
	if err != nil {
		// The creates and the leases committed; without the later
		// attempts' checkpoints the leases cannot be handed out, so they
		// are left to expire (as ClaimMany does).
		s.logger.WarnContext(ctx, "handoff leases could not be read; they will expire", slog.Any("error", err))
		return a.results, nil, nil
	}
	return a.results, leased, nil
}

// createBatch is the create committer's flush: every call in one
// transaction, sent in one round trip when no request has a request id or
// a unique key (createPipelined).
func (s *Store) createBatch(ctx context.Context, calls []createCall) ([]createAnswer, error) {
	if pipelinable(calls) {
		out, handoffFailed, err := s.createPipelined(ctx, calls)
		if !handoffFailed {
			return out, err
		}
		s.logger.DebugContext(ctx, "handoff claim failed in the pipelined create; creating again with a savepoint", slog.Any("error", err))
	}
	var out []createAnswer
	err := s.withLazyTx(ctx, "create", func(tx *lazyTx) error {
		var err error
		out, err = s.createCalls(ctx, tx, calls, nil)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// errCallRefused rolls back the transaction of a call created alone
// whose answer is a refusal.
var errCallRefused = errors.New("the call was refused")

// hasUnique reports whether any request of p is unique.
func hasUnique(p store.CreateJobsParams) bool {
	for _, r := range p.Requests {
		if r.Unique != nil {
			return true
		}
	}
	return false
}

// createAlone creates a call with unique requests in a transaction of its
// own, outside the create committer: whether such a call is refused
// (ErrUniqueConflict) is known only once its jobs are inserted, and a
// refused call must leave nothing, so its transaction rolls back.
func (s *Store) createAlone(ctx context.Context, c createCall) ([]createAnswer, error) {
	// The policies are read before the transaction takes its connection:
	// many such calls at once must not hold every connection of the pool
	// while each waits for another one to read policies.
	calls := []createCall{c}
	policies, err := s.callPolicies(ctx, calls)
	if err != nil {
		return nil, err
	}
	var (
		out     []createAnswer
		refused bool
	)
	err = s.withLazyTx(ctx, "create", func(tx *lazyTx) error {
		var err error
		out, err = s.createCalls(ctx, tx, calls, policies)
		refused = err == nil && out[0].err != nil
		if refused {
			return errCallRefused
		}
		return err
	})
	if refused {
		return []createAnswer{{err: out[0].err}}, nil
	}
	if err != nil {
		return nil, err
	}
	return out, nil
}

// pendingCreate is one request's place in a batch.
type pendingCreate struct {
	call, idx int
	key       string // request id, "" when none
	fp        string
	uq        store.UniqueRequest
	job       *store.Job
	event     store.NewEvent
}

// callPolicies reads the policies of the calls' queues (through the
// policy cache, which may use another connection of the pool).
func (s *Store) callPolicies(ctx context.Context, calls []createCall) (map[store.QueueRef]store.QueuePolicy, error) {
	var refs []store.QueueRef
	for _, c := range calls {
		for _, r := range c.p.Requests {
			refs = append(refs, store.QueueRef{Tenant: c.p.Tenant, Queue: r.Spec.Queue})
		}
	}
	return s.policies.Get(ctx, slices.Compact(slices.SortedFunc(slices.Values(refs), func(a, b store.QueueRef) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Queue, b.Queue))
	})))
}

// createCalls creates the calls in the open transaction; policies are
// their queues' (callPolicies), nil to read them here.
func (s *Store) createCalls(ctx context.Context, tx *lazyTx, calls []createCall, policies map[store.QueueRef]store.QueuePolicy) ([]createAnswer, error) {
	var dbNow time.Time
	if err := tx.QueryRow(ctx, qNow).Scan(&dbNow); err != nil {
		return nil, err
	}
	if policies == nil {
		var err error
		if policies, err = s.callPolicies(ctx, calls); err != nil {
			return nil, err
		}
	}
	out := make([]createAnswer, len(calls))
	h := newHandoff(calls, policies)
	// Calls whose request ids another call of the batch also uses go in a
	// later pass of the same transaction, so that they find the earlier
	// call's record like any committed one.
	pending := make([]int, len(calls))
	for i := range pending {
		pending[i] = i
	}
	for len(pending) > 0 {
		var this, later []int
		seen := map[store.QueueRef]bool{} // (tenant, request id)
		for _, i := range pending {
			c := calls[i]
			clash := false
			for _, r := range c.p.Requests {
				if r.RequestID != "" && seen[store.QueueRef{Tenant: c.p.Tenant, Queue: r.RequestID}] {
					clash = true
				}
			}
			if clash {
				later = append(later, i)
				continue
			}
			for _, r := range c.p.Requests {
				if r.RequestID != "" {
					seen[store.QueueRef{Tenant: c.p.Tenant, Queue: r.RequestID}] = true
				}
			}
			this = append(this, i)
		}
		if err := s.createPass(ctx, tx, calls, this, dbNow, policies, h, out); err != nil {
			return nil, err
		}
		pending = later
	}
	if err := s.runHandoff(ctx, tx, policies, h, out); err != nil {
		return nil, err
	}
	return out, nil
}

// pendingCreates decides the jobs of the calls idx: the requests that
// create (all), those that repeat an earlier request id of their call
// (replayOf) and those that repeat an earlier unique key (dupOf). A call
// refused already gets its answer in out.
func (s *Store) pendingCreates(calls []createCall, idx []int, dbNow time.Time, policies map[store.QueueRef]store.QueuePolicy,
	out []createAnswer) (all []*pendingCreate, replayOf, dupOf map[*pendingCreate]*pendingCreate, err error) {
	replayOf = map[*pendingCreate]*pendingCreate{} // within one call, a repeated key
	dupOf = map[*pendingCreate]*pendingCreate{}    // within one call, a repeated unique key
	for _, ci := range idx {
		c := calls[ci]
		now := dbNow
		if !c.p.Now.IsZero() {
			now = c.p.Now
		}
		out[ci].results = make([]store.CreateResult, len(c.p.Requests))
		steps, err := store.PlanCreate(c.p.Requests)
		if err != nil {
			out[ci] = createAnswer{err: err}
			continue
		}
		byIdx := make([]*pendingCreate, len(c.p.Requests))
		for i, st := range steps {
			pc := &pendingCreate{call: ci, idx: i, key: c.p.Requests[i].RequestID, fp: st.Fingerprint, uq: st.Unique}
			byIdx[i] = pc
			if st.RepeatOf >= 0 {
				replayOf[pc] = byIdx[st.RepeatOf]
				continue
			}
			if first := st.Unique.First; first >= 0 {
				// Answered with the first's job; it takes no request id.
				dupOf[pc] = byIdx[first]
				continue
			}
			r := c.p.Requests[i]
			id, err := s.newID()
			if err != nil {
				return nil, nil, nil, err
			}
			pc.job, pc.event = store.DecideCreate(policies[store.QueueRef{Tenant: c.p.Tenant, Queue: r.Spec.Queue}], c.p.Tenant, id, r.Spec, now)
			all = append(all, pc)
		}
	}
	return all, replayOf, dupOf, nil
}

// createPass creates the requests of the calls idx (whose request ids do
// not clash with each other's) in the open transaction, and fills their
// answers.
func (s *Store) createPass(ctx context.Context, tx *lazyTx, calls []createCall, idx []int, dbNow time.Time,
	policies map[store.QueueRef]store.QueuePolicy, h *handoff, out []createAnswer) error {
	all, replayOf, dupOf, err := s.pendingCreates(calls, idx, dbNow, policies, out)
	if err != nil {
		return err
	}
	alive := func(pc *pendingCreate) bool { return out[pc.call].err == nil }

	// Take the free request ids in one statement; the others are held by a
	// live record, to replay or to conflict with.
	var keyed []*pendingCreate
	for _, pc := range all {
		if pc.key != "" && alive(pc) {
			keyed = append(keyed, pc)
		}
	}
	replayed := map[*pendingCreate]*store.Job{}
	if len(keyed) > 0 {
		taken, err := s.takeKeys(ctx, tx, calls, keyed, dbNow)
		if err != nil {
			return err
		}
		var held []*pendingCreate
		for _, pc := range keyed {
			if !taken[pc] {
				held = append(held, pc)
			}
		}
		if err := s.resolveHeldKeys(ctx, tx, calls, held, replayed, out); err != nil {
			return err
		}
		// A call that failed gives back the keys it took.
		var undo []*pendingCreate
		for _, pc := range keyed {
			if taken[pc] && !alive(pc) {
				undo = append(undo, pc)
			}
		}
		if len(undo) > 0 {
			if err := s.releaseKeys(ctx, tx, calls, undo); err != nil {
				return err
			}
		}
	}

	var inserts []*pendingCreate
	for _, pc := range all {
		if !alive(pc) {
			continue
		}
		if job, ok := replayed[pc]; ok {
			out[pc.call].results[pc.idx] = store.CreateResult{Job: job, Replayed: true}
			continue
		}
		inserts = append(inserts, pc)
		out[pc.call].results[pc.idx] = store.CreateResult{Job: pc.job}
	}
	if err := s.insertAll(ctx, tx, calls, inserts, dbNow, h, out); err != nil {
		return err
	}
	// A repeat answers its first's job; a first may itself be a repeat
	// of the other kind, hence the second round of unique repeats.
	answerDups := func() {
		for pc, first := range dupOf {
			if alive(pc) {
				out[pc.call].results[pc.idx] = store.CreateResult{Job: out[first.call].results[first.idx].Job, Duplicate: true}
			}
		}
	}
	answerDups()
	for pc, first := range replayOf {
		if alive(pc) {
			out[pc.call].results[pc.idx] = store.CreateResult{Job: out[first.call].results[first.idx].Job, Replayed: true}
		}
	}
	answerDups()
	for i := range out {
		if out[i].err != nil {
			out[i].results = nil
		}
	}
	return nil
}

// insertAll inserts the new jobs: set-based in one round trip, or, when
// some are unique, as insertUnique says.
func (s *Store) insertAll(ctx context.Context, tx *lazyTx, calls []createCall, inserts []*pendingCreate, dbNow time.Time,
	h *handoff, out []createAnswer) error {
	if len(inserts) == 0 {
		return nil
	}
	for _, pc := range inserts {
		if pc.uq.Key != "" {
			return s.insertUnique(ctx, tx, calls, inserts, dbNow, h, out)
		}
	}
	return s.insertJobs(ctx, tx, inserts, h)
}

// takeKeys takes the request ids of keyed for their new jobs, in one
// statement, and reports which it took (the free and the expired ones).
// Keys are taken in sorted order, so that two batches never wait on each
// other in a cycle.
func (s *Store) takeKeys(ctx context.Context, tx *lazyTx, calls []createCall, keyed []*pendingCreate, dbNow time.Time) (map[*pendingCreate]bool, error) {
	n := len(keyed)
	tenants, keys, fps, ids := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	expires, nows := make([]time.Time, n), make([]time.Time, n)
	byKey := make(map[store.QueueRef]*pendingCreate, n)
	for i, pc := range keyed {
		c := calls[pc.call]
		now := cmp.Or(c.p.Now, dbNow)
		tenants[i], keys[i], fps[i], ids[i] = c.p.Tenant, pc.key, pc.fp, pc.job.ID
		expires[i], nows[i] = now.Add(c.window), now
		byKey[store.QueueRef{Tenant: c.p.Tenant, Queue: pc.key}] = pc
	}
	rows, err := tx.Query(ctx, qTakeIdempotencyKeys, tenants, keys, fps, ids, nowArgs(expires), nowArgs(nows))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	taken := make(map[*pendingCreate]bool, n)
	for rows.Next() {
		var tenant, key string
		if err := rows.Scan(&tenant, &key); err != nil {
			return nil, err
		}
		taken[byKey[store.QueueRef{Tenant: tenant, Queue: key}]] = true
	}
	return taken, rows.Err()
}

// resolveHeldKeys answers the requests whose id a live record holds, as
// store.DecideRequestID says: the record's job replays, the call fails
// with ErrIdempotencyConflict, or the record is given to the new job.
func (s *Store) resolveHeldKeys(ctx context.Context, tx *lazyTx, calls []createCall, held []*pendingCreate,
	replayed map[*pendingCreate]*store.Job, out []createAnswer) error {
	if len(held) == 0 {
		return nil
	}
	n := len(held)
	tenants, keys := make([]string, n), make([]string, n)
	for i, pc := range held {
		tenants[i], keys[i] = calls[pc.call].p.Tenant, pc.key
	}
	rows, err := tx.Query(ctx, qHeldIdempotencyKeys, tenants, keys)
	if err != nil {
		return err
	}
	found := map[int]store.IdempotencyRecord{}
	var jobTenants, jobIDs []string
	for rows.Next() {
		var (
			ord       int64
			fp, jobID string
			expires   time.Time
		)
		if err := rows.Scan(&ord, &fp, &jobID, &expires); err != nil {
			rows.Close()
			return err
		}
		found[int(ord)-1] = store.IdempotencyRecord{Fingerprint: fp, ExpiresAt: expires}
		jobTenants = append(jobTenants, tenants[ord-1])
		jobIDs = append(jobIDs, jobID)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	jobs, err := jobsByID(ctx, tx, jobTenants, jobIDs)
	if err != nil {
		return err
	}
	k := 0
	for i := range held {
		if r, ok := found[i]; ok {
			r.Job = jobs[store.QueueRef{Tenant: jobTenants[k], Queue: jobIDs[k]}]
			found[i] = r
			k++
		}
	}
	for i, pc := range held {
		c := calls[pc.call]
		r, ok := found[i]
		if !ok {
			// The record vanished since the key statement (retention):
			// impossible under its row lock; refuse rather than guess.
			return fmt.Errorf("request id %q: its record vanished", pc.key)
		}
		now := cmp.Or(c.p.Now, pc.job.CreatedAt)
		switch store.DecideRequestID(pc.fp, &r, now) {
		case store.KeyTake:
			if _, err := tx.Exec(ctx, qRetargetIdempotencyKey, c.p.Tenant, pc.key, pc.fp, pc.job.ID, now.Add(c.window)); err != nil {
				return err
			}
		case store.KeyConflict:
			out[pc.call] = createAnswer{err: store.IdempotencyConflictError(pc.idx, len(c.p.Requests))}
		case store.KeyReplay:
			replayed[pc] = r.Job
		}
	}
	return nil
}

// releaseKeys drops the records that a failed call took for jobs it will
// not create.
func (s *Store) releaseKeys(ctx context.Context, tx *lazyTx, calls []createCall, undo []*pendingCreate) error {
	n := len(undo)
	tenants, keys, ids := make([]string, n), make([]string, n), make([]string, n)
	for i, pc := range undo {
		tenants[i], keys[i], ids[i] = calls[pc.call].p.Tenant, pc.key, pc.job.ID
	}
	_, err := tx.Exec(ctx, qReleaseIdempotencyKeys, tenants, keys, ids)
	return err
}

// insertJobs inserts the jobs set-based (their QUEUED events are derived
// from the rows), and
// queues one notification per queue (but for the queues a handoff claims
// from, which notify after their claims), in one round trip.
func (s *Store) insertJobs(ctx context.Context, tx *lazyTx, inserts []*pendingCreate, h *handoff) error {
	args, err := insertArgs(inserts)
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	b.Queue(qInsertJobs, args[:13]...)
	wake := s.queueNotifications(b, inserts, h)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return duplicateIDError(err)
	}
	for range wake {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

// insertArgs are the arrays qInsertJobs and qInsertUniqueJobs take ($1 to
// $14: the unique keys last).
func insertArgs(inserts []*pendingCreate) ([]any, error) {
	n := len(inserts)
	var (
		tenants, ids, queues, kinds, metas, deps = make([]string, n), make([]string, n), make([]string, n),
			make([]string, n), make([]string, n), make([]string, n)
		payloads                      = make([][]byte, n)
		priorities, maxAttempts       = make([]int32, n), make([]int32, n)
		created, available, deadlines = make([]time.Time, n), make([]time.Time, n), make([]time.Time, n)
		ckeys, ukeys                  = make([]string, n), make([]string, n)
	)
	for i, pc := range inserts {
		j := pc.job
		md, err := metadataJSON(j.Metadata)
		if err != nil {
			return nil, err
		}
		tenants[i], ids[i], queues[i], kinds[i], metas[i], deps[i] = j.Tenant, j.ID, j.Queue, j.Kind, md, j.Dependency
		payloads[i], priorities[i], maxAttempts[i] = blobArg(j.Payload), j.Priority, j.MaxAttempts
		created[i], available[i], deadlines[i] = j.CreatedAt, j.AvailableAt, j.RetryDeadline
		ckeys[i], ukeys[i] = j.ConcurrencyKey, pc.uq.Key
	}
	return []any{tenants, ids, queues, kinds, payloads, metas, priorities, maxAttempts,
		nowArgs(created), nowArgs(available), nowArgs(deadlines), deps, ckeys, ukeys}, nil
}

// queueNotifications queues on b one notification per queue of inserts
// (but for the queues a handoff claims from, which notify after their
// claims) and returns how many it queued.
func (s *Store) queueNotifications(b *pgx.Batch, inserts []*pendingCreate, h *handoff) int {
	notified := map[store.QueueRef]bool{}
	for _, pc := range inserts {
		q := store.QueueRef{Tenant: pc.job.Tenant, Queue: pc.job.Queue}
		if h.defers(q) {
			h.fresh[q] = append(h.fresh[q], pc.job.ID)
			continue
		}
		if !notified[q] {
			notified[q] = true
			b.Queue(qNotify, s.channel, encodeNotification(q.Tenant, q.Queue))
		}
	}
	return len(notified)
}

// duplicateIDError names the id generator when an insert hit the primary
// key.
func duplicateIDError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.ConstraintName == jobsPrimaryKey {
		return engineErrorf("the id generator returned an id that a job already has; nothing was created")
	}
	return err
}

func metadataJSON(md map[string]string) (string, error) {
	if len(md) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("encode metadata: %w", err)
	}
	return string(b), nil
}

// jobsByID reads jobs of several tenants with their latest checkpoints, in
// one statement, keyed by (tenant, id) (as a QueueRef's two strings).
func jobsByID(ctx context.Context, q querier, tenants, ids []string) (map[store.QueueRef]*store.Job, error) {
	out := make(map[store.QueueRef]*store.Job, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	rows, err := q.Query(ctx, qJobsByIDs, tenants, ids)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var cp checkpointCols
		rec, err := scanJob(rows, cp.dest()...)
		if err != nil {
			return nil, err
		}
		rec.job.Checkpoint = cp.checkpoint()
		out[store.QueueRef{Tenant: rec.job.Tenant, Queue: rec.job.ID}] = rec.job
	}
	return out, rows.Err()
}

// getJob reads a job with its latest checkpoint.
func getJob(ctx context.Context, q querier, tenant, id string) (*store.Job, error) {
	rec, err := scanJob(q.QueryRow(ctx, qGetJob, tenant, id))
	if err != nil {
		return nil, err
	}
	if err := attachCheckpoint(ctx, q, rec.job); err != nil {
		return nil, err
	}
	return rec.job, nil
}

// attachCheckpoint sets job.Checkpoint to the job's latest checkpoint.
func attachCheckpoint(ctx context.Context, q querier, job *store.Job) error {
	cp, err := scanCheckpoint(q.QueryRow(ctx, qLatestCheckpoint, job.Tenant, job.ID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		job.Checkpoint = nil
		return nil
	case err != nil:
		return err
	}
	job.Checkpoint = cp
	return nil
}

// querier is what reads need: a pool, a transaction or a lazyTx.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
