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
	"errors"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// PollIntervalDefault is the longest a scheduler waits between passes.
// It sleeps until the earliest known tick when that comes sooner, so this
// bounds only how late it sees a schedule created or changed on another
// coordinator, and what an idle coordinator costs: one transaction each.
const PollIntervalDefault = time.Second

// passGapMin keeps a scheduler from spinning on a due schedule that
// another coordinator holds locked while it fires it.
const passGapMin = 20 * time.Millisecond

// Config configures a Scheduler.
type Config struct {
	// Store fires the schedules. Required.
	Store store.Store
	// Logger; nil discards.
	Logger *slog.Logger
	// PollInterval is the longest wait between passes (see
	// PollIntervalDefault). Default PollIntervalDefault.
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
			res, err := s.pass(ctx)
			if err != nil && ctx.Err() == nil {
				// An unreachable database is the readiness probe's news,
				// logged once; a pass per interval would repeat it.
				level := slog.LevelWarn
				if errors.Is(err, store.ErrUnreachable) {
					level = slog.LevelDebug
				}
				s.log.Log(ctx, level, "schedule pass failed; retrying next interval", slog.String("error", err.Error()))
			}
			t.Reset(nextWait(res, err, s.cfg.PollInterval))
		}
	}()
}

// nextWait is the pause after a pass: none while passes fire schedules
// (the next one may find more, or the earliest tick after them), until
// the earliest known tick when nothing was due, and never longer than
// poll.
func nextWait(res store.FireSchedulesResult, err error, poll time.Duration) time.Duration {
	switch {
	case err != nil:
		return poll
	case res.More || len(res.Schedules) > 0:
		return 0
	case res.NextTick.IsZero():
		return poll
	}
	return min(poll, max(res.NextTick.Sub(res.Now), passGapMin))
}

// RunOnce fires one batch of due schedules and reports whether more may
// be due.
func (s *Scheduler) RunOnce(ctx context.Context) (bool, error) {
	res, err := s.pass(ctx)
	return res.More, err
}

func (s *Scheduler) pass(ctx context.Context) (store.FireSchedulesResult, error) {
	var now time.Time
	if s.cfg.Now != nil {
		now = s.cfg.Now()
	}
	res, err := s.cfg.Store.FireDueSchedules(ctx, store.FireSchedulesParams{
		Limit: s.cfg.Batch, IdempotencyWindow: s.cfg.IdempotencyWindow, Now: now,
	})
	if err != nil {
		return store.FireSchedulesResult{}, err
	}
	if len(res.Schedules) > 0 && s.cfg.Fired != nil {
		s.cfg.Fired(ctx, res)
	}
	return res, nil
}
