package coordinator

import (
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// WorkerSeenWindowDefault is how long a worker that uses only the unary
// calls (Claim, Renew, reports) stays in ListWorkers after its last call.
// Long-poll Claims wait up to ClaimWaitMax (60s) and heartbeats come at a
// third of the lease (30s by default), so a live unary worker calls well
// within it.
const WorkerSeenWindowDefault = 2 * time.Minute

// seenWorkersMax bounds the registry: past it, the least recently seen
// worker is forgotten first. A fleet larger than this still works; only
// ListWorkers shows part of it.
const seenWorkersMax = 10_000

// seenWorkers is the in-memory "last seen" registry of the workers that
// called this coordinator's unary worker API. It is per coordinator, like
// the stream registry: a worker is listed by the coordinators it talks to.
type seenWorkers struct {
	window time.Duration

	mu      sync.Mutex // guards workers
	workers map[sessionKey]*seenWorker
}

// seenWorker is one unary worker as last seen.
type seenWorker struct {
	queues    []string
	firstSeen time.Time
	lastSeen  time.Time
}

func newSeenWorkers(window time.Duration) *seenWorkers {
	return &seenWorkers{window: window, workers: make(map[sessionKey]*seenWorker)}
}

// saw records a call of worker at now; queues (from a Claim) replace the
// ones remembered when given.
func (r *seenWorkers) saw(tenant, worker string, queues []string, now time.Time) {
	if worker == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	key := sessionKey{tenant, worker}
	w := r.workers[key]
	if w == nil {
		if len(r.workers) >= seenWorkersMax {
			r.forgetLocked(now)
		}
		w = &seenWorker{firstSeen: now}
		r.workers[key] = w
	}
	w.lastSeen = now
	if len(queues) > 0 && !slices.Equal(w.queues, queues) {
		w.queues = slices.Clone(queues)
	}
}

// sawTokens records a call that carried tokens (Renew: possibly several
// workers' leases, though normally one).
func (r *seenWorkers) sawTokens(tenant string, toks []store.LeaseToken, now time.Time) {
	for i, t := range toks {
		if i > 0 && t.WorkerID == toks[i-1].WorkerID {
			continue
		}
		r.saw(tenant, t.WorkerID, nil, now)
	}
}

// forgetLocked drops the workers not seen within the window and, when the
// registry is still full, the least recently seen one; r.mu held.
func (r *seenWorkers) forgetLocked(now time.Time) {
	var oldest *sessionKey
	for k, w := range r.workers {
		if now.Sub(w.lastSeen) > r.window {
			delete(r.workers, k)
			continue
		}
		if oldest == nil || w.lastSeen.Before(r.workers[*oldest].lastSeen) {
			k := k
			oldest = &k
		}
	}
	if len(r.workers) >= seenWorkersMax && oldest != nil {
		delete(r.workers, *oldest)
	}
}

// count is the number of workers seen within the window.
func (r *seenWorkers) count(now time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, w := range r.workers {
		if now.Sub(w.lastSeen) <= r.window {
			n++
		}
	}
	return n
}

// list returns tenant's workers seen within the window, except those for
// which streaming reports true (they are listed with their stream), and
// forgets the ones seen before it.
func (r *seenWorkers) list(tenant string, now time.Time, coordinatorID string, streaming func(worker string) bool) []*leaseholdv1.WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*leaseholdv1.WorkerInfo
	for k, w := range r.workers {
		if now.Sub(w.lastSeen) > r.window {
			delete(r.workers, k)
			continue
		}
		if k.tenant != tenant || streaming(k.worker) {
			continue
		}
		out = append(out, &leaseholdv1.WorkerInfo{
			WorkerId:      k.worker,
			Queues:        slices.Clone(w.queues),
			ConnectedAt:   timestamppb.New(w.firstSeen),
			LastSeenAt:    timestamppb.New(w.lastSeen),
			CoordinatorId: coordinatorID,
			Transport:     leaseholdv1.WorkerTransport_WORKER_TRANSPORT_UNARY,
		})
	}
	return out
}

// sawWorker records a unary call of worker (and, from a Claim, its
// queues) in the last-seen registry that ListWorkers shows. The unary
// handlers call it once the request is valid.
func (c *Coordinator) sawWorker(tenant, worker string, queues ...string) {
	c.core.seen.saw(tenant, worker, queues, c.wallNow())
}

// sawTokens is sawWorker for the workers of a Renew's tokens.
func (c *Coordinator) sawTokens(tenant string, toks []store.LeaseToken) {
	c.core.seen.sawTokens(tenant, toks, c.wallNow())
}

// listWorkers is ListWorkers' answer: the streams open on this coordinator,
// then the unary workers it saw recently, sorted by worker id.
func (c *Coordinator) listWorkers(tenant string) []*leaseholdv1.WorkerInfo {
	now := c.wallNow()
	streams := c.workers(tenant)
	ids := make(map[string]bool, len(streams))
	for _, w := range streams {
		ids[w.GetWorkerId()] = true
		w.Transport = leaseholdv1.WorkerTransport_WORKER_TRANSPORT_STREAM
		w.LastSeenAt = timestamppb.New(now)
	}
	out := slices.Concat(streams, c.core.seen.list(tenant, now, c.cfg.ID, func(w string) bool { return ids[w] }))
	slices.SortFunc(out, func(a, b *leaseholdv1.WorkerInfo) int {
		switch {
		case a.GetWorkerId() < b.GetWorkerId():
			return -1
		case a.GetWorkerId() > b.GetWorkerId():
			return 1
		}
		return 0
	})
	return out
}
