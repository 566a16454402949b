package dispatch

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Defaults of Config.
const (
	PollIntervalDefault    = time.Second
	PollMaxIntervalDefault = 5 * time.Second
	ConcurrencyDefault     = 4
	CreditsMaxDefault      = 10_000
	// releaseTimeout bounds the release of an undeliverable lease.
	releaseTimeout = 5 * time.Second
	// resubscribeDelay is the pause before subscribing again to a notifier
	// whose subscription ended while the dispatcher still runs.
	resubscribeDelay = time.Second
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
	// Concurrency bounds the Claim calls of one round in flight at once.
	// Default ConcurrencyDefault (4).
	Concurrency int
	// CreditsMax caps the credits one waiter may hold. Default
	// CreditsMaxDefault (10,000).
	CreditsMax int
}

// Waiter is a consumer of leases: a Connect stream or a long-poll Claim.
// Its exported fields are fixed once it is added.
type Waiter struct {
	Tenant        string
	Worker        string
	Queues        []string
	LeaseDuration time.Duration // 0: each queue's default
	// OneShot waiters (long-poll Claims) are removed after their first
	// delivery.
	OneShot bool
	// Deliver hands claimed jobs over. It must not block for long and must
	// not call back into the Dispatcher. It returns false when the waiter
	// can no longer take them; the dispatcher then releases them.
	Deliver func([]store.ClaimedJob) bool

	// Guarded by Dispatcher.mu.
	credits  int
	claiming bool
	removed  bool
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

	quiesceCh chan struct{} // closed by Quiesce
	wake      chan struct{} // capacity 1: a pending wake-up, coalesced

	lifeMu sync.Mutex // guards cancel and done
	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a Dispatcher; it does nothing until Start.
func New(cfg Config) *Dispatcher {
	cfg.PollInterval = cmp.Or(cfg.PollInterval, PollIntervalDefault)
	cfg.PollMaxInterval = max(cmp.Or(cfg.PollMaxInterval, PollMaxIntervalDefault), cfg.PollInterval)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, ConcurrencyDefault)
	cfg.CreditsMax = cmp.Or(cfg.CreditsMax, CreditsMaxDefault)
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	return &Dispatcher{
		cfg:            cfg,
		log:            log,
		waiters:        make(map[*Waiter]struct{}),
		pendingQueues:  make(map[store.QueueRef]struct{}),
		pendingWaiters: make(map[*Waiter]struct{}),
		quiesceCh:      make(chan struct{}),
		wake:           make(chan struct{}, 1),
	}
}

// Start runs the dispatch loop (and the notifier subscription) until Stop
// or ctx ends. It returns at once; starting twice is a no-op.
func (d *Dispatcher) Start(ctx context.Context) {
	d.lifeMu.Lock()
	defer d.lifeMu.Unlock()
	if d.done != nil {
		return
	}
	ctx, d.cancel = context.WithCancel(ctx)
	d.done = make(chan struct{})
	var wg sync.WaitGroup
	if n, ok := d.cfg.Store.(store.JobNotifier); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d.listen(ctx, n)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.loop(ctx)
	}()
	go func() {
		wg.Wait()
		close(d.done)
	}()
}

