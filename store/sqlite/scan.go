package sqlite

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Conversions between Go values and the schema's representations.

// micros is how a time is stored: INTEGER unix microseconds.
func micros(t time.Time) int64 { return t.UnixMicro() }

// nullMicros stores a zero time as NULL.
func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func fromNullMicros(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return fromMicros(v.Int64)
}

// blob returns b for a NOT NULL BLOB column: the driver binds a nil slice as
// NULL.
func blob(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}

// emptyNil returns nil for an empty slice, so that an empty payload or
// result reads back the same (nil) whatever the driver returns.
func emptyNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func encodeMetadata(md map[string]string) (string, error) {
	if len(md) == 0 {
		return "{}", nil
	}
	b, err := json.Marshal(md)
	if err != nil {
		return "", fmt.Errorf("encode metadata: %w", err)
	}
	return string(b), nil
}

func decodeMetadata(s string) (map[string]string, error) {
	if s == "{}" {
		return nil, nil // what most jobs store (encodeMetadata): no decoder needed
	}
	var md map[string]string
	if err := json.Unmarshal([]byte(s), &md); err != nil {
		return nil, fmt.Errorf("decode stored metadata: %w", err)
	}
	if len(md) == 0 {
		return nil, nil
	}
	return md, nil
}

// rowScanner is *sql.Row or *sql.Rows.
type rowScanner interface {
	Scan(dest ...any) error
}

// jobRow is a job as stored, with the dead-letter columns the Job type does
// not carry.
type jobRow struct {
	job        *store.Job
	replayedAs string
	abandoned  bool
}

// scanJob reads one row of jobSelect, then extra columns.
func scanJob(r rowScanner, extra ...any) (*jobRow, error) {
	var (
		j                                store.Job
		metadata, state                  string
		leaseExpires, finished, deadline sql.NullInt64
		leasedAt                         sql.NullInt64
		createdAt, availableAt           int64
		errCode, errMessage              sql.NullString
		errRetryable                     sql.NullBool
		cancelRequested, abandoned       bool
		replayedAs                       string
		cpID, cpPhase, cpParent          sql.NullString
		cpState                          []byte
		cpGeneration, cpCreated          sql.NullInt64
		payload, result                  []byte
	)
	dest := []any{&j.Tenant, &j.ID, &j.Queue, &j.Kind, &payload, &metadata, &j.Priority, &state,
		&j.Attempts, &j.MaxAttempts, &j.LeaseOwner, &j.LeaseGeneration, &leaseExpires,
		&cancelRequested, &createdAt, &availableAt, &finished, &deadline,
		&errCode, &errMessage, &errRetryable, &result,
		&j.ReplayOf, &replayedAs, &abandoned, &j.Dependency, &leasedAt, &j.ConcurrencyKey,
		&cpID, &cpPhase, &cpState, &cpGeneration, &cpParent, &cpCreated}
	err := r.Scan(append(dest, extra...)...)
	if err != nil {
		return nil, err
	}
	md, err := decodeMetadata(metadata)
	if err != nil {
		return nil, err
	}
	j.Metadata = md
	j.Payload = emptyNil(payload)
	j.Result = emptyNil(result)
	j.State = store.JobState(state)
	j.LeaseExpiresAt = fromNullMicros(leaseExpires)
	j.LeasedAt = fromNullMicros(leasedAt)
	j.CancelRequested = cancelRequested
	j.CreatedAt = fromMicros(createdAt)
	j.AvailableAt = fromMicros(availableAt)
	j.FinishedAt = fromNullMicros(finished)
	j.RetryDeadline = fromNullMicros(deadline)
	if errCode.Valid {
		j.LastError = &store.JobError{Code: errCode.String, Message: errMessage.String, Retryable: errRetryable.Bool}
	}
	if cpID.Valid {
		j.Checkpoint = &store.Checkpoint{
			ID:              cpID.String,
			JobID:           j.ID,
			Phase:           cpPhase.String,
			State:           emptyNil(cpState),
			LeaseGeneration: cpGeneration.Int64,
			ParentID:        cpParent.String,
			CreatedAt:       fromNullMicros(cpCreated),
		}
	}
	return &jobRow{job: &j, replayedAs: replayedAs, abandoned: abandoned}, nil
}

