package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
)

// jobsPrimaryKey is the constraint a duplicate job id violates.
const jobsPrimaryKey = "jobs_pkey"

// CreateJobs implements store.Store. Each new job, its QUEUED event and its
// idempotency record commit in one transaction with the rest of the batch.
//
// Idempotency: a request with a RequestID first takes its key with
// qClaimIdempotencyKey. If a live record holds the key, the request replays
// that record's job when the fingerprints match and fails the batch with
// ErrIdempotencyConflict when they differ. Two requests of one batch with
// the same key behave the same way, the second replaying the first.
func (s *Store) CreateJobs(ctx context.Context, p store.CreateJobsParams) ([]store.CreateResult, error) {
	if err := store.ValidateCreate(p); err != nil {
		return nil, err
	}
	window := cmp.Or(p.IdempotencyWindow, store.IdempotencyWindowDefault)
	var results []store.CreateResult
	err := s.withTx(ctx, "create", func(tx pgx.Tx) error {
		var err error
		results, err = s.createJobs(ctx, tx, p, window)
		return err
	})
	if err != nil {
		return nil, err
	}
	return results, nil
}

// newJob is a job to insert, at request index idx.
type newJob struct {
	idx  int
	id   string
	spec store.JobSpec
}

func (s *Store) createJobs(ctx context.Context, tx pgx.Tx, p store.CreateJobsParams, window time.Duration) ([]store.CreateResult, error) {
	now, err := txNow(ctx, tx, p.Now)
	if err != nil {
		return nil, err
	}
	queues := make([]string, 0, len(p.Requests))
	for _, r := range p.Requests {
		queues = append(queues, r.Spec.Queue)
	}
	policies, err := loadPolicies(ctx, tx, p.Tenant, queues)
	if err != nil {
		return nil, err
	}

	results := make([]store.CreateResult, len(p.Requests))
	// sameAs[i] = j: request i replays request j of this batch.
	sameAs := map[int]int{}
	type keyUse struct {
		fingerprint string
		idx         int
	}
	keys := map[string]keyUse{}
	var inserts []newJob
	for i, r := range p.Requests {
		if r.RequestID == "" {
			id, err := s.newID()
			if err != nil {
				return nil, err
			}
			inserts = append(inserts, newJob{idx: i, id: id, spec: r.Spec})
			continue
		}
		fp := store.Fingerprint(r.Spec)
		if prev, ok := keys[r.RequestID]; ok {
			if prev.fingerprint != fp {
				return nil, conflictError(i, len(p.Requests))
			}
			sameAs[i] = prev.idx
			continue
		}
		keys[r.RequestID] = keyUse{fingerprint: fp, idx: i}

		id, err := s.newID()
		if err != nil {
			return nil, err
		}
		var took bool
		err = tx.QueryRow(ctx, qClaimIdempotencyKey, p.Tenant, r.RequestID, fp, id, now.Add(window), now).Scan(&took)
		switch {
		case err == nil:
			inserts = append(inserts, newJob{idx: i, id: id, spec: r.Spec})
			continue
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, err
		}
		// A live record holds the key (this statement's snapshot sees it
		// even if it committed while we waited for its lock).
		var storedFP, jobID string
		if err := tx.QueryRow(ctx, qGetIdempotencyKey, p.Tenant, r.RequestID).Scan(&storedFP, &jobID); err != nil {
			return nil, err
		}
		job, err := getJob(ctx, tx, p.Tenant, jobID)
		if errors.Is(err, pgx.ErrNoRows) {
			// Its job was pruned: the record counts as expired.
			if _, err := tx.Exec(ctx, qRetargetIdempotencyKey, p.Tenant, r.RequestID, fp, id, now.Add(window)); err != nil {
				return nil, err
			}
			inserts = append(inserts, newJob{idx: i, id: id, spec: r.Spec})
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("load the job of request id %q: %w", r.RequestID, err)
		}
		if storedFP != fp {
			return nil, conflictError(i, len(p.Requests))
		}
		results[i] = store.CreateResult{Job: job, Replayed: true}
	}

	if len(inserts) > 0 {
		if err := s.insertJobs(ctx, tx, p.Tenant, now, policies, inserts, results, len(p.Requests)); err != nil {
			return nil, err
		}
	}
	for i, j := range sameAs {
		results[i] = store.CreateResult{Job: results[j].Job, Replayed: true}
	}
	return results, nil
}

// insertJobs inserts the jobs, their QUEUED events and one notification per
// queue in a single round trip, and stores each job in results.
func (s *Store) insertJobs(ctx context.Context, tx pgx.Tx, tenant string, now time.Time,
	policies map[string]store.QueuePolicy, inserts []newJob, results []store.CreateResult, n int) error {
	b := &pgx.Batch{}
	notified := map[string]bool{}
	for _, nj := range inserts {
		spec := nj.spec
		policy := policies[spec.Queue]
		maxAttempts := cmp.Or(spec.MaxAttempts, policy.Retry.MaxAttempts)
		availableAt := now
		switch {
		case spec.RunAfter > 0:
			availableAt = now.Add(spec.RunAfter)
		case !spec.RunAt.IsZero():
			availableAt = normTime(spec.RunAt)
		}
		var deadline time.Time
		if policy.Retry.TotalRetryDeadline > 0 {
			deadline = now.Add(policy.Retry.TotalRetryDeadline)
		}
		metadata, err := metadataJSON(spec.Metadata)
		if err != nil {
			return err
		}
		b.Queue(qInsertJob, tenant, nj.id, spec.Queue, spec.Kind, blobArg(spec.Payload), metadata,
			spec.Priority, maxAttempts, now, availableAt, timeArg(deadline), "", spec.Dependency)
		b.Queue(qInsertEvent, tenant, nj.id, int64(1), string(store.EventQueued), now,
			event{data: map[string]any{"queue": spec.Queue, "available_at": availableAt}}.json())
		if !notified[spec.Queue] {
			notified[spec.Queue] = true
			b.Queue(qNotify, s.channel, encodeNotification(tenant, spec.Queue))
		}
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	notified = map[string]bool{}
	for _, nj := range inserts {
		rec, err := scanJob(br.QueryRow())
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.ConstraintName == jobsPrimaryKey {
				return engineErrorf("%s: the id generator returned %q, which a job already has; nothing was created", requestField(nj.idx, n), nj.id)
			}
			return err
		}
		results[nj.idx] = store.CreateResult{Job: rec.job}
		if _, err := br.Exec(); err != nil {
			return err
		}
		if !notified[nj.spec.Queue] {
			notified[nj.spec.Queue] = true
			if _, err := br.Exec(); err != nil {
				return err
			}
		}
	}
	return br.Close()
}

func conflictError(i, n int) error {
	return fmt.Errorf("%s.request_id: %w", requestField(i, n), store.ErrIdempotencyConflict)
}

// requestField names request i the way store.ValidateCreate does.
func requestField(i, n int) string {
	if n > 1 {
		return fmt.Sprintf("requests[%d]", i)
	}
	return "requests"
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

// querier is what reads need: a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}
