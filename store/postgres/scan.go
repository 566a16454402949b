package postgres

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// jobRecord is a jobs row: the public job plus the columns only the engine
// reads.
type jobRecord struct {
	job          *store.Job
	replayedAs   string
	abandoned    bool
	cancelReason string
	lastEventSeq int64
}

// scanJob scans the jobColumns of row, then extra.
func scanJob(row pgx.Row, extra ...any) (*jobRecord, error) {
	var (
		j                                store.Job
		rec                              = jobRecord{job: &j}
		metadata, state                  string
		leaseExpires, finished, deadline *time.Time
		leasedAt                         *time.Time
		errCode, errMessage              *string
		errRetryable                     *bool
		payload, result                  []byte
	)
	dest := []any{
		&j.Tenant, &j.ID, &j.Queue, &j.Kind, &payload, &metadata, &j.Priority, &state,
		&j.Attempts, &j.MaxAttempts, &j.LeaseOwner, &j.LeaseGeneration, &leaseExpires,
		&j.CancelRequested, &rec.cancelReason, &j.CreatedAt, &j.AvailableAt, &finished,
		&deadline, &errCode, &errMessage, &errRetryable,
		&result, &j.ReplayOf, &rec.replayedAs, &rec.abandoned, &j.Dependency, &rec.lastEventSeq, &leasedAt,
	}
	if err := row.Scan(append(dest, extra...)...); err != nil {
		return nil, err
	}
	j.State = store.JobState(state)
	j.Payload = nilIfEmpty(payload)
	j.Result = nilIfEmpty(result)
	if metadata != "" && metadata != "{}" {
		if err := json.Unmarshal([]byte(metadata), &j.Metadata); err != nil {
			return nil, fmt.Errorf("decode metadata of job %s: %w", j.ID, err)
		}
	}
	j.CreatedAt = j.CreatedAt.UTC()
	j.AvailableAt = j.AvailableAt.UTC()
	j.LeaseExpiresAt = timeOrZero(leaseExpires)
	j.LeasedAt = timeOrZero(leasedAt)
	j.FinishedAt = timeOrZero(finished)
	j.RetryDeadline = timeOrZero(deadline)
	if errCode != nil {
		j.LastError = &store.JobError{Code: *errCode}
		if errMessage != nil {
			j.LastError.Message = *errMessage
		}
		if errRetryable != nil {
			j.LastError.Retryable = *errRetryable
		}
	}
	return &rec, nil
}

func scanCheckpoint(row pgx.Row) (*store.Checkpoint, error) {
	var c store.Checkpoint
	var state []byte
	if err := row.Scan(&c.ID, &c.JobID, &c.Phase, &state, &c.LeaseGeneration, &c.ParentID, &c.CreatedAt); err != nil {
		return nil, err
	}
	c.State = nilIfEmpty(state)
	c.CreatedAt = c.CreatedAt.UTC()
	return &c, nil
}

func scanEffect(row pgx.Row) (*store.Effect, error) {
	var e store.Effect
	var status string
	var result []byte
	if err := row.Scan(&e.JobID, &e.Key, &status, &e.LeaseGeneration, &e.ProviderOperationID,
		&result, &e.CreatedAt, &e.UpdatedAt); err != nil {
		return nil, err
	}
	e.Status = store.EffectStatus(status)
	e.Result = nilIfEmpty(result)
	e.CreatedAt = e.CreatedAt.UTC()
	e.UpdatedAt = e.UpdatedAt.UTC()
	return &e, nil
}

func scanAttempt(row pgx.Row) (*store.Attempt, error) {
	var (
		a                   store.Attempt
		finished            *time.Time
		outcome             string
		errCode, errMessage *string
		errRetryable        *bool
	)
	if err := row.Scan(&a.JobID, &a.Attempt, &a.LeaseGeneration, &a.WorkerID, &a.ClaimedAt, &finished,
		&outcome, &errCode, &errMessage, &errRetryable); err != nil {
		return nil, err
	}
	a.Outcome = store.AttemptOutcome(outcome)
	a.ClaimedAt = a.ClaimedAt.UTC()
	a.FinishedAt = timeOrZero(finished)
	if errCode != nil {
		a.Error = &store.JobError{Code: *errCode}
		if errMessage != nil {
			a.Error.Message = *errMessage
		}
		if errRetryable != nil {
			a.Error.Retryable = *errRetryable
		}
	}
	return &a, nil
}

func scanPolicy(row pgx.Row) (*store.QueuePolicy, error) {
	var (
		p                                                 store.QueuePolicy
		initialNS, maxNS, deadlineNS, leaseNS, maxLeaseNS int64
		retryable, nonRetryable                           []string
	)
	if err := row.Scan(&p.Queue, &p.Retry.MaxAttempts, &initialNS, &maxNS, &p.Retry.Multiplier,
		&p.Retry.JitterFraction, &retryable, &nonRetryable, &deadlineNS, &leaseNS,
		&p.ConcurrencyLimit, &p.Paused, &maxLeaseNS); err != nil {
		return nil, err
	}
	p.Retry.InitialDelay = time.Duration(initialNS)
	p.Retry.MaxDelay = time.Duration(maxNS)
	p.Retry.TotalRetryDeadline = time.Duration(deadlineNS)
	p.DefaultLeaseDuration = time.Duration(leaseNS)
	p.MaxLeaseDuration = time.Duration(maxLeaseNS)
	// Empty lists read back as nil, as DefaultQueuePolicy has them.
	if len(retryable) > 0 {
		p.Retry.RetryableErrorCodes = slices.Clone(retryable)
	}
	if len(nonRetryable) > 0 {
		p.Retry.NonRetryableErrorCodes = slices.Clone(nonRetryable)
	}
	return &p, nil
}

// policyArgs are the stored columns of p in qUpsertPolicy/qSetPaused order
// (max_attempts ... max_lease_ns).
func policyArgs(p store.QueuePolicy) []any {
	return []any{
		p.Retry.MaxAttempts, int64(p.Retry.InitialDelay), int64(p.Retry.MaxDelay),
		p.Retry.Multiplier, p.Retry.JitterFraction,
		emptyIfNil(p.Retry.RetryableErrorCodes), emptyIfNil(p.Retry.NonRetryableErrorCodes),
		int64(p.Retry.TotalRetryDeadline), int64(p.DefaultLeaseDuration), p.ConcurrencyLimit,
		int64(p.MaxLeaseDuration),
	}
}

func emptyIfNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// nilIfEmpty makes empty and absent blobs read back the same (nil), as they
// do on SQLite.
func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// blobArg stores a nil blob as empty bytes for NOT NULL columns.
func blobArg(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

func timeOrZero(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.UTC()
}

// collect reads every row of rows with scan.
func collect[T any](rows pgx.Rows, scan func(pgx.Row) (*T, error)) ([]*T, error) {
	defer rows.Close()
	var out []*T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
