// Package reaper ends leases that expired with no report from their
// holder.
//
// No process has to release a lease it can no longer use: expiry is the
// recovery. Claims take only QUEUED jobs, so something must turn an
// expired lease back into a claimable job (or end it, when a cancel was
// requested or its budget is spent): that is the Reaper, a maintenance
// service of each coordinator. It sleeps until the earliest expiry the
// store knows of (store.ReapResult.NextExpiry), or until Expect names an
// earlier one, never longer than IntervalMax; then store.ReapExpired
// decides and applies every expired lease in one transaction
// (store.DecideExpiry). Several coordinators may reap the same database:
// the store skips rows another reaper holds, so each expired lease is
// ended exactly once.
//
// Failures: a reap that fails (store unavailable) is logged and retried
// after RetryDelay; nothing is lost meanwhile, the leases stay expired
// until a reap succeeds.
package reaper

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
	// IntervalMaxDefault bounds a sleep: it catches leases granted by
	// another coordinator (whose expiries this one was not told of) and
	// clocks that moved.
	IntervalMaxDefault = 2 * time.Second
	// RetryDelayDefault is the pause after a failed reap.
	RetryDelayDefault = time.Second
	// slack is the least sleep before a reap that found nothing, so that
	// a database clock a little behind ours does not make the loop spin.
	slack = 5 * time.Millisecond
)

// Config configures a Reaper.
type Config struct {
	// Store is reaped. Required.
	Store store.Store
	// Logger; nil discards.
	Logger *slog.Logger
	// Now is the clock passed to the store and used to plan sleeps; nil
	// means the store's clock (and time.Now for planning).
	Now func() time.Time
	// IntervalMax bounds one sleep. Default IntervalMaxDefault.
	IntervalMax time.Duration
	// RetryDelay is the pause after a failed reap. Default
	// RetryDelayDefault.
	RetryDelay time.Duration
	// Batch bounds the leases ended per transaction. Default
	// store.ReapBatchDefault.
	Batch int
	// Reaped, when set, is told what each reap that ended leases did
	// (wake dispatch for the requeued queues, count outcomes).
	Reaped func(store.ReapResult)
}

// Reaper is the service. Create it with New; Start, Stop.
type Reaper struct {
	cfg Config
	log *slog.Logger

	expect chan time.Time // capacity 1: the earliest expiry announced since the last look

	startstop.BaseStartStop
}

// New returns a Reaper; it does nothing until Start.
func New(cfg Config) *Reaper {
	cfg.IntervalMax = cmp.Or(cfg.IntervalMax, IntervalMaxDefault)
	cfg.RetryDelay = cmp.Or(cfg.RetryDelay, RetryDelayDefault)
	cfg.Batch = cmp.Or(cfg.Batch, store.ReapBatchDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reaper{cfg: cfg, log: log, expect: make(chan time.Time, 1)}
}

// Start runs the loop until Stop or ctx ends. It returns at once; a second
// Start while it runs is a no-op. Stop (from startstop.BaseStartStop) ends
// the loop and waits for it; it is safe twice, and before Start.
func (r *Reaper) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return
	}
	go func() {
		started()
		defer stopped()
		r.loop(ctx)
	}()
}

// Expect tells the reaper a lease expires at t, so it wakes then if that
// is earlier than it planned.
func (r *Reaper) Expect(t time.Time) {
	for {
		select {
		case r.expect <- t:
			return
		case prev := <-r.expect:
			if prev.Before(t) {
				t = prev
			}
		}
	}
}

func (r *Reaper) now() time.Time {
	if r.cfg.Now != nil {
		if t := r.cfg.Now(); !t.IsZero() {
			return t
		}
	}
	return time.Now()
}

func (r *Reaper) storeNow() time.Time {
	if r.cfg.Now == nil {
		return time.Time{}
	}
	return r.cfg.Now()
}

func (r *Reaper) loop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	wake := r.now() // when the timer fires
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case t := <-r.expect:
			if at := t.Add(slack); at.Before(wake) {
				wake = at
				// Go 1.23 timers: Reset after Stop never sees a stale tick.
				timer.Reset(max(wake.Sub(r.now()), 0))
			}
			continue
		}
		d := r.runOnce(ctx)
		wake = r.now().Add(d)
		timer.Reset(d)
	}
}

// runOnce reaps once (repeating while full batches come back) and returns
// how long to sleep before the next look.
func (r *Reaper) runOnce(ctx context.Context) time.Duration {
	for {
		res, err := r.cfg.Store.ReapExpired(ctx, store.ReapParams{Limit: r.cfg.Batch, Now: r.storeNow()})
		if err != nil {
			if ctx.Err() == nil {
				r.log.Log(ctx, store.FailureLevel(err), "reaping expired leases failed; retrying", slog.String("error", err.Error()))
			}
			return r.cfg.RetryDelay
		}
		if len(res.Jobs) > 0 {
			r.log.DebugContext(ctx, "ended expired leases", slog.Int("leases", len(res.Jobs)))
			if r.cfg.Reaped != nil {
				r.cfg.Reaped(res)
			}
		}
		if len(res.Jobs) >= r.cfg.Batch {
			continue
		}
		if res.NextExpiry.IsZero() {
			return r.cfg.IntervalMax
		}
		return min(max(res.NextExpiry.Sub(r.now())+slack, slack), r.cfg.IntervalMax)
	}
}
