package retention

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"

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

// Pruner runs store.Prune periodically. Start returns at once; Stop blocks
// until the loop ended and is safe twice.
type Pruner struct {
	cfg Config
	log *slog.Logger

	mu     sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Pruner; it does nothing until Start.
func New(cfg Config) *Pruner {
	cfg.Retention = cmp.Or(cfg.Retention, RetentionDefault)
	cfg.Interval = cmp.Or(cfg.Interval, IntervalDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Pruner{cfg: cfg, log: log}
}

// Start runs a first pass at once, then one per interval, until Stop or
// ctx ends. Starting twice is a no-op.
func (p *Pruner) Start(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done != nil {
		return
	}
	ctx, p.cancel = context.WithCancel(ctx)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		t := time.NewTicker(p.cfg.Interval)
		defer t.Stop()
		for {
			if _, err := p.runOnce(ctx); err != nil && ctx.Err() == nil {
				p.log.WarnContext(ctx, "retention pass failed; retrying next interval", slog.String("error", err.Error()))
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

// Stop ends the loop and waits for it. Safe twice and before Start.
func (p *Pruner) Stop() {
	p.mu.Lock()
	cancel, done := p.cancel, p.done
	p.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// runOnce prunes once. Finished jobs older than the retention are removed
// (unless retention is negative) and so are expired idempotency records.
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
	res, err := p.cfg.Store.Prune(ctx, store.PruneParams{FinishedBefore: before, BatchSize: p.cfg.BatchSize, Now: now})
	if err != nil {
		return res, err
	}
	if res.Jobs > 0 || res.IdempotencyRecords > 0 {
		p.log.InfoContext(ctx, "retention pruned",
			slog.Int64("jobs", res.Jobs), slog.Int64("idempotency_records", res.IdempotencyRecords))
	}
	return res, nil
}
