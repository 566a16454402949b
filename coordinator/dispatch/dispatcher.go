package dispatch

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
	"github.com/leasehold/leasehold/store"
)

// Defaults of Config.
const (
	PollIntervalDefault    = time.Second
	PollMaxIntervalDefault = 5 * time.Second
	ConcurrencyDefault     = 4
	CreditsMaxDefault      = 10_000
	CooldownDefault        = 2 * time.Millisecond
	// releaseTimeout bounds the release of undeliverable leases.
	releaseTimeout = 5 * time.Second
	// resubscribeDelay is the pause before subscribing again to a notifier
	// whose subscription ended while the dispatcher still runs.
	resubscribeDelay = time.Second
	// subscribeWaitMax bounds how long the first round waits for the
	// notifier's first subscription (LISTEN connecting).
	subscribeWaitMax = 5 * time.Second
)

// Config configures a Dispatcher.
type Config struct {
	// Store claims and releases jobs. Required. When it implements
	// store.JobNotifier the dispatcher subscribes to it.
	Store store.Store
	// Logger; nil discards.
	Logger *slog.Logger
	// Now returns the time passed to the store; nil (or a zero result)
	// means the store's clock.
	Now func() time.Time
	// PollInterval is the first fallback poll interval. Default
	// PollIntervalDefault (1s).
	PollInterval time.Duration
	// PollMaxInterval caps the poll backoff. Default PollMaxIntervalDefault
	// (5s).
	PollMaxInterval time.Duration
	// Concurrency bounds the claims of one round in flight at once (one
	// per group of waiters). Default ConcurrencyDefault (4).
	Concurrency int
	// CreditsMax caps the credits one waiter may hold when it declares no
	// capacity. Default CreditsMaxDefault (10,000).
	CreditsMax int
	// Cooldown is the least time between a round that delivered leases and
	// the next round. While workers are busy their credits come back one
	// finished job at a time; without a pause each would cost a claim (a
	// statement and a commit) of its own, and small claims cost the
	// database more per job than large ones. With it, the credits of a
	// cooldown gather into one claim, as River's FetchCooldown does. An
	// idle dispatcher (the last round delivered nothing) does not wait, so
	// a job created while workers wait is still claimed at once. Default
	// CooldownDefault (2ms); negative: no cooldown.
	Cooldown time.Duration
	// Leased, when set, is told of every lease delivered (the lease
	// reaper uses it to wake at the earliest expiry).
	Leased func(jobs []store.ClaimedJob)
	// Round, when set, is told how long each round took and how many
	// leases it delivered (metrics).
	Round func(d time.Duration, delivered int)
}

// Waiter is a consumer of leases: a Connect stream or a unary Claim. Its
// exported fields are fixed once it is added.
type Waiter struct {
	Tenant        string
	Worker        string
	Queues        []string
	LeaseDuration time.Duration // 0: each queue's default
	// Capacity caps the credits the waiter holds at once; 0 means the
	// dispatcher's CreditsMax.
	Capacity int
	// OneShot waiters (unary Claims) are removed after their first
	// delivery.
	OneShot bool
	// Immediate one-shot waiters (a Claim that does not wait) are answered
	// by their first round even when it found nothing: Deliver gets an
	// empty slice, or Fail the store's error.
	Immediate bool
	Fail      func(error)
	// Deliver hands claimed jobs over. It must not block for long and must
	// not call back into the Dispatcher. It returns false when the waiter
	// can no longer take them; the dispatcher then releases them.
	Deliver func([]store.ClaimedJob) bool
	// Held, when set, is how many leases the waiter holds now: with its
	// credits, never more than Capacity.
	Held func() int
	// Room, when set, caps how many more leases the waiter may be pushed
	// now (a stream's room under its bound of unacknowledged leases);
	// call Ready when it grows from zero.
	Room func() int
	// Backlogged, when set, reports that the waiter is not taking what it
	// was sent (a stream whose pushes are not being read): no claim is
	// made for it meanwhile. Call Ready when it drains.
	Backlogged func() bool

	// Guarded by Dispatcher.mu.
	credits  int
	claiming bool
	woken    bool // a wake-up came while claiming: see afterClaim
	removed  bool
	group    string // tenant and sorted queues: waiters claimed together
}

