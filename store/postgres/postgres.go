package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	// The database/sql driver "pgx", used only by Migrate (goose runs on
	// database/sql).
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/backoff"
	"github.com/leasehold/leasehold/internal/groupcommit"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/store"
)

// Config configures Open.
type Config struct {
	// DatabaseURL is a libpq-style URL or DSN, e.g.
	// postgres://user@host:5432/db?sslmode=disable. Required.
	DatabaseURL string
	// MaxConns caps the pool. Default (0): pgxpool's default,
	// max(4, number of CPUs).
	MaxConns int32
	// Options are the engine knobs shared with SQLite. Default: production
	// settings (see store.EngineOptions).
	Options store.EngineOptions
	// Logger receives the engine's logs. Default: discard.
	Logger *slog.Logger

	// tracer, when set, traces every statement and batch of the pool
	// (tests count round trips with it).
	tracer pgx.QueryTracer
}

// txAttempts bounds how many times a transaction that lost a serialization
// or deadlock race is run before the call gives up with ErrUnavailable.
const txAttempts = 5

// Store is the PostgreSQL engine. It is safe for concurrent use.
type Store struct {
	// Reporter implements the lease-bound reports (Renew, Complete, Retry,
	// CancelByHolder, Release, ApplyReports) through reports.
	store.Reporter
	// reports is the group committer: every report of every caller joins
	// a batch that applyReports applies in one transaction.
	reports *groupcommit.Committer[store.Report, store.ReportResult]
	// creates is the create committer: concurrent CreateJobs calls share
	// a transaction (createBatch).
	creates *groupcommit.Committer[createCall, createAnswer]
	// policies caches queue policies for claims, renewals and retries.
	policies *store.PolicyCache

	pool   *pgxpool.Pool
	cfg    Config
	opts   store.EngineOptions
	logger *slog.Logger
	// channel is the NOTIFY channel of the schema the store works in (see
	// channelFor).
	channel string
	// changeChannel is the channel of job changes (changeChannelFor).
	changeChannel string

	// listeners are the running subscriptions (SubscribeJobs), which Close
	// stops even when their subscriber's ctx is still live. listenersMu
	// guards listeners and closed; once closed, none is added.
	listenersMu sync.Mutex
	listeners   map[*listener]struct{}
	closed      bool
	closeOnce   sync.Once
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.JobNotifier = (*Store)(nil)
)

// Open connects a pool to an already migrated database (see Migrate) and
// checks that the database answers.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if cfg.DatabaseURL == "" {
		return nil, store.Invalid("database_url", "is required")
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		// The parse error can quote the URL, password included.
		return nil, store.Invalid("database_url", "is not a valid PostgreSQL URL")
	}
	if cfg.MaxConns < 0 {
		return nil, store.Invalid("max_conns", "must not be negative")
	}
	if cfg.MaxConns > 0 {
		pcfg.MaxConns = cfg.MaxConns
	}
	// Plan every statement for the table sizes of the moment. The batch
	// statements join arrays of tokens with jobs and attempts; a plan
	// cached while those tables were small (a fresh database, or one whose
	// statistics are stale) keeps scanning them whole as they grow — seen
	// here as a 15 ms hash join per report batch at 20k attempts.
	// Planning costs tens of microseconds per statement, and a statement
	// now serves a whole batch.
	if _, set := pcfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		pcfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	// No JIT compilation. A claim's LIMIT comes from its arguments, so the
	// planner estimates a tenth of the queue; past a few million queued
	// jobs that estimate crosses jit_above_cost and every claim spent
	// ~100 ms compiling a plan that runs in 0.1 ms. No statement of ours
	// runs long enough to repay compiling.
	if _, set := pcfg.ConnConfig.RuntimeParams["jit"]; !set {
		pcfg.ConnConfig.RuntimeParams["jit"] = "off"
	}
	if cfg.tracer != nil {
		pcfg.ConnConfig.Tracer = cfg.tracer
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres store: %w", interpretError(err))
	}
	// Reading the schema also checks that the database answers.
	var schema string
	if err := pool.QueryRow(ctx, qCurrentSchema).Scan(&schema); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open postgres store: %w", interpretError(err))
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	s := &Store{
		pool:    pool,
		cfg:     cfg,
		opts:    cfg.Options.WithDefaults(),
		logger:  logger,
		channel: channelFor(schema),
		// The trigger names the channel by the schema of its table.
		changeChannel: changeChannelFor(cmp.Or(schema, "public")),
		listeners:     make(map[*listener]struct{}),
	}
	s.policies = &store.PolicyCache{Load: s.loadPolicyRefs}
	// A batch is bounded in calls (each of at most store.BatchMaxItems
	// requests).
	createObserve, createSpan := s.opts.CommitHooks("creates")
	s.creates = groupcommit.New(groupcommit.Config[createCall, createAnswer]{
		Flush: s.createBatch, MaxBatch: 32, MaxPending: 1_000, Queued: s.opts.QueuedHook("create"),
		Observe: createObserve, Span: createSpan,
	})
	reportObserve, reportSpan := s.opts.CommitHooks("reports")
	s.reports = groupcommit.New(groupcommit.Config[store.Report, store.ReportResult]{
		Flush: s.applyReports, Queued: s.opts.QueuedHook("report"),
		Observe: reportObserve, Span: reportSpan,
	})
	s.Reporter = store.Reporter{Submit: s.submitReports}
	return s, nil
}

