// Package bulk runs bulk operations (store.Operations). Every coordinator
// runs one Runner, and none leads: a runner claims a running operation
// with a lease (store.Operations.ClaimOperation) and works through it in
// chunks (RunOperationChunk), each one transaction fenced on that lease
// that also extends it. A coordinator that dies mid-operation commits
// nothing of its current chunk; once its lease expires another runner
// claims the operation and goes on after the last committed chunk, so
// each job is acted on once.
//
// Chunks are paced (Config.Rate rows per second) so that live traffic
// keeps its latency; finished operations are pruned after
// Config.Retention.
package bulk

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// Defaults.
const (
	// LeaseDefault is how long a runner holds an operation past its last
	// chunk: how long a dead coordinator's operation waits for another.
	LeaseDefault = 30 * time.Second
	// PollIntervalDefault is how often an idle runner looks for work.
	PollIntervalDefault = time.Second
	// ChunkDefault is the rows per chunk (store.OperationChunkMax at most):
	// small, so that each commit's WAL, which live commits queue behind, is
	// a small burst at a steady cadence rather than a large one.
	ChunkDefault = 250
	// RateDefault is the rows per second a runner works at.
	RateDefault = 2000
	// RetentionDefault is how long finished operations are kept.
	RetentionDefault = 7 * 24 * time.Hour
	// failuresMax is how many chunks in a row may fail before the
	// operation is failed.
	failuresMax = 5
)

// Config configures a Runner.
type Config struct {
	// Store runs the operations. Required.
	Store store.Store
	// Owner is this coordinator's id (the lease owner). Required.
	Owner string
	// Logger; nil discards.
	Logger *slog.Logger
	// Lease, PollInterval, Chunk, Rate (rows/s; negative = unpaced) and
	// Retention (negative = keep forever): see the defaults.
	Lease        time.Duration
	PollInterval time.Duration
	Chunk        int
	Rate         float64
	Retention    time.Duration
	// Now overrides the clock passed to the store (tests); nil means the
	// store's clock.
	Now func() time.Time
	// Chunked is told of each committed chunk and how long it took since
	// the previous chunk started (its pause included).
	Chunked func(ctx context.Context, res store.ChunkResult, took time.Duration)
	// Finished is told of each operation this runner finished (succeeded,
	// cancelled or failed).
	Finished func(ctx context.Context, op *store.Operation)
	// Running is told when this runner starts (+1) and stops (-1)
	// working on an operation.
	Running func(delta int)
}

// Runner claims and runs operations. It is a startstop service.
type Runner struct {
	startstop.BaseStartStop

	cfg  Config
	log  *slog.Logger
	wake chan struct{}
	// lastPrune is touched by the run goroutine only.
	lastPrune time.Time
}

var _ startstop.Service = (*Runner)(nil)

// New returns a Runner; it does nothing until Start.
func New(cfg Config) *Runner {
	cfg.Lease = cmp.Or(cfg.Lease, LeaseDefault)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.Chunk = min(cmp.Or(cfg.Chunk, ChunkDefault), store.OperationChunkMax)
	cfg.Rate = cmp.Or(cfg.Rate, RateDefault)
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runner{cfg: cfg, log: log, wake: make(chan struct{}, 1)}
}

// Wake makes an idle runner look for work now (an operation was started
// through this coordinator).
func (r *Runner) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Start runs until Stop or ctx ends.
func (r *Runner) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return
	}
	go func() {
		started()
		defer stopped()
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-r.wake:
			}
			worked, err := r.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				r.log.Log(ctx, store.FailureLevel(err), "bulk operation pass failed; retrying", slog.String("error", err.Error()))
			}
			wait := r.cfg.PollInterval
			if worked && err == nil {
				wait = 0
			}
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
			t.Reset(wait)
		}
	}()
}

func (r *Runner) now() time.Time {
	if r.cfg.Now != nil {
		return r.cfg.Now()
	}
	return time.Time{}
}