func scanEvent(r rowScanner) (store.Event, error) {
	var (
		e   store.Event
		typ string
		at  int64
	)
	if err := r.Scan(&e.JobID, &e.Sequence, &typ, &at, &e.Data); err != nil {
		return store.Event{}, err
	}
	e.Type = store.EventType(typ)
	e.Time = fromMicros(at)
	return e, nil
}

func scanAttempt(r rowScanner) (store.Attempt, error) {
	var (
		a             store.Attempt
		claimed       int64
		finished      sql.NullInt64
		outcome       string
		code, message sql.NullString
		retryable     sql.NullBool
	)
	if err := r.Scan(&a.JobID, &a.Attempt, &a.LeaseGeneration, &a.WorkerID, &claimed, &finished,
		&outcome, &code, &message, &retryable); err != nil {
		return store.Attempt{}, err
	}
	a.ClaimedAt = fromMicros(claimed)
	a.FinishedAt = fromNullMicros(finished)
	a.Outcome = store.AttemptOutcome(outcome)
	if code.Valid {
		a.Error = &store.JobError{Code: code.String, Message: message.String, Retryable: retryable.Bool}
	}
	return a, nil
}

func scanEffect(r rowScanner) (*store.Effect, error) {
	var (
		e                store.Effect
		status           string
		result           []byte
		created, updated int64
	)
	if err := r.Scan(&e.JobID, &e.Key, &status, &e.LeaseGeneration, &e.ProviderOperationID, &result,
		&created, &updated); err != nil {
		return nil, err
	}
	e.Status = store.EffectStatus(status)
	e.Result = emptyNil(result)
	e.CreatedAt = fromMicros(created)
	e.UpdatedAt = fromMicros(updated)
	return &e, nil
}

func scanPolicy(r rowScanner) (*store.QueuePolicy, error) {
	var (
		p                                            store.QueuePolicy
		initial, maxDelay, deadline, lease, maxLease int64
		retryable, nonRetryable, limits              string
	)
	if err := r.Scan(&p.Queue, &p.Retry.MaxAttempts, &initial, &maxDelay, &p.Retry.Multiplier,
		&p.Retry.JitterFraction, &retryable, &nonRetryable, &deadline, &lease,
		&p.ConcurrencyLimit, &p.Paused, &maxLease, &limits); err != nil {
		return nil, err
	}
	if err := store.DecodeQueueLimits(limits, &p); err != nil {
		return nil, err
	}
	p.Retry.InitialDelay = time.Duration(initial)
	p.Retry.MaxDelay = time.Duration(maxDelay)
	p.Retry.TotalRetryDeadline = time.Duration(deadline)
	p.DefaultLeaseDuration = time.Duration(lease)
	p.MaxLeaseDuration = time.Duration(maxLease)
	if err := json.Unmarshal([]byte(retryable), &p.Retry.RetryableErrorCodes); err != nil {
		return nil, fmt.Errorf("decode stored policy: %w", err)
	}
	if err := json.Unmarshal([]byte(nonRetryable), &p.Retry.NonRetryableErrorCodes); err != nil {
		return nil, fmt.Errorf("decode stored policy: %w", err)
	}
	if len(p.Retry.RetryableErrorCodes) == 0 {
		p.Retry.RetryableErrorCodes = nil
	}
	if len(p.Retry.NonRetryableErrorCodes) == 0 {
		p.Retry.NonRetryableErrorCodes = nil
	}
	return &p, nil
}

// nullText is s, or NULL when s is empty.
func nullText(s string) sql.NullString {
	return sql.NullString{String: s, Valid: s != ""}
}
