package coordinator

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// ActivityLogIntervalDefault is how often a coordinator that did something
// logs its activity summary.
const ActivityLogIntervalDefault = 10 * time.Second

// activity counts what this coordinator did, so an operator (or someone
// running `leasehold serve` for the first time) sees jobs moving at Info
// level without turning on per-call debug logs. Counts are in-process and
// per coordinator; the database holds the truth (QueueStats).
type activity struct {
	created, replayed, leased, succeeded, requeued, failed, dead, cancelled atomic.Int64
}

// activityCounts is one reading of the counters.
type activityCounts struct {
	created, replayed, leased, succeeded, requeued, failed, dead, cancelled int64
}

func (a *activity) read() activityCounts {
	return activityCounts{
		created: a.created.Load(), replayed: a.replayed.Load(), leased: a.leased.Load(),
		succeeded: a.succeeded.Load(), requeued: a.requeued.Load(), failed: a.failed.Load(),
		dead: a.dead.Load(), cancelled: a.cancelled.Load(),
	}
}

// ended counts a lease that ended through a report, by the job's new state.
func (a *activity) ended(state store.JobState) {
	switch state {
	case store.JobStateSucceeded:
		a.succeeded.Add(1)
	case store.JobStateQueued:
		a.requeued.Add(1)
	case store.JobStateFailed:
		a.failed.Add(1)
	case store.JobStateDead:
		a.dead.Add(1)
	case store.JobStateCancelled:
		a.cancelled.Add(1)
	default:
		// JobStateLeased: no report ends a lease in it
	}
}

// activityReporter logs the activity counters every interval in which they
// changed, so quiet coordinators stay quiet. It is a startstop service;
// with a zero or negative interval Start does nothing.
type activityReporter struct {
	startstop.BaseStartStop

	interval time.Duration
	log      *slog.Logger
	counts   *activity
	// streams returns how many worker streams are connected now.
	streams func() int
}

var _ startstop.Service = (*activityReporter)(nil)

// Start logs every interval until Stop or ctx ends.
func (r *activityReporter) Start(ctx context.Context) {
	startEvery(ctx, &r.BaseStartStop, r.interval, r.runOnce)
}

// runOnce logs the counters when they differ from last and returns the
// reading it logged against.
func (r *activityReporter) runOnce(ctx context.Context, last activityCounts) activityCounts {
	now := r.counts.read()
	if now == last {
		return last
	}
	r.log.InfoContext(ctx, "activity (totals since start)",
		slog.Int64("jobs_created", now.created), slog.Int64("creates_replayed", now.replayed),
		slog.Int64("leases_granted", now.leased), slog.Int64("succeeded", now.succeeded),
		slog.Int64("requeued", now.requeued), slog.Int64("failed", now.failed),
		slog.Int64("dead", now.dead), slog.Int64("cancelled", now.cancelled),
		slog.Int("worker_streams", r.streams()))
	return now
}