// Migrate applies every pending migration to the database at databaseURL.
// It is idempotent, and safe from two processes at once: goose holds a
// session advisory lock while it migrates.
func Migrate(ctx context.Context, databaseURL string) error {
	pcfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return store.Invalid("database_url", "is not a valid PostgreSQL URL")
	}
	// The connection settings the pool would use, without the pool's own
	// parameters (pool_max_conns...): given to the server as settings,
	// they would fail the connection (unrecognized configuration
	// parameter).
	db := stdlib.OpenDB(*pcfg.ConnConfig)
	defer func() { _ = db.Close() }() // the migration's outcome is known by now
	if _, err := migrations.Up(ctx, db, migrations.Postgres); err != nil {
		return fmt.Errorf("migrate postgres: %w", interpretError(err))
	}
	return nil
}

// Engine implements store.Store.
func (s *Store) Engine() string { return "postgres" }

// Now implements store.Store: the database clock.
func (s *Store) Now(ctx context.Context) (time.Time, error) {
	var now time.Time
	if err := s.pool.QueryRow(ctx, qNow).Scan(&now); err != nil {
		return time.Time{}, s.readError(ctx, "now", err)
	}
	return now.UTC(), nil
}

// Close applies the reports already submitted, stops the listeners and
// closes the pool. It is safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.creates.Close()
		s.reports.Close()
		s.stopListeners()
		s.pool.Close()
	})
	return nil
}

// withTx runs fn in a READ COMMITTED transaction, calls the BeforeCommit hook
// and commits. A transaction that lost a serialization or deadlock race (or
// an idempotency-key insert race) is run again from the start, so fn must
// not keep state between runs except through its return.
func (s *Store) withTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	return s.retryTx(ctx, op, func() error { return s.runTx(ctx, op, fn) })
}

// retryTx runs one transaction attempt, run, again from the start when it
// lost a serialization or deadlock race (or an idempotency-key insert
// race), and converts its final error.
func (s *Store) retryTx(ctx context.Context, op string, run func() error) error {
	// Jittered, so two transactions that deadlocked do not collide again
	// in lockstep.
	delays := backoff.Exponential{Min: 10 * time.Millisecond, Max: 40 * time.Millisecond}
	var err error
	for attempt := 1; ; attempt++ {
		err = run()
		var he *hookError
		if err == nil || errors.As(err, &he) || !retryable(err) || attempt == txAttempts || ctx.Err() != nil {
			break
		}
		s.logger.DebugContext(ctx, "retrying transaction", slog.String("op", op), slog.Int("attempt", attempt), slog.Any("error", err))
		if werr := backoff.Sleep(ctx, delays.Next()); werr != nil {
			break
		}
	}
	if err == nil {
		return nil
	}
	out := interpretError(err)
	s.logFailure(ctx, "store transaction failed", op, err, out)
	return out
}