// Dispatcher claims jobs on behalf of waiters. Start it, Stop it; Quiesce
// ends dispatching for good (shutdown).
type Dispatcher struct {
	cfg Config
	log *slog.Logger

	mu             sync.Mutex // guards the fields below
	waiters        map[*Waiter]struct{}
	pendingAll     bool
	pendingQueues  map[store.QueueRef]struct{}
	pendingWaiters map[*Waiter]struct{}
	quiesced       bool
	rotation       int // where the next capped round starts, for fairness

	quiesceCh chan struct{} // closed by Quiesce
	wake      chan struct{} // capacity 1: a pending wake-up, coalesced

	// subscribeWait is subscribeWaitMax (tests shorten it); listenLate is
	// set when rounds started before the first subscription was active.
	subscribeWait time.Duration
	listenLate    atomic.Bool

	lifecycle startstop.BaseStartStop
}

// New returns a Dispatcher; it does nothing until Start.
func New(cfg Config) *Dispatcher {
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.PollMaxInterval = max(cmp.Or(cfg.PollMaxInterval, PollMaxIntervalDefault), cfg.PollInterval)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.CreditsMax = cmp.Or(cfg.CreditsMax, CreditsMaxDefault)
	cfg.Cooldown = cmp.Or(cfg.Cooldown, CooldownDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Dispatcher{
		cfg:            cfg,
		log:            log,
		waiters:        make(map[*Waiter]struct{}),
		pendingQueues:  make(map[store.QueueRef]struct{}),
		pendingWaiters: make(map[*Waiter]struct{}),
		quiesceCh:      make(chan struct{}),
		wake:           make(chan struct{}, 1),
		subscribeWait:  subscribeWaitMax,
	}
}

// Start runs the dispatch loop (and the notifier subscription) until Stop
// or ctx ends. It returns at once; starting it while it runs is a no-op.
func (d *Dispatcher) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := d.lifecycle.StartInit(ctx)
	if !shouldStart {
		return
	}
	go func() {
		started()
		defer stopped()
		var wg sync.WaitGroup
		// The first round waits for the first subscription: a job created
		// before LISTEN is active notifies nobody, so a waiter whose
		// first claim ran before it could miss it until the next poll
		// (an hour, if so configured). Every round from the first on
		// claims after LISTEN is active, and anything created later is
		// notified.
		subscribed := make(chan struct{})
		if n, ok := d.cfg.Store.(store.JobNotifier); ok {
			wg.Go(func() { d.listen(ctx, n, subscribed) })
		} else {
			close(subscribed)
		}
		wg.Go(func() {
			t := time.NewTimer(d.subscribeWait)
			defer t.Stop()
			select {
			case <-subscribed:
			case <-t.C:
				// LISTEN is slow to come: dispatch without it, and have
				// listen wake every waiter once it is active.
				d.listenLate.Store(true)
			case <-ctx.Done():
				return
			}
			d.loop(ctx)
		})
		wg.Wait()
	}()
}

// Stop quiesces the dispatcher and waits for its loop to end. Safe to call
// twice, and before Start.
func (d *Dispatcher) Stop() {
	d.Quiesce()
	d.lifecycle.Stop()
}

// Quiesce stops handing out leases for good: no claim starts after it, and
// Quiesced is closed so long-polls return. Claims already in flight finish
// and deliver. Safe to call twice.
func (d *Dispatcher) Quiesce() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.quiesced {
		d.quiesced = true
		close(d.quiesceCh)
	}
}

// Quiesced is closed once Quiesce was called.
func (d *Dispatcher) Quiesced() <-chan struct{} { return d.quiesceCh }

// creditCap is the most credits w may hold: its capacity.
func (d *Dispatcher) creditCap(w *Waiter) int {
	if w.Capacity > 0 {
		return min(w.Capacity, d.cfg.CreditsMax)
	}
	return d.cfg.CreditsMax
}

// ask is how many leases a claim may bring w now: its credits, but never
// more than its capacity less the leases it holds. A credit granted while
// an earlier lease is still held (its report on the way) is kept for the
// round after the report, and never more than its Room. d.mu held (Held
// and Room take the waiter owner's lock, which is always taken after
// d.mu).
func (d *Dispatcher) ask(w *Waiter) int {
	n := min(w.credits, store.BatchMaxItems)
	if w.Held != nil && w.Capacity > 0 {
		n = min(n, w.Capacity-w.Held())
	}
	if w.Room != nil && n > 0 {
		n = min(n, w.Room())
	}
	return max(n, 0)
}

