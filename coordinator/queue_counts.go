package coordinator

import (
	"context"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Bounds of the queue counts ListQueues may answer from memory
// (ListQueuesRequest.max_staleness).
const (
	// QueueCountsMaxStaleness is the largest max_staleness accepted.
	QueueCountsMaxStaleness = 10 * time.Minute
	// queueCountsRefreshMin is the shortest time between two background
	// counts of one tenant.
	queueCountsRefreshMin = time.Second
	// queueCountsCostShare: a tenant is counted again in the background
	// at most every queueCountsCostShare times the last count's duration,
	// so that watching a console costs the database at most a tenth of a
	// connection however many jobs are kept.
	queueCountsCostShare = 10
	// queueCountsTenantsMax bounds the tenants kept; past it the one
	// counted longest ago is forgotten.
	queueCountsTenantsMax = 1024
	// queueCountsTimeout bounds one count.
	queueCountsTimeout = time.Minute
)

// queueCounts keeps each tenant's last full count (Store.ListQueues) for
// ListQueues calls that accept counts up to max_staleness old: a count
// younger than that is answered at once, and one older than the refresh
// bound (queueCountsRefreshMin, or queueCountsCostShare times the last
// count's duration) is replaced in the background meanwhile; only a call
// with no count young enough waits, for one count shared by all the calls
// waiting.
type queueCounts struct {
	mu      sync.Mutex
	tenants map[string]*tenantCounts
	wg      sync.WaitGroup // the counts under way
}

// tenantCounts is one tenant's last count.
type tenantCounts struct {
	stats map[string]store.QueueStats // by queue; nil before the first count
	at    time.Time                   // when the last count started
	took  time.Duration
	err   error         // the last count's error
	done  chan struct{} // closed when the count under way ends; nil when none
}

// get returns the tenant's counts taken at most maxStale ago, and when.
func (q *queueCounts) get(ctx context.Context, c *Coordinator, tenant string, maxStale time.Duration) (map[string]store.QueueStats, time.Time, error) {
	asked := time.Now()
	q.mu.Lock()
	if q.tenants == nil {
		q.tenants = make(map[string]*tenantCounts)
	}
	e := q.tenants[tenant]
	if e == nil {
		q.evictLocked()
		e = &tenantCounts{}
		q.tenants[tenant] = e
	}
	if e.stats != nil && asked.Sub(e.at) <= maxStale {
		if asked.Sub(e.at) >= max(queueCountsRefreshMin, queueCountsCostShare*e.took) {
			q.startLocked(c, tenant, e) //nolint:contextcheck // a count shared by every call: under the coordinator's context, not one caller's
		}
		stats, at := e.stats, e.at
		q.mu.Unlock()
		return stats, at, nil
	}
	done := q.startLocked(c, tenant, e) //nolint:contextcheck // as above: the callers wait for it with their own context
	q.mu.Unlock()
	select {
	case <-done:
	case <-ctx.Done():
		return nil, time.Time{}, ctx.Err()
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if e.err != nil {
		return nil, time.Time{}, e.err
	}
	return e.stats, e.at, nil
}

// startLocked starts a count of the tenant unless one is under way, and
// returns the channel closed when it ends. q.mu is held.
func (q *queueCounts) startLocked(c *Coordinator, tenant string, e *tenantCounts) <-chan struct{} {
	if e.done != nil {
		return e.done
	}
	done := make(chan struct{})
	e.done = done
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		ctx, cancel := context.WithTimeout(c.life.bgCtx, queueCountsTimeout)
		defer cancel()
		start := time.Now()
		qs, err := c.store.ListQueues(ctx, tenant)
		took := time.Since(start)
		q.mu.Lock()
		defer q.mu.Unlock()
		e.err, e.done = err, nil
		if err == nil {
			stats := make(map[string]store.QueueStats, len(qs))
			for i := range qs {
				stats[qs[i].Policy.Queue] = qs[i].Stats
			}
			e.stats, e.at, e.took = stats, start, took
		}
		close(done)
	}()
	return done
}

// evictLocked forgets the tenant counted longest ago when the map is
// full (never one whose count is under way). q.mu is held.
func (q *queueCounts) evictLocked() {
	if len(q.tenants) < queueCountsTenantsMax {
		return
	}
	var oldest string
	var at time.Time
	for t, e := range q.tenants {
		if e.done == nil && (oldest == "" || e.at.Before(at)) {
			oldest, at = t, e.at
		}
	}
	if oldest != "" {
		delete(q.tenants, oldest)
	}
}