func (s *Store) runTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) (err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// The rollback must run even when ctx is done, or the
			// connection goes back to the pool mid-transaction.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = tx.Rollback(rctx)
		}
	}()
	if err := fn(tx); err != nil {
		return err
	}
	if hook := s.opts.BeforeCommit; hook != nil {
		if err := hook(op); err != nil {
			return &hookError{op: op, err: err}
		}
	}
	return tx.Commit(ctx)
}

// hookError is a BeforeCommit failure: returned as is, never retried.
type hookError struct {
	op  string
	err error
}

func (e *hookError) Error() string { return e.op + ": aborted before commit: " + e.err.Error() }
func (e *hookError) Unwrap() error { return e.err }

// readError converts an error of a read outside a transaction, logging
// unexpected ones.
func (s *Store) readError(ctx context.Context, op string, err error) error {
	out := interpretError(err)
	s.logFailure(ctx, "store read failed", op, err, out)
	return out
}

// logFailure logs an unexpected failure of op at Warn, and an unreachable
// database at Debug: every loop would otherwise log each of its attempts
// through an outage, which the coordinator's readiness probe reports once.
func (s *Store) logFailure(ctx context.Context, msg, op string, err, out error) {
	switch {
	case isDomainError(out):
	case errors.Is(out, store.ErrUnreachable):
		s.logger.DebugContext(ctx, msg, slog.String("op", op), slog.Any("error", err))
	default:
		s.logger.WarnContext(ctx, msg, slog.String("op", op), slog.Any("error", err))
	}
}

// isDomainError reports whether err is an expected answer (a sentinel, a
// validation error or a caller's context error) rather than a fault.
func isDomainError(err error) bool {
	for _, target := range []error{
		store.ErrNotFound, store.ErrLeaseLost, store.ErrIdempotencyConflict,
		store.ErrInvalid, store.ErrAlreadyFinal, store.ErrNotDead,
		store.ErrAbandoned, store.ErrAlreadyReplayed, store.ErrReportMismatch, store.ErrAlreadyExists,
		store.ErrScheduleLimit, store.ErrOperationLimit, store.ErrOperationLeaseLost,
		context.Canceled, context.DeadlineExceeded,
	} {
		if errors.Is(err, target) {
			return true
		}
	}
	var he *hookError
	var ee *engineError
	return errors.As(err, &he) || errors.As(err, &ee)
}

// newID returns EngineOptions.NewID's next id, refusing one that could not
// be looked up again (ids are validated like any caller-supplied text).
func (s *Store) newID() (string, error) {
	id := s.opts.NewID()
	if err := store.ValidateText("id", id, store.NameMaxLen, true); err != nil {
		return "", engineErrorf("the id generator returned an unusable id %q (%v)", id, err)
	}
	return id, nil
}

// nowArg is the $now argument of a query: NULL (the database clock) when t
// is zero, else t in UTC at the microsecond precision both engines store.
func nowArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return normTime(t)
}

// normTime is t at microsecond precision in UTC.
func normTime(t time.Time) time.Time {
	return t.UTC().Truncate(time.Microsecond)
}

// txNow returns the transaction's instant: the caller's Now, or the database
// clock (now() is fixed for the whole transaction).
func txNow(ctx context.Context, tx pgx.Tx, now time.Time) (time.Time, error) {
	if !now.IsZero() {
		return normTime(now), nil
	}
	var t time.Time
	if err := tx.QueryRow(ctx, qNow).Scan(&t); err != nil {
		return time.Time{}, err
	}
	return t.UTC(), nil
}

// notify queues a wake-up for (tenant, queue) on the store's channel;
// PostgreSQL delivers it only if the transaction commits.
func (s *Store) notify(ctx context.Context, tx pgx.Tx, tenant, queue string) error {
	_, err := tx.Exec(ctx, qNotify, s.channel, encodeNotification(tenant, queue))
	return err
}
