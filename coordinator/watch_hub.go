package coordinator

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// watchHub wakes WatchJob streams when their job changes, and only then:
// each watcher subscribes to one job, and a change wakes that job's
// watchers. Changes come from two places: every write this coordinator
// makes (notify, called by the handlers, the dispatcher's deliveries and
// the reaper) and, when the store is a store.JobChangeNotifier
// (PostgreSQL), the changes made through every other coordinator (run).
// A watcher that is never woken costs a goroutine parked on a channel and
// nothing else: there is no polling.
//
// When the store's notifications may have been lost (the listener fell
// behind or reconnected) every watcher is woken once and reads again, so
// a change is late, never missed.
//
// The store sends changes only while some coordinator has announced
// watchers (store.JobChangeNotifier.AnnounceWatchers): the hub announces
// this coordinator before its first watcher reads (present) and keeps the
// announcement fresh while it has watchers, and withdraws it once it has
// none (run).
type watchHub struct {
	perConn, total int
	// notifier is the store's change feed; nil for a store without one.
	notifier store.JobChangeNotifier
	// id is this coordinator's id in the store's announcements.
	id string

	// presMu serialises announcements; it guards presentUntil, the time
	// until which the announcement made is certainly valid (zero: none).
	presMu       sync.Mutex
	presentUntil time.Time

	// mu guards jobs, conns and n.
	mu    sync.Mutex
	jobs  map[store.JobRef]map[*watcher]struct{}
	conns map[string]int
	n     int
}

// watcher is one WatchJob stream. wake holds at most one pending wake-up:
// the stream reads everything new when it wakes, so more would add
// nothing.
type watcher struct {
	job  store.JobRef
	conn string
	wake chan struct{}
}

func newWatchHub(perConn, total int, st store.Store, id string) *watchHub {
	h := &watchHub{perConn: perConn, total: total, id: id,
		jobs: make(map[store.JobRef]map[*watcher]struct{}), conns: make(map[string]int)}
	h.notifier, _ = st.(store.JobChangeNotifier)
	return h
}

// Presence: an announcement lasts presenceTTL and is renewed once less than
// half of it is left (run checks every presenceCheck), so a crashed
// coordinator's makes the store send changes for a minute at most.
const (
	presenceTTL   = time.Minute
	presenceCheck = 10 * time.Second
)

// present makes sure this coordinator's watchers are announced, so that
// changes are sent from now on; WatchJob calls it before its first read.
// It is a no-op for a store without a change feed, and costs a store write
// only when the announcement is missing or half spent.
func (h *watchHub) present(ctx context.Context) error {
	if h.notifier == nil {
		return nil
	}
	h.presMu.Lock()
	defer h.presMu.Unlock()
	if time.Until(h.presentUntil) > presenceTTL/2 {
		return nil
	}
	start := time.Now()
	if err := h.notifier.AnnounceWatchers(ctx, h.id, presenceTTL); err != nil {
		return err
	}
	lapsed := !h.presentUntil.IsZero() && start.After(h.presentUntil)
	h.presentUntil = start.Add(presenceTTL)
	if lapsed {
		// The announcement expired while watchers waited: changes made
		// meanwhile were not sent, so every watcher reads again.
		h.wakeAll()
	}
	return nil
}

// tendPresence renews the announcement while there are watchers and
// withdraws it once there are none.
func (h *watchHub) tendPresence(ctx context.Context, log *slog.Logger) {
	if h.notifier == nil {
		return
	}
	if h.count() > 0 {
		if err := h.present(ctx); err != nil && ctx.Err() == nil {
			log.Log(ctx, store.FailureLevel(err), "cannot renew the watch announcement; watchers may see changes late",
				slog.String("error", err.Error()))
		}
		return
	}
	h.presMu.Lock()
	defer h.presMu.Unlock()
	if h.presentUntil.IsZero() || h.count() > 0 {
		return
	}
	if err := h.notifier.WithdrawWatchers(ctx, h.id); err == nil {
		h.presentUntil = time.Time{}
	}
}

// errWatchLimit is returned by add when a cap is reached.
type errWatchLimit struct{ perConnection bool }

func (e errWatchLimit) Error() string {
	if e.perConnection {
		return "too many watchers on this connection"
	}
	return "too many watchers on this coordinator"
}

// add registers a watcher of job for the connection conn, unless that
// would pass a cap.
func (h *watchHub) add(job store.JobRef, conn string) (*watcher, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n >= h.total {
		return nil, errWatchLimit{}
	}
	if h.conns[conn] >= h.perConn {
		return nil, errWatchLimit{perConnection: true}
	}
	w := &watcher{job: job, conn: conn, wake: make(chan struct{}, 1)}
	ws := h.jobs[job]
	if ws == nil {
		ws = make(map[*watcher]struct{})
		h.jobs[job] = ws
	}
	ws[w] = struct{}{}
	h.conns[conn]++
	h.n++
	return w, nil
}

// remove unregisters w; it is safe once per watcher.
func (h *watchHub) remove(w *watcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ws := h.jobs[w.job]
	if _, ok := ws[w]; !ok {
		return
	}
	delete(ws, w)
	if len(ws) == 0 {
		delete(h.jobs, w.job)
	}
	if h.conns[w.conn]--; h.conns[w.conn] == 0 {
		delete(h.conns, w.conn)
	}
	h.n--
}

// count returns how many watchers are registered.
func (h *watchHub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// notify wakes the watchers of the jobs of tenant with these ids.
func (h *watchHub) notify(tenant string, ids ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, id := range ids {
		for w := range h.jobs[store.JobRef{Tenant: tenant, ID: id}] {
			w.poke()
		}
	}
}

// wakeAll wakes every watcher (changes may have been lost).
func (h *watchHub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.jobs {
		for w := range ws {
			w.poke()
		}
	}
}

func (w *watcher) poke() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// watchResubscribeDelay is how long run waits before subscribing again
// after the store's subscription failed or ended early.
const watchResubscribeDelay = time.Second

// run feeds the store's job changes to the hub and tends the watch
// announcement until ctx ends, then withdraws it. It returns at once for a
// store without a change feed.
func (h *watchHub) run(ctx context.Context, log *slog.Logger) {
	if h.notifier == nil {
		return
	}
	done := make(chan struct{})
	defer func() {
		<-done
		// Detached from ctx, which has ended, and bounded: the store closes
		// after this returns.
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = h.notifier.WithdrawWatchers(wctx, h.id) // a failure expires on its own
	}()
	go func() {
		defer close(done)
		t := time.NewTicker(presenceCheck)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				h.tendPresence(ctx, log)
			}
		}
	}()
	for ctx.Err() == nil {
		changes, err := h.notifier.SubscribeJobChanges(ctx)
		if err != nil {
			if ctx.Err() == nil {
				log.Log(ctx, store.FailureLevel(err), "cannot subscribe to job changes; watchers see changes made through other coordinators late",
					slog.String("error", err.Error()), slog.Duration("retry_in", watchResubscribeDelay))
			}
		} else {
			// A change made between two subscriptions may be missed.
			h.wakeAll()
			h.consume(ctx, changes)
		}
		t := time.NewTimer(watchResubscribeDelay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

// consume delivers one subscription's changes until it ends.
func (h *watchHub) consume(ctx context.Context, changes store.JobChanges) {
	for {
		select {
		case <-ctx.Done():
			return
		case ref, ok := <-changes.Jobs:
			if !ok {
				return
			}
			h.notify(ref.Tenant, ref.ID)
		case _, ok := <-changes.Lost:
			if !ok {
				return
			}
			h.wakeAll()
		}
	}
}