// Add registers w with credits and wakes the loop for it. It returns false
// (and registers nothing) once the dispatcher is quiesced.
func (d *Dispatcher) Add(w *Waiter, credits int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.quiesced {
		return false
	}
	qs := slices.Compact(slices.Sorted(slices.Values(w.Queues)))
	w.group = w.Tenant + "\x00" + strings.Join(qs, "\x00")
	d.waiters[w] = struct{}{}
	w.credits = min(max(credits, 0), d.creditCap(w))
	d.pendingWaiters[w] = struct{}{}
	d.signal()
	return true
}

// AddCredits grants w more credits (capped at its capacity) and wakes the
// loop for it.
func (d *Dispatcher) AddCredits(w *Waiter, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.removed {
		return
	}
	w.credits = min(w.credits+max(n, 0), d.creditCap(w))
	d.pendingWaiters[w] = struct{}{}
	d.signal()
}

// Ready wakes the loop for w: a backlogged waiter caught up.
func (d *Dispatcher) Ready(w *Waiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !w.removed {
		d.pendingWaiters[w] = struct{}{}
		d.signal()
	}
}

// Credits returns w's remaining credits.
func (d *Dispatcher) Credits(w *Waiter) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return w.credits
}

// Remove unregisters w. A claim in flight for it still completes; its
// Deliver is expected to refuse the jobs, which are then released.
func (d *Dispatcher) Remove(w *Waiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.remove(w)
}

func (d *Dispatcher) remove(w *Waiter) {
	delete(d.waiters, w)
	delete(d.pendingWaiters, w)
	w.removed = true
}

// Wake hints that queue of tenant may have available jobs.
func (d *Dispatcher) Wake(tenant, queue string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pendingQueues[store.QueueRef{Tenant: tenant, Queue: queue}] = struct{}{}
	d.signal()
}

// WakeAll makes the next round consider every waiter (as a poll does).
func (d *Dispatcher) WakeAll() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pendingAll = true
	d.signal()
}

// signal wakes the loop; d.mu held. The channel has capacity one, so any
// number of signals before the loop runs coalesce into one round.
func (d *Dispatcher) signal() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

func (d *Dispatcher) now() time.Time {
	if d.cfg.Now == nil {
		return time.Time{}
	}
	return d.cfg.Now()
}

func (d *Dispatcher) loop(ctx context.Context) {
	interval := d.cfg.PollInterval
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		polled := false
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-timer.C:
			polled = true
			d.mu.Lock()
			d.pendingAll = true
			d.mu.Unlock()
		}
		found := d.runOnce(ctx)
		if found > 0 && d.cfg.Cooldown > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d.cfg.Cooldown):
			}
		}
		// Back off while polls find nothing; anything found or any
		// explicit wake-up means activity, so poll promptly again.
		if polled && found == 0 {
			interval = min(interval*2, d.cfg.PollMaxInterval)
		} else if found > 0 || !polled {
			interval = d.cfg.PollInterval
		}
		if !polled && !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(interval)
	}
}

// group is the waiters of one round that share a tenant and queue set:
// one ClaimMany serves them all.
type group struct {
	tenant  string
	queues  []string
	waiters []*Waiter
}

// runOnce runs one dispatch round and returns how many leases it
// delivered: the woken waiters are grouped by tenant and queue set, and
// each group gets one claim for all of its credits.
func (d *Dispatcher) runOnce(ctx context.Context) int {
	start := time.Now()
	groups := d.takeRound()
	var (
		wg    sync.WaitGroup
		total int
		tmu   sync.Mutex
		sem   = make(chan struct{}, d.cfg.Concurrency)
	)
	for _, g := range groups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			n := d.claimFor(ctx, g)
			tmu.Lock()
			total += n
			tmu.Unlock()
		})
	}
	wg.Wait()
	if d.cfg.Round != nil && len(groups) > 0 {
		d.cfg.Round(time.Since(start), total)
	}
	return total
}

