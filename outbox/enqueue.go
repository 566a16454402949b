package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// Job is one job to create, as the outbox row holds it. The fields are
// JobSpec's (proto/leasehold/v1/job_service.proto), except run_after: a
// delay is relative to when the row is relayed, so the outbox takes an
// absolute RunAt only.
type Job struct {
	// Queue and Kind are required names: 1-128 characters of
	// [A-Za-z0-9._:-], starting with a letter or digit.
	Queue string
	Kind  string
	// Payload is opaque to Leasehold; at most the outbox's payload limit.
	Payload []byte
	// Metadata: at most 64 entries.
	Metadata map[string]string
	// Priority in [-1000, 1000]; higher runs first.
	Priority int32
	// RunAt is when the job becomes available; zero means at once.
	RunAt time.Time
	// MaxAttempts overrides the queue's attempt budget; 0 keeps it.
	MaxAttempts int32
	// Dependency names the circuit breaker the job needs; optional.
	Dependency string
	// ConcurrencyKey limits how many such jobs run at once; optional.
	ConcurrencyKey string
	// RequestID is the job's idempotency key. Empty means a new UUIDv7 is
	// generated. Give one derived from the application's own change (e.g.
	// "order-42-email") to make enqueueing the same change twice one job.
	RequestID string
	// UniqueKey makes the job unique (docs/unique-jobs.md): while a job
	// with the key is live, the relayed row answers that job instead of
	// creating another. Empty: not unique.
	UniqueKey string
}

// Outbox enqueues into the outbox of one schema. The zero value is not
// usable; New returns one, and the package functions use Default.
type Outbox struct {
	insert string
}

// Default is the outbox in SchemaDefault.
var Default = mustNew(SchemaDefault)

func mustNew(schema string) *Outbox {
	o, err := New(schema)
	if err != nil {
		panic(err)
	}
	return o
}

// New returns the outbox in schema.
func New(schema string) (*Outbox, error) {
	if err := ValidateSchemaName(schema); err != nil {
		return nil, err
	}
	return &Outbox{insert: `INSERT INTO ` + schema + `.outbox
  (request_id, queue, kind, payload, metadata, priority, run_at, max_attempts, dependency, concurrency_key, unique_key)
  VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`}, nil
}

// Enqueue inserts job into the outbox in SchemaDefault, inside tx: the
// job is created after, and only if, tx commits. It returns the job's
// request id (generated when job.RequestID is empty). Rows are checked
// against the coordinator's limits first, so a bad job fails here, before
// the commit, rather than in the relay.
func Enqueue(ctx context.Context, tx pgx.Tx, job Job) (string, error) {
	return Default.Enqueue(ctx, tx, job)
}

// EnqueueSQL is Enqueue for database/sql (any PostgreSQL driver).
func EnqueueSQL(ctx context.Context, tx *sql.Tx, job Job) (string, error) {
	return Default.EnqueueSQL(ctx, tx, job)
}

// Enqueue is the package's Enqueue for o's schema.
func (o *Outbox) Enqueue(ctx context.Context, tx pgx.Tx, job Job) (string, error) {
	args, id, err := o.args(job)
	if err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, o.insert, args...); err != nil {
		return "", fmt.Errorf("outbox: enqueue %s/%s: %w", job.Queue, job.Kind, err)
	}
	return id, nil
}

// EnqueueSQL is the package's EnqueueSQL for o's schema.
func (o *Outbox) EnqueueSQL(ctx context.Context, tx *sql.Tx, job Job) (string, error) {
	args, id, err := o.args(job)
	if err != nil {
		return "", err
	}
	if _, err := tx.ExecContext(ctx, o.insert, args...); err != nil {
		return "", fmt.Errorf("outbox: enqueue %s/%s: %w", job.Queue, job.Kind, err)
	}
	return id, nil
}

// args validates job and returns the insert's arguments in forms both
// pgx and database/sql drivers encode (text for jsonb, *time.Time for a
// nullable timestamptz).
func (o *Outbox) args(job Job) ([]any, string, error) {
	if job.RequestID == "" {
		job.RequestID = store.NewID()
	}
	if err := ValidateJob(job); err != nil {
		return nil, "", err
	}
	md := job.Metadata
	if md == nil {
		md = map[string]string{}
	}
	mdJSON, err := json.Marshal(md)
	if err != nil {
		return nil, "", fmt.Errorf("outbox: metadata: %w", err)
	}
	var runAt *time.Time
	if !job.RunAt.IsZero() {
		runAt = &job.RunAt
	}
	payload := job.Payload
	if payload == nil {
		payload = []byte{}
	}
	var uniqueKey *string
	if job.UniqueKey != "" {
		uniqueKey = &job.UniqueKey
	}
	return []any{job.RequestID, job.Queue, job.Kind, payload, string(mdJSON), job.Priority, runAt,
		job.MaxAttempts, job.Dependency, job.ConcurrencyKey, uniqueKey}, job.RequestID, nil
}

// ValidateJob checks job against the coordinator's own rules (package
// store), with errors naming the field as the API would ("job.queue").
// The configured payload limit and the run_at horizon are the database's
// to check. A job with no request id is valid: Enqueue generates one.
func ValidateJob(job Job) error {
	if err := store.ValidateText("request_id", job.RequestID, store.RequestIDMaxLen, false); err != nil {
		return err
	}
	if !job.RunAt.IsZero() && job.RunAt.Year() < 1970 {
		return store.Invalid("job.run_at", "must be after 1970")
	}
	if job.UniqueKey != "" {
		if err := store.ValidateUnique("unique", &store.UniqueOptions{Key: job.UniqueKey}); err != nil {
			return err
		}
	}
	return store.ValidateSpec("job", store.JobSpec{
		Queue: job.Queue, Kind: job.Kind, Payload: job.Payload, Metadata: job.Metadata,
		Priority: job.Priority, MaxAttempts: job.MaxAttempts, Dependency: job.Dependency,
		ConcurrencyKey: job.ConcurrencyKey,
	})
}
