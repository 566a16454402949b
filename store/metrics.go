package store

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// QueueMetricsParams asks for the live gauges of every queue of every
// tenant (Store.QueueMetrics).
type QueueMetricsParams struct {
	// Now is when "available", "expired" and the lag are judged; zero
	// means the store's clock.
	Now time.Time
}

// QueueMetrics are one queue's live gauges, read in one statement for all
// queues so that a metrics scrape costs one query however many queues
// exist. Only the states a queue's health depends on are counted: the
// finished states other than DEAD grow without bound until retention
// prunes them, and counting them would scan the table; their rates come
// from the coordinator's counters instead.
type QueueMetrics struct {
	Tenant string
	Queue  string
	// Queued counts QUEUED jobs, due or scheduled for later.
	Queued int64
	// Available counts QUEUED jobs due at Now (claimable unless the queue
	// is paused, at its concurrency limit, or the job has a cancel
	// requested).
	Available int64
	// OldestAvailableAge is how long the oldest available job has been
	// due (Now - available_at): the queue's lag. Zero when none is
	// available.
	OldestAvailableAge time.Duration
	// Leased counts LEASED jobs: leases held, expired ones not yet taken
	// back by a claim included.
	Leased int64
	// LeasesExpired counts LEASED jobs whose lease expired at Now. They
	// are claimable again (expiry is the recovery); a steady non-zero
	// value means workers die or stall without releasing.
	LeasesExpired int64
	// Dead counts DEAD jobs not abandoned: the dead-letter queue's size.
	Dead int64
}

// QueueMetricsSnapshot is every queue's gauges at one moment: every known
// queue (one with a policy, or with any job not yet pruned by retention),
// all zeros when it has no queued, leased or dead job. Order: tenant,
// queue.
type QueueMetricsSnapshot struct {
	Queues []QueueMetrics
}

// QueueMetricsFold folds the rows of an engine's queue-metrics statement,
// one per (tenant, queue, state), into a snapshot; both engines use it so
// that their results have the same shape. The zero value is ready.
type QueueMetricsFold struct {
	byQueue map[QueueRef]*QueueMetrics
}

// Add folds one row: n jobs of tenant's queue in state. For QUEUED, second
// is the available count and lag the oldest available job's age; for
// LEASED, second is the expired leases; DEAD uses n only.
func (f *QueueMetricsFold) Add(tenant, queue string, state JobState, n, second int64, lag time.Duration) {
	if f.byQueue == nil {
		f.byQueue = make(map[QueueRef]*QueueMetrics)
	}
	ref := QueueRef{Tenant: tenant, Queue: queue}
	m := f.byQueue[ref]
	if m == nil {
		m = &QueueMetrics{Tenant: tenant, Queue: queue}
		f.byQueue[ref] = m
	}
	switch state {
	case JobStateQueued:
		m.Queued += n
		m.Available += second
		m.OldestAvailableAge = max(m.OldestAvailableAge, lag)
	case JobStateLeased:
		m.Leased += n
		m.LeasesExpired += second
	case JobStateDead:
		m.Dead += n
	default:
		// the other states and "known": counted nowhere (the row still makes the queue known)
	}
}

// Snapshot returns the folded queues ordered by tenant, then queue.
func (f *QueueMetricsFold) Snapshot() *QueueMetricsSnapshot {
	out := &QueueMetricsSnapshot{Queues: make([]QueueMetrics, 0, len(f.byQueue))}
	for _, m := range f.byQueue {
		out.Queues = append(out.Queues, *m)
	}
	slices.SortFunc(out.Queues, func(a, b QueueMetrics) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Queue, b.Queue))
	})
	return out
}

// CountFinishedParams is the window [From, To) of Store.CountFinished.
type CountFinishedParams struct {
	From, To time.Time
}

// Validate refuses an empty or inverted window.
func (p CountFinishedParams) Validate() error {
	if p.From.IsZero() || p.To.IsZero() || !p.From.Before(p.To) {
		return fmt.Errorf("%w: count finished: window [%v, %v) is empty", ErrInvalid, p.From, p.To)
	}
	return nil
}

// FinishedCount is how many jobs of a queue finished in a state within a
// window (Store.CountFinished).
type FinishedCount struct {
	Tenant, Queue string
	State         JobState
	N             int64
}