// RunOnce claims one operation and runs it until it finishes, its lease
// is lost or ctx ends, and prunes when due. It reports whether it found
// an operation.
func (r *Runner) RunOnce(ctx context.Context) (bool, error) {
	r.prune(ctx)
	op, err := r.cfg.Store.ClaimOperation(ctx, store.ClaimOperationParams{Owner: r.cfg.Owner, LeaseTTL: r.cfg.Lease, Now: r.now()})
	if err != nil || op == nil {
		return false, err
	}
	if r.cfg.Running != nil {
		r.cfg.Running(1)
		defer r.cfg.Running(-1)
	}
	return true, r.run(ctx, op)
}

// run works through op's chunks.
func (r *Runner) run(ctx context.Context, op *store.Operation) error {
	log := r.log.With(slog.String("operation", op.ID), slog.String("tenant", op.Tenant), slog.String("kind", string(op.Kind)))
	failures := 0
	prevStart := time.Time{}
	for {
		start := time.Now()
		if prevStart.IsZero() {
			prevStart = start
		}
		res, err := r.cfg.Store.RunOperationChunk(ctx, store.RunChunkParams{
			Tenant: op.Tenant, ID: op.ID, Owner: r.cfg.Owner, LeaseTTL: r.cfg.Lease, Limit: r.cfg.Chunk, Now: r.now(),
		})
		took := time.Since(start)
		switch {
		case errors.Is(err, store.ErrOperationLeaseLost), errors.Is(err, store.ErrNotFound):
			log.InfoContext(ctx, "bulk operation left to its new holder", slog.String("reason", err.Error()))
			return nil
		case err != nil:
			if ctx.Err() != nil {
				return nil //nolint:nilerr // stopping: the lease lets another coordinator go on
			}
			failures++
			log.Log(ctx, store.FailureLevel(err), "bulk operation chunk failed", slog.Int("failures", failures), slog.String("error", err.Error()))
			if failures >= failuresMax && !errors.Is(err, store.ErrUnavailable) {
				failed, ferr := r.cfg.Store.FailOperation(context.WithoutCancel(ctx), store.FailOperationParams{
					Tenant: op.Tenant, ID: op.ID, Owner: r.cfg.Owner, Error: err.Error(), Now: r.now(),
				})
				if ferr == nil && r.cfg.Finished != nil {
					r.cfg.Finished(ctx, failed)
				}
				return ferr
			}
			if !sleep(ctx, time.Duration(failures)*time.Second) {
				return nil
			}
			continue
		}
		failures = 0
		if r.cfg.Chunked != nil {
			// From the previous chunk's start: the pause is included.
			r.cfg.Chunked(ctx, res, time.Since(prevStart))
		}
		prevStart = start
		if res.Finished {
			log.InfoContext(ctx, "bulk operation finished", slog.String("state", string(res.Operation.State)),
				slog.Int64("matched", res.Operation.Counts.Matched), slog.Int64("acted", res.Operation.Counts.Acted))
			if r.cfg.Finished != nil {
				r.cfg.Finished(ctx, res.Operation)
			}
			return nil
		}
		if !sleep(ctx, r.pause(res.Handled, took)) {
			return nil
		}
	}
}

// pause is the wait after a chunk of n rows that took took, so that rows
// go at Rate per second at most.
func (r *Runner) pause(n int, took time.Duration) time.Duration {
	if r.cfg.Rate <= 0 || n == 0 {
		return 0
	}
	return max(0, time.Duration(float64(n)/r.cfg.Rate*float64(time.Second))-took)
}

// prune deletes operations finished more than Retention ago, at most once
// a minute.
func (r *Runner) prune(ctx context.Context) {
	if r.cfg.Retention < 0 || time.Since(r.lastPrune) < time.Minute {
		return
	}
	r.lastPrune = time.Now()
	now := r.now()
	if now.IsZero() {
		var err error
		if now, err = r.cfg.Store.Now(ctx); err != nil {
			return
		}
	}
	if _, err := r.cfg.Store.PruneOperations(ctx, now.Add(-r.cfg.Retention), 0); err != nil && ctx.Err() == nil {
		r.log.Log(ctx, store.FailureLevel(err), "pruning bulk operations failed", slog.String("error", err.Error()))
	}
}

func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
