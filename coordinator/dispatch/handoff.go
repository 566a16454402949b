package dispatch

import (
	"context"
	"maps"
	"slices"

	"github.com/leasehold/leasehold/store"
)

// Reservation is credits of waiting workers set aside for a create's own
// transaction (store.HandoffCreator): the create leases its new jobs to
// them before it commits, and Finish delivers the leases, so a job created
// while workers wait starts after one commit and no dispatch round.
//
// While reserved, a waiter is claiming: no round claims for it. Every
// Reserve must be followed by one Finish.
type Reservation struct {
	d      *Dispatcher
	tenant string
	claims []reservedClaim
}

type reservedClaim struct {
	queue   string
	waiters []*Waiter
	asks    []store.ClaimWaiter
}

// Reserve sets aside, for each queue of tenant with jobs about to be
// created (want: queue → jobs), waiters that take the queue and could be
// claimed for now: one per worker id (a lease names its worker), none
// that is claiming, backlogged, without room or answered by its first
// round (Immediate). Each queue's jobs are shared as a round's claim for
// all of those waiters would share them (store.ClaimSlots); waiters are
// visited in map order, so ties fall to a different waiter each time. It
// returns nil when there is no such waiter or the dispatcher is quiesced.
func (d *Dispatcher) Reserve(tenant string, want map[string]int) *Reservation {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.quiesced || len(want) == 0 {
		return nil
	}
	r := &Reservation{d: d, tenant: tenant}
	for _, q := range slices.Sorted(maps.Keys(want)) {
		var (
			ws   []*Waiter
			asks []store.ClaimWaiter
		)
		workers := map[string]bool{}
		for w := range d.waiters {
			if w.Tenant != tenant || w.claiming || w.Immediate || w.credits <= 0 || workers[w.Worker] || !slices.Contains(w.Queues, q) {
				continue
			}
			if w.Backlogged != nil && w.Backlogged() {
				continue
			}
			if n := d.ask(w); n > 0 {
				workers[w.Worker] = true
				ws = append(ws, w)
				asks = append(asks, store.ClaimWaiter{Worker: w.Worker, Max: n, LeaseDuration: w.LeaseDuration})
			}
		}
		// The first jobs of a claim for all of them, as the claim would
		// share them out.
		shares := make([]int, len(ws))
		slots := store.ClaimSlots(asks)
		for _, i := range slots[:min(want[q], len(slots))] {
			shares[i]++
		}
		c := reservedClaim{queue: q}
		for i, w := range ws {
			if shares[i] > 0 {
				w.claiming = true
				c.waiters = append(c.waiters, w)
				c.asks = append(c.asks, store.ClaimWaiter{Worker: w.Worker, Max: shares[i], LeaseDuration: w.LeaseDuration})
			}
		}
		if len(c.waiters) > 0 {
			r.claims = append(r.claims, c)
		}
	}
	if len(r.claims) == 0 {
		return nil
	}
	return r
}

// Claims are the reservation's claims for CreateJobsHandoff, one per queue.
func (r *Reservation) Claims() []store.ClaimManyParams {
	if r == nil {
		return nil
	}
	out := make([]store.ClaimManyParams, len(r.claims))
	for i, c := range r.claims {
		out[i] = store.ClaimManyParams{Tenant: r.tenant, Queues: []string{c.queue}, Waiters: c.asks, Now: r.d.now()}
	}
	return out
}

// Finish hands the leases the create's claims made (none when the create
// failed) to their waiters, as a round does, releases those a waiter can
// no longer take, and frees the waiters for rounds again. It returns how
// many leases each queue delivered. Safe on a nil Reservation.
func (r *Reservation) Finish(ctx context.Context, jobs []store.ClaimedJob) map[string]int {
	if r == nil {
		return nil
	}
	d := r.d
	type key struct{ queue, worker string }
	got := map[key][]store.ClaimedJob{}
	for _, j := range jobs {
		k := key{j.Job.Queue, j.Token.WorkerID}
		got[k] = append(got[k], j)
	}
	delivered := map[string]int{}
	var undelivered []store.ClaimedJob
	for _, c := range r.claims {
		for _, w := range c.waiters {
			js := got[key{c.queue, w.Worker}]
			d.spend(w, len(js))
			ok := len(js) == 0 || w.Deliver(js) // outside d.mu: it takes the waiter owner's lock
			d.mu.Lock()
			w.claiming = false
			switch {
			case !ok:
				w.credits += len(js) // never delivered: still the waiter's
				undelivered = append(undelivered, js...)
			case len(js) > 0:
				delivered[c.queue] += len(js)
				if w.OneShot {
					d.remove(w)
				}
			}
			d.afterClaim(w)
			d.mu.Unlock()
		}
	}
	if len(undelivered) > 0 {
		d.release(ctx, r.tenant, undelivered)
	}
	if len(jobs) > len(undelivered) && d.cfg.Leased != nil {
		d.cfg.Leased(jobs)
	}
	return delivered
}
