package store

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ClaimSlotsMax bounds the jobs one ClaimMany may hand out (the sum of its
// waiters' Max).
const ClaimSlotsMax = 10_000

// ValidateClaimMany checks a ClaimManyParams.
func ValidateClaimMany(p ClaimManyParams) error {
	if err := ValidateTenant(p.Tenant); err != nil {
		return err
	}
	if len(p.Queues) == 0 || len(p.Queues) > QueuesMax {
		return Invalid("queues", fmt.Sprintf("must name 1-%d queues", QueuesMax))
	}
	for i, q := range p.Queues {
		if !ValidName(q) {
			return Invalid(fmt.Sprintf("queues[%d]", i), nameRule)
		}
	}
	if len(p.Waiters) == 0 {
		return Invalid("waiters", "must name at least one waiter")
	}
	total := 0
	for i, w := range p.Waiters {
		if !ValidWorkerID(w.Worker) {
			return Invalid(fmt.Sprintf("waiters[%d].worker_id", i), "must be 1-128 characters of [A-Za-z0-9._:@/-]")
		}
		if w.Max < 1 || w.Max > BatchMaxItems {
			return Invalid(fmt.Sprintf("waiters[%d].max_jobs", i), fmt.Sprintf("must be in [1, %d]", BatchMaxItems))
		}
		if err := ValidateLeaseDuration(fmt.Sprintf("waiters[%d].lease_duration", i), w.LeaseDuration, true); err != nil {
			return err
		}
		total += w.Max
	}
	if total > ClaimSlotsMax {
		return Invalid("waiters", fmt.Sprintf("must ask for at most %d jobs in all", ClaimSlotsMax))
	}
	return nil
}

// ClaimSlots decides who gets which job of a ClaimMany: element k is the
// index of the waiter that gets the k-th job in claim order. Every waiter
// has Max slots, interleaved by their position within its own share
// ((i+½)/Max), so that however few jobs there are, each waiter's part is
// in proportion to what it asked for: with 40 and 10 credits, the first
// five jobs go 4 and 1.
func ClaimSlots(ws []ClaimWaiter) []int {
	type slot struct {
		at float64
		w  int
	}
	var slots []slot
	for w, x := range ws {
		for i := range x.Max {
			slots = append(slots, slot{at: (float64(i) + 0.5) / float64(x.Max), w: w})
		}
	}
	slices.SortStableFunc(slots, func(a, b slot) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.w, b.w)) })
	out := make([]int, len(slots))
	for i, s := range slots {
		out[i] = s.w
	}
	return out
}

// PolicyTTLDefault is how long a cached queue policy is trusted before it
// is read again, in case an invalidation from another coordinator was
// missed.
const PolicyTTLDefault = 5 * time.Second

// PolicyCache keeps queue policies in memory for the hot paths (claims,
// renewals, retry decisions), so that they cost no query. Writes through
// this store invalidate at once; engines invalidate on notice of another
// coordinator's write (PostgreSQL NOTIFY) and entries expire after the TTL
// as a safety net.
type PolicyCache struct {
	// Load reads the effective policies of queues (defaults for queues
	// with none stored).
	Load func(ctx context.Context, queues []QueueRef) (map[QueueRef]QueuePolicy, error)
	// TTL; zero means PolicyTTLDefault.
	TTL time.Duration
	// Clock; nil means time.Now.
	Clock func() time.Time

	mu  sync.Mutex // guards m and gen
	m   map[QueueRef]cachedPolicy
	gen uint64 // bumped by every invalidation
}

type cachedPolicy struct {
	p       QueuePolicy
	expires time.Time
}

func (c *PolicyCache) now() time.Time {
	if c.Clock != nil {
		return c.Clock()
	}
	return time.Now()
}

// Get returns the policies of queues, loading the missing or stale ones in
// one call of Load.
func (c *PolicyCache) Get(ctx context.Context, queues []QueueRef) (map[QueueRef]QueuePolicy, error) {
	now := c.now()
	out := make(map[QueueRef]QueuePolicy, len(queues))
	var missing []QueueRef
	c.mu.Lock()
	gen := c.gen
	for _, q := range queues {
		if e, ok := c.m[q]; ok && now.Before(e.expires) {
			out[q] = e.p
		} else {
			missing = append(missing, q)
		}
	}
	c.mu.Unlock()
	if len(missing) == 0 {
		return out, nil
	}
	loaded, err := c.Load(ctx, missing)
	if err != nil {
		return nil, err
	}
	expires := now.Add(cmp.Or(c.TTL, PolicyTTLDefault))
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[QueueRef]cachedPolicy{}
	}
	// A policy invalidated while it loaded may be the old one: answer
	// with it, but do not keep it.
	keep := c.gen == gen
	for _, q := range missing {
		p, ok := loaded[q]
		if !ok {
			p = DefaultQueuePolicy(q.Queue)
		}
		if keep {
			c.m[q] = cachedPolicy{p: p, expires: expires}
		}
		out[q] = p
	}
	return out, nil
}

// Invalidate forgets the policy of q.
func (c *PolicyCache) Invalidate(q QueueRef) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	delete(c.m, q)
}

// InvalidateAll forgets every policy (e.g. after notifications may have
// been missed).
func (c *PolicyCache) InvalidateAll() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	clear(c.m)
}