// takeRound picks the waiters a round claims for — woken, with credits, no
// claim in flight, not backlogged — marks them claiming and groups them.
// One claim hands out at most store.ClaimSlotsMax leases; waiters past
// that wait for the next round, which starts at once, and the starting
// point rotates so that no waiter is always last.
func (d *Dispatcher) takeRound() []*group {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.quiesced {
		return nil
	}
	all, queues, ws := d.pendingAll, d.pendingQueues, d.pendingWaiters
	d.pendingAll = false
	d.pendingQueues = make(map[store.QueueRef]struct{})
	d.pendingWaiters = make(map[*Waiter]struct{})
	var picked []*Waiter
	for w := range d.waiters {
		if w.credits <= 0 {
			continue
		}
		if _, named := ws[w]; all || named || matches(w, queues) {
			if w.claiming { // reserved for a create (Reserve)
				w.woken = true
				continue
			}
			if w.Backlogged != nil && w.Backlogged() {
				continue // Ready brings it back
			}
			picked = append(picked, w)
		}
	}
	// Map order is random; sort so that rotation means something.
	slices.SortFunc(picked, func(a, b *Waiter) int {
		return cmp.Or(strings.Compare(a.group, b.group), strings.Compare(a.Worker, b.Worker))
	})
	if n := len(picked); n > 0 {
		d.rotation = (d.rotation + 1) % n
		picked = append(picked[d.rotation:], picked[:d.rotation]...)
	}
	byKey := map[string]*group{}
	var out []*group
	slots := map[string]int{}
	for _, w := range picked {
		ask := d.ask(w)
		if ask == 0 {
			continue // at capacity: the end of a lease (Ready) brings it back
		}
		if slots[w.group]+ask > store.ClaimSlotsMax {
			d.pendingWaiters[w] = struct{}{}
			d.signal()
			continue
		}
		slots[w.group] += ask
		g := byKey[w.group]
		if g == nil {
			g = &group{tenant: w.Tenant, queues: w.Queues}
			byKey[w.group] = g
			out = append(out, g)
		}
		w.claiming = true
		g.waiters = append(g.waiters, w)
	}
	return out
}

func matches(w *Waiter, queues map[store.QueueRef]struct{}) bool {
	if len(queues) == 0 {
		return false
	}
	for _, q := range w.Queues {
		if _, ok := queues[store.QueueRef{Tenant: w.Tenant, Queue: q}]; ok {
			return true
		}
	}
	return false
}

// claimFor claims for one group and delivers. Waiters of a group that
// share a worker id (a stream and a unary Claim of the same worker) go in
// separate claims, since a lease names only its worker.
func (d *Dispatcher) claimFor(ctx context.Context, g *group) int {
	delivered := 0
	for layer := g.waiters; len(layer) > 0; {
		var this, next []*Waiter
		seen := map[string]bool{}
		for _, w := range layer {
			if seen[w.Worker] {
				next = append(next, w)
				continue
			}
			seen[w.Worker] = true
			this = append(this, w)
		}
		delivered += d.claimLayer(ctx, g, this)
		layer = next
	}
	return delivered
}

// claimLayer claims once for waiters with distinct worker ids.
func (d *Dispatcher) claimLayer(ctx context.Context, g *group, ws []*Waiter) int {
	asks := make([]store.ClaimWaiter, 0, len(ws))
	asked := map[*Waiter]int{}
	d.mu.Lock()
	for _, w := range ws {
		if n := d.ask(w); n > 0 {
			asks = append(asks, store.ClaimWaiter{Worker: w.Worker, Max: n, LeaseDuration: w.LeaseDuration})
			asked[w] = n
		}
	}
	d.mu.Unlock()
	var jobs []store.ClaimedJob
	var err error
	if len(asks) > 0 {
		jobs, err = d.cfg.Store.ClaimMany(ctx, store.ClaimManyParams{Tenant: g.tenant, Queues: g.queues, Waiters: asks, Now: d.now()})
		if err != nil && ctx.Err() == nil {
			d.log.Log(ctx, store.FailureLevel(err), "dispatch claim failed; the next wake-up or poll retries",
				slog.String("tenant", g.tenant), slog.Int("waiters", len(asks)), slog.String("error", err.Error()))
		}
	}
	byWorker := map[string][]store.ClaimedJob{}
	for _, j := range jobs {
		byWorker[j.Token.WorkerID] = append(byWorker[j.Token.WorkerID], j)
	}
	var undelivered []store.ClaimedJob
	delivered := 0
	for _, w := range ws {
		got := byWorker[w.Worker]
		if err != nil && w.Immediate && w.Fail != nil {
			w.Fail(err)
			d.mu.Lock()
			w.claiming = false
			d.remove(w)
			d.mu.Unlock()
			continue
		}
		d.spend(w, len(got))
		// Deliver outside d.mu: it takes the waiter owner's own lock.
		ok := true
		if len(got) > 0 || (w.Immediate && err == nil) {
			ok = w.Deliver(got)
		}
		d.mu.Lock()
		w.claiming = false
		switch {
		case !ok:
			w.credits += len(got) // never delivered: still the waiter's
			undelivered = append(undelivered, got...)
		case len(got) > 0 || w.Immediate:
			delivered += len(got)
			if w.OneShot {
				d.remove(w)
			} else if len(got) == asked[w] && w.credits > 0 && !w.removed {
				// A full share: more jobs may be waiting.
				d.pendingWaiters[w] = struct{}{}
				d.signal()
			}
		}
		d.mu.Unlock()
	}
	if len(undelivered) > 0 {
		d.release(ctx, g.tenant, undelivered)
	}
	if delivered > 0 && d.cfg.Leased != nil {
		d.cfg.Leased(jobs)
	}
	return delivered
}