// Stop quiesces the dispatcher and waits for its loop to end. Safe to call
// twice, and before Start.
func (d *Dispatcher) Stop() {
	d.Quiesce()
	d.lifeMu.Lock()
	cancel, done := d.cancel, d.done
	d.lifeMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
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

// Add registers w with credits and wakes the loop for it. It returns false
// (and registers nothing) once the dispatcher is quiesced.
func (d *Dispatcher) Add(w *Waiter, credits int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.quiesced {
		return false
	}
	d.waiters[w] = struct{}{}
	w.credits = min(max(credits, 0), d.cfg.CreditsMax)
	d.pendingWaiters[w] = struct{}{}
	d.signal()
	return true
}

// AddCredits grants w more credits (capped at CreditsMax) and wakes the
// loop for it.
func (d *Dispatcher) AddCredits(w *Waiter, n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if w.removed {
		return
	}
	w.credits = min(w.credits+max(n, 0), d.cfg.CreditsMax)
	d.pendingWaiters[w] = struct{}{}
	d.signal()
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

// runOnce runs one dispatch round and returns how many leases it
// delivered.
func (d *Dispatcher) runOnce(ctx context.Context) int {
	d.mu.Lock()
	if d.quiesced {
		d.mu.Unlock()
		return 0
	}
	all, queues, ws := d.pendingAll, d.pendingQueues, d.pendingWaiters
	d.pendingAll = false
	d.pendingQueues = make(map[store.QueueRef]struct{})
	d.pendingWaiters = make(map[*Waiter]struct{})
	var batch []*Waiter
	for w := range d.waiters {
		if w.credits <= 0 || w.claiming {
			continue
		}
		_, named := ws[w]
		if all || named || matches(w, queues) {
			w.claiming = true
			batch = append(batch, w)
		}
	}
	d.mu.Unlock()

	var (
		wg    sync.WaitGroup
		total int
		tmu   sync.Mutex
		sem   = make(chan struct{}, d.cfg.Concurrency)
	)
	for _, w := range batch {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			n := d.claimFor(ctx, w)
			tmu.Lock()
			total += n
			tmu.Unlock()
		}()
	}
	wg.Wait()
	return total
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

// claimFor claims for one waiter (w.claiming is set) and delivers.
func (d *Dispatcher) claimFor(ctx context.Context, w *Waiter) int {
	d.mu.Lock()
	n := min(w.credits, store.BatchMaxItems)
	d.mu.Unlock()
	jobs, err := d.cfg.Store.Claim(ctx, store.ClaimParams{
		Tenant: w.Tenant, Worker: w.Worker, Queues: w.Queues, Max: n,
		LeaseDuration: w.LeaseDuration, Now: d.now(),
	})
	if err != nil || len(jobs) == 0 {
		d.mu.Lock()
		w.claiming = false
		d.mu.Unlock()
		if err != nil && ctx.Err() == nil {
			d.log.WarnContext(ctx, "dispatch claim failed; the next wake-up or poll retries",
				slog.String("worker_id", w.Worker), slog.String("error", err.Error()))
		}
		return 0
	}
	// Deliver outside d.mu: it takes the waiter owner's own lock.
	ok := w.Deliver(jobs)
	d.mu.Lock()
	w.claiming = false
	if ok {
		w.credits -= len(jobs)
		switch {
		case w.OneShot:
			d.remove(w)
		case len(jobs) == n && w.credits > 0 && !w.removed:
			// A full batch: more jobs may be waiting.
			d.pendingWaiters[w] = struct{}{}
			d.signal()
		}
	}
	d.mu.Unlock()
	if !ok {
		d.release(ctx, w.Tenant, jobs)
		return 0
	}
	return len(jobs)
}

// release gives back leases that could not be delivered. It detaches from
// ctx (which may be ending with the shutdown that caused the refusal)
// because releasing now spares the job a full lease of waiting; a bounded
// timeout keeps shutdown from hanging on it.
func (d *Dispatcher) release(ctx context.Context, tenant string, jobs []store.ClaimedJob) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	for _, j := range jobs {
		_, err := d.cfg.Store.Release(rctx, store.ReleaseParams{Tenant: tenant, Token: j.Token, Now: d.now()})
		if err != nil && !errors.Is(err, store.ErrLeaseLost) {
			d.log.WarnContext(ctx, "release of an undelivered lease failed; it will expire",
				slog.String("job_id", j.Token.JobID), slog.String("error", err.Error()))
		}
	}
}

// listen forwards notifier wake-ups until ctx ends, subscribing again when
// a subscription ends early (e.g. the LISTEN connection dropped).
func (d *Dispatcher) listen(ctx context.Context, n store.JobNotifier) {
	for ctx.Err() == nil {
		ch, err := n.SubscribeJobs(ctx)
		if err != nil {
			d.log.WarnContext(ctx, "job notifications unavailable; polling only until resubscribed",
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
		// A dropped subscription may have missed notifications.
		d.WakeAll()
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
