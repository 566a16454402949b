package retention

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// Defaults of Config.
const (
	RetentionDefault = 7 * 24 * time.Hour
	IntervalDefault  = time.Minute
)

// Config configures a Pruner.
type Config struct {
	// Store to prune. Required.
	Store store.Store
	// Logger; nil discards.
	Logger *slog.Logger
	// Retention keeps finished jobs this long. Zero means RetentionDefault;
	// negative keeps them for ever (expired idempotency records are still
	// removed).
	Retention time.Duration
	// Interval between runs. Default IntervalDefault.
	Interval time.Duration
	// BatchSize bounds each transaction; zero is the store's default.
	BatchSize int
	// Now overrides the clock (tests); nil means the store's clock.
	Now func() time.Time
}

// Pruner runs store.Prune periodically. It is a startstop service: Start
// returns at once; Stop blocks until the loop ended and is safe twice and
// before Start.
type Pruner struct {
	startstop.BaseStartStop

	cfg Config
	log *slog.Logger
}

var _ startstop.Service = (*Pruner)(nil)

// New returns a Pruner; it does nothing until Start.
func New(cfg Config) *Pruner {
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pruner{cfg: cfg, log: log}
}

// Start runs a first pass at once, then one per interval, until Stop or
// ctx ends. Starting a running Pruner is a no-op.
func (p *Pruner) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := p.StartInit(ctx)
	if !shouldStart {
		return
	}
	go func() {
		started()
		defer stopped()
		t := time.NewTicker(p.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := p.runOnce(ctx); err != nil && ctx.Err() == nil {
				p.log.Log(ctx, store.FailureLevel(err), "retention pass failed; retrying next interval", slog.String("error", err.Error()))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// runOnce prunes once. Finished jobs older than the retention are removed
// (unless retention is negative) and so are expired idempotency records.
// On an engine with day partitions of finished jobs, the pass also creates
// partitions ahead and drops expired days (store.PartitionMaintainer).
func (p *Pruner) runOnce(ctx context.Context) (store.PruneResult, error) {
	now := time.Time{}
	if p.cfg.Now != nil {
		now = p.cfg.Now()
	}
	base := now
	if base.IsZero() {
		var err error
		if base, err = p.cfg.Store.Now(ctx); err != nil {
			return store.PruneResult{}, err
		}
	}
	var before time.Time // zero: prune no jobs
	if p.cfg.Retention > 0 {
		before = base.Add(-p.cfg.Retention)
	}
	// Whole expired days of finished jobs first, where the engine keeps
	// them in partitions; Prune then takes the rest in batches.
	if m, ok := p.cfg.Store.(store.PartitionMaintainer); ok {
		mres, err := m.MaintainPartitions(ctx, store.MaintainPartitionsParams{FinishedBefore: before, Now: now})
		if err != nil {
			p.log.Log(ctx, store.FailureLevel(err), "partition maintenance incomplete; retrying next interval", slog.String("error", err.Error()))
		}
		if mres.Created > 0 || mres.Dropped > 0 {
			p.log.InfoContext(ctx, "retention partitions",
				slog.Int("created", mres.Created), slog.Int("dropped", mres.Dropped),
				slog.Int64("dropped_jobs_estimate", mres.DroppedJobs), slog.Int64("swept_rows", mres.SweptRows))
		}
	}
	res, err := p.cfg.Store.Prune(ctx, store.PruneParams{FinishedBefore: before, BatchSize: p.cfg.BatchSize, Now: now})
	if err != nil {
		return res, err
	}
	if res.Jobs > 0 || res.IdempotencyRecords > 0 || res.UniqueKeys > 0 {
		p.log.InfoContext(ctx, "retention pruned",
			slog.Int64("jobs", res.Jobs), slog.Int64("idempotency_records", res.IdempotencyRecords),
			slog.Int64("unique_keys", res.UniqueKeys))
	}
	return res, nil
}
