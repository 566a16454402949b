// Package scheduler fires due schedules. Every coordinator runs one, and
// none leads: each pass asks the store to fire the due schedules it can
// lock (store.Schedules.FireDueSchedules), and the store makes each tick
// one job however many schedulers run, by advancing the schedule's
// high-water mark in the transaction that creates the tick's job. A
// coordinator that dies mid-pass commits nothing; the others fire the
// ticks on their next pass.
package scheduler

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// PollIntervalDefault is how often a scheduler looks for due schedules:
// a tick's lag is at most about this plus one pass.
const PollIntervalDefault = 200 * time.Millisecond

// Config configures a Scheduler.
type Config struct {
	// Store fires the schedules. Required.
	Store store.Store
	// Logger; nil discards.
	Logger *slog.Logger
	// PollInterval between passes that found nothing more to do. Default
	// PollIntervalDefault.
	PollInterval time.Duration
	// Batch bounds the schedules of one transaction; 0 is the store's
	// default.
	Batch int
	// IdempotencyWindow of the tick jobs' keys.
	IdempotencyWindow time.Duration
	// Now overrides the clock (tests); nil means the store's clock.
	Now func() time.Time
	// Fired is told of each pass that handled schedules, after its commit.
	Fired func(ctx context.Context, res store.FireSchedulesResult)
}

// Scheduler polls for due schedules and fires them. It is a startstop
// service.
type Scheduler struct {
	startstop.BaseStartStop

	cfg Config
	log *slog.Logger
}

var _ startstop.Service = (*Scheduler)(nil)

// New returns a Scheduler; it does nothing until Start.
func New(cfg Config) *Scheduler {
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Scheduler{cfg: cfg, log: log}
}

// Start runs passes until Stop or ctx ends: at once again while a pass
// filled its batch, else after PollInterval. A failed pass is logged and
// retried at the next interval.
func (s *Scheduler) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
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
			}
			more, err := s.RunOnce(ctx)
			if err != nil && ctx.Err() == nil {
				s.log.WarnContext(ctx, "schedule pass failed; retrying next interval", slog.String("error", err.Error()))
			}
			if more && err == nil {
				t.Reset(0)
			} else {
				t.Reset(s.cfg.PollInterval)
			}
		}
	}()
}

// RunOnce fires one batch of due schedules and reports whether more may
// be due.
func (s *Scheduler) RunOnce(ctx context.Context) (bool, error) {
	var now time.Time
	if s.cfg.Now != nil {
		now = s.cfg.Now()
	}
	res, err := s.cfg.Store.FireDueSchedules(ctx, store.FireSchedulesParams{
		Limit: s.cfg.Batch, IdempotencyWindow: s.cfg.IdempotencyWindow, Now: now,
	})
	if err != nil {
		return false, err
	}
	if len(res.Schedules) > 0 && s.cfg.Fired != nil {
		s.cfg.Fired(ctx, res)
	}
	return res.More, nil
}