// spend takes n leases off w's credits before they are delivered. Once
// Deliver has queued them the worker may run them and grant the freed
// capacity back (AddCredits) before the claiming goroutine takes d.mu
// again; spending after Deliver would add those grants on top of credits
// already used, and the capacity cap would throw the excess away for
// good: the stream would then be pushed fewer jobs than it has room for,
// ever after.
func (d *Dispatcher) spend(w *Waiter, n int) {
	if n == 0 {
		return
	}
	d.mu.Lock()
	w.credits -= n
	d.mu.Unlock()
}

// afterClaim wakes the next round for w when a wake-up came while it was
// reserved for a create, which no round could serve then. d.mu held.
func (d *Dispatcher) afterClaim(w *Waiter) {
	if w.woken && !w.removed && w.credits > 0 {
		d.pendingWaiters[w] = struct{}{}
		d.signal()
	}
	w.woken = false
}

// release gives back leases that could not be delivered, in one batch. It
// detaches from ctx (which may be ending with the shutdown that caused the
// refusal) because releasing now spares the jobs a full lease of waiting;
// a bounded timeout keeps shutdown from hanging on it. A lease that could
// not be released simply expires.
func (d *Dispatcher) release(ctx context.Context, tenant string, jobs []store.ClaimedJob) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	reports := make([]store.Report, len(jobs))
	for i, j := range jobs {
		reports[i] = store.Report{Kind: store.ReportRelease, Tenant: tenant, Token: j.Token, Now: d.now()}
	}
	if _, err := d.cfg.Store.ApplyReports(rctx, reports); err != nil {
		d.log.WarnContext(ctx, "release of undelivered leases failed; they will expire",
			slog.Int("leases", len(jobs)), slog.String("error", err.Error()))
	}
}

// listen forwards notifier wake-ups until ctx ends, subscribing again when
// a subscription ends early (e.g. the LISTEN connection dropped). It
// closes subscribed once the first subscription is active (or its attempt
// failed: polling is the fallback then). After a subscription that
// follows a dropped one, every waiter gets one round: notifications sent
// while nobody listened are lost, and the round claims after LISTEN is
// active again, so nothing created meanwhile waits for a poll.
func (d *Dispatcher) listen(ctx context.Context, n store.JobNotifier, subscribed chan struct{}) {
	first := true
	for ctx.Err() == nil {
		ch, err := n.SubscribeJobs(ctx)
		if first {
			first = false
			close(subscribed)
			if d.listenLate.Load() {
				d.WakeAll() // rounds ran before LISTEN was active
			}
		} else {
			d.WakeAll()
		}
		if err != nil {
			d.log.Log(ctx, store.FailureLevel(err), "job notifications unavailable; polling only until resubscribed",
				slog.String("error", err.Error()))
		} else {
			for ref := range ch {
				d.Wake(ref.Tenant, ref.Queue)
			}
		}
		t := time.NewTimer(resubscribeDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Waiters returns the registered waiters (for tests and introspection).
func (d *Dispatcher) Waiters() []*Waiter {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]*Waiter, 0, len(d.waiters))
	for w := range d.waiters {
		out = append(out, w)
	}
	return slices.Clip(out)
}
