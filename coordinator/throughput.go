package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// ThroughputIntervalDefault is the width of one throughput sample
// (Config.ThroughputInterval).
const ThroughputIntervalDefault = 10 * time.Second

// ThroughputSamples is how many samples each queue keeps: 180 of 10 s
// by default, the last 30 minutes.
const ThroughputSamples = 180

// throughputQueuesMax bounds the queues one sample keeps: the finished
// jobs of more queues than that in one interval are left out of it (and
// counted in the log).
const throughputQueuesMax = 10_000

// throughputTimeout bounds one CountFinished call.
const throughputTimeout = 30 * time.Second

// throughputSampler counts, once per interval, the jobs of every queue
// that finished in the last whole interval (Store.CountFinished, through
// the finished-at index: its cost follows the jobs finished in the
// interval) and keeps the last ThroughputSamples intervals in memory:
// QueueStats.throughput. An interval [t, t+interval) is counted once
// interval/2 has passed after its end, so that the transactions finishing
// jobs in it have committed. A store error leaves the interval to be
// counted at the next tick; an outage longer than the kept samples skips
// the intervals that would have fallen out anyway.
type throughputSampler struct {
	startstop.BaseStartStop

	interval time.Duration
	store    store.Store
	log      *slog.Logger
	now      func() time.Time

	// failing is whether the last count failed (only runOnce's
	// goroutine uses it).
	failing bool

	mu      sync.Mutex
	next    time.Time // start of the next interval to count (zero: not started)
	samples []throughputWindow
}

// throughputWindow is one counted interval.
type throughputWindow struct {
	start  time.Time
	counts map[store.QueueRef]*[4]int64 // succeeded, failed, dead, cancelled
}

var _ startstop.Service = (*throughputSampler)(nil)

// Start counts every interval/2 until Stop or ctx ends; nothing when the
// interval is negative.
func (s *throughputSampler) Start(ctx context.Context) {
	if s.interval <= 0 {
		return
	}
	s.mu.Lock()
	if s.next.IsZero() {
		s.next = s.now().Truncate(s.interval)
	}
	s.mu.Unlock()
	startEvery(ctx, &s.BaseStartStop, s.interval/2, func(ctx context.Context, _ struct{}) struct{} {
		s.runOnce(ctx)
		return struct{}{}
	})
}

// runOnce counts every whole interval that has settled since the last.
func (s *throughputSampler) runOnce(ctx context.Context) {
	s.mu.Lock()
	next := s.next
	s.mu.Unlock()
	now := s.now()
	settled := now.Add(-s.interval / 2)
	// Intervals older than the kept samples would fall out at once.
	if oldest := settled.Truncate(s.interval).Add(-ThroughputSamples * s.interval); next.Before(oldest) {
		next = oldest
	}
	for !next.Add(s.interval).After(settled) {
		w, err := s.count(ctx, next)
		if err != nil {
			// Warn once per run of failures, Debug for the rest; an
			// outage of the store is the readiness prober's to log.
			level := slog.LevelDebug
			if !s.failing && !errors.Is(err, store.ErrUnavailable) {
				level = slog.LevelWarn
			}
			s.failing = true
			if ctx.Err() == nil {
				s.log.Log(ctx, level, "throughput sample failed; retried at the next tick",
					slog.Time("interval_start", next), slog.Any("error", err))
			}
			break
		}
		s.failing = false
		s.mu.Lock()
		s.samples = append(s.samples, w)
		if len(s.samples) > ThroughputSamples {
			s.samples = append(s.samples[:0:0], s.samples[len(s.samples)-ThroughputSamples:]...)
		}
		s.mu.Unlock()
		next = next.Add(s.interval)
	}
	s.mu.Lock()
	s.next = next
	s.mu.Unlock()
}

// count reads one interval from the store.
func (s *throughputSampler) count(ctx context.Context, start time.Time) (throughputWindow, error) {
	ctx, cancel := context.WithTimeout(ctx, throughputTimeout)
	defer cancel()
	rows, err := s.store.CountFinished(ctx, store.CountFinishedParams{From: start, To: start.Add(s.interval)})
	if err != nil {
		return throughputWindow{}, err
	}
	w := throughputWindow{start: start, counts: make(map[store.QueueRef]*[4]int64)}
	dropped := 0
	for _, r := range rows {
		ref := store.QueueRef{Tenant: r.Tenant, Queue: r.Queue}
		c := w.counts[ref]
		if c == nil {
			if len(w.counts) >= throughputQueuesMax {
				dropped++
				continue
			}
			c = new([4]int64)
			w.counts[ref] = c
		}
		switch r.State {
		case store.JobStateSucceeded:
			c[0] += r.N
		case store.JobStateFailed:
			c[1] += r.N
		case store.JobStateDead:
			c[2] += r.N
		case store.JobStateCancelled:
			c[3] += r.N
		case store.JobStateQueued, store.JobStateLeased:
			// Not finished: CountFinished never returns them.
		}
	}
	if dropped > 0 {
		s.log.WarnContext(ctx, "throughput sample keeps at most throughputQueuesMax queues",
			slog.Int("queues_max", throughputQueuesMax), slog.Int("rows_left_out", dropped))
	}
	return w, nil
}

// series returns a queue's samples, oldest first (nil before the first).
func (s *throughputSampler) series(ref store.QueueRef) []*leaseholdv1.ThroughputSample {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.samples) == 0 {
		return nil
	}
	width := durationpb.New(s.interval)
	out := make([]*leaseholdv1.ThroughputSample, len(s.samples))
	for i, w := range s.samples {
		ts := &leaseholdv1.ThroughputSample{Start: timestamppb.New(w.start), Width: width}
		if c := w.counts[ref]; c != nil {
			ts.Succeeded, ts.Failed, ts.Dead, ts.Cancelled = c[0], c[1], c[2], c[3]
		}
		out[i] = ts
	}
	return out
}
