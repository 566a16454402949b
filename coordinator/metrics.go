package coordinator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/leasehold/leasehold/store"
)

// QueueMetricsIntervalDefault is how old the queue gauges may get: a
// collection (a Prometheus scrape, an OTLP push) younger than this reuses
// the last store reading instead of querying again. It is short, so that
// a scrape shows the database as it is (within one scrape interval), and
// long enough that several readers scraping at once cost one query.
const QueueMetricsIntervalDefault = time.Second

// queueMetricsTimeout bounds the store query behind the queue gauges, so
// that a slow database cannot hold a scrape past Prometheus' own timeout.
const queueMetricsTimeout = 3 * time.Second

// meterName is the instrumentation scope of the coordinator's metrics.
const meterName = "github.com/leasehold/leasehold/coordinator"

// Bucket boundaries, explicit so that the dashboards' quantiles have
// resolution where these values live.
var (
	// secondsBuckets spans a SQLite commit (sub-millisecond) to a stuck
	// PostgreSQL one.
	secondsBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	// batchBuckets spans one report to groupcommit.MaxBatchDefault.
	batchBuckets = []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
)

// Breaker states, the values of BreakerState's gauge.
const (
	BreakerClosed   = "closed"
	BreakerHalfOpen = "half_open"
	BreakerOpen     = "open"
)

// Metrics is the coordinator's metric recorder: the instruments behind
// /metrics (and OTLP metric export), with typed methods for the places
// that record them. Job and lease counters are recorded by the coordinator
// itself; the hooks inside the store's group committer and the dispatcher
// (CommitBatch, DispatchRound) and the future breakers and limits
// (BreakerState, RateLimited, Shed) are methods so those components can be
// handed this recorder, or a function value of one method, without
// importing OpenTelemetry. A nil *Metrics records nothing, so components
// may hold one unconditionally.
//
// No instrument has a per-job label: labels are tenant, queue, outcome,
// operation and method, all bounded.
//
// Create it with NewMetrics before the store (whose committer reports into
// it) and pass it as Config.Metrics; New creates one when none is given.
// It is meant for one coordinator: New registers the coordinator's gauges
// on it.
type Metrics struct {
	meter metric.Meter

	created  metric.Int64Counter
	claimed  metric.Int64Counter
	finished metric.Int64Counter

	commitItems    metric.Int64Histogram
	commitDuration metric.Float64Histogram
	dispatchRound  metric.Float64Histogram
	dispatchLeases metric.Int64Counter

	breakerState       metric.Int64Gauge
	breakerTransitions metric.Int64Counter
	limited            metric.Int64Counter

	queueMetricsErrors metric.Int64Counter

	scheduleTicks metric.Int64Counter
	scheduleLag   metric.Float64Histogram

	uniqueConflicts metric.Int64Counter

	operationsRunning metric.Int64UpDownCounter
	operationRows     metric.Int64Counter
	operationRate     metric.Float64Gauge
}

// NewMetrics creates the instruments on mp (nil: otel's global
// MeterProvider, a no-op unless one was installed).
func NewMetrics(mp metric.MeterProvider) (*Metrics, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := &Metrics{meter: mp.Meter(meterName)}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := m.meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.created = counter("leasehold.jobs.created", "{job}",
		"Jobs created through this coordinator (idempotent replays excluded), by tenant and queue.")
	m.claimed = counter("leasehold.jobs.claimed", "{job}",
		"Leases granted by this coordinator (unary Claim and stream pushes), by tenant and queue.")
	m.finished = counter("leasehold.jobs.finished", "{job}",
		"Jobs that left their lease or queue through this coordinator (a worker's report, a client's cancel of a queued job), "+
			"by tenant, queue and outcome: succeeded, requeued (a retry with budget left, or a release), failed, dead, cancelled.")
	m.dispatchLeases = counter("leasehold.dispatch.leases", "{lease}", "Leases claimed by dispatch rounds.")
	m.breakerTransitions = counter("leasehold.breaker.transitions", "{transition}",
		"Circuit breaker transitions, by tenant, dependency and the state entered.")
	m.limited = counter("leasehold.rpc.limited", "{call}",
		"Calls refused before they did anything, by method and reason: rate_limited (a caller over its rate), shed (the coordinator over its capacity) or watch_limit (a watcher cap).")
	m.queueMetricsErrors = counter("leasehold.queue.metrics.errors", "{error}",
		"Failed store readings of the queue gauges (the gauges are absent until the next success).")

	m.scheduleTicks = counter("leasehold.schedule.ticks", "{tick}",
		"Schedule ticks handled by this coordinator, by tenant, queue and outcome: fired (a job created), skipped (the overlap policy) or missed (late beyond the misfire grace, per the catch-up policy).")

	m.uniqueConflicts = counter("leasehold.jobs.unique.conflicts", "{request}",
		"Unique creates whose key another job held, by tenant, queue and outcome: duplicate (the holder was answered) or refused (the request asked to fail).")

	m.operationRows = counter("leasehold.operations.rows", "{job}",
		"Jobs handled by the bulk operations this coordinator ran, by tenant, kind and result: acted, skipped_changed, skipped_out_of_scope or failed.")

	var err error
	m.operationsRunning, err = m.meter.Int64UpDownCounter("leasehold.operations.running", metric.WithUnit("{operation}"),
		metric.WithDescription("Bulk operations this coordinator is working on now."))
	errs = append(errs, err)
	m.operationRate, err = m.meter.Float64Gauge("leasehold.operations.rows.rate", metric.WithUnit("{job}/s"),
		metric.WithDescription("Jobs per second of the newest chunk of a bulk operation (pauses included), by tenant and kind."))
	errs = append(errs, err)
	m.scheduleLag, err = m.meter.Float64Histogram("leasehold.schedule.tick.lag", metric.WithUnit("s"),
		metric.WithDescription("From a tick's due time to the commit of its job, by tenant and queue."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	errs = append(errs, err)
	m.commitItems, err = m.meter.Int64Histogram("leasehold.store.commit.batch.size", metric.WithUnit("{item}"),
		metric.WithDescription("Items (reports) applied by one group commit, by operation."),
		metric.WithExplicitBucketBoundaries(batchBuckets...))
	errs = append(errs, err)
	m.commitDuration, err = m.meter.Float64Histogram("leasehold.store.commit.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one group commit (the batch's transaction), by operation and result."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	errs = append(errs, err)
	m.dispatchRound, err = m.meter.Float64Histogram("leasehold.dispatch.round.duration", metric.WithUnit("s"),
		metric.WithDescription("Duration of one dispatch round: the claim for every waiting stream and long-poll, and the deliveries."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	errs = append(errs, err)
	m.breakerState, err = m.meter.Int64Gauge("leasehold.breaker.state",
		metric.WithDescription("Circuit breaker state by tenant and dependency: 0 closed, 1 half-open, 2 open."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("coordinator metrics: %w", err)
	}
	return m, nil
}

// jobCreated counts created jobs (not replays) of one queue.
func (m *Metrics) jobCreated(ctx context.Context, tenant, queue string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.created.Add(ctx, int64(n), metric.WithAttributes(attrTenant(tenant), attrQueue(queue)))
}

// uniqueConflict counts unique creates of one queue whose key was held:
// outcome "duplicate" (answered the holder) or "refused" (failed).
func (m *Metrics) uniqueConflict(ctx context.Context, tenant, queue, outcome string, n int) {
	if m == nil || n == 0 {
		return
	}
	m.uniqueConflicts.Add(ctx, int64(n), metric.WithAttributes(attrTenant(tenant), attrQueue(queue), attribute.String("outcome", outcome)))
}

// leaseGranted counts one lease handed to a worker.
func (m *Metrics) leaseGranted(ctx context.Context, tenant, queue string) {
	if m == nil {
		return
	}
	m.claimed.Add(ctx, 1, labels(tenant, queue, ""))
}

// outcomes are the outcome labels of leasehold.jobs.finished, by the state
// a report left the job in. A job back in QUEUED was retried with budget
// left or released: the store's answer does not tell the two apart.
var outcomes = map[store.JobState]string{
	store.JobStateSucceeded: "succeeded",
	store.JobStateQueued:    "requeued",
	store.JobStateFailed:    "failed",
	store.JobStateDead:      "dead",
	store.JobStateCancelled: "cancelled",
}

// jobEnded counts a job a report (or a client's cancel) moved, by its new
// state. Jobs the store dead-letters or cancels itself when their lease
// expired (inside a claim) are not counted here; the queue gauges show
// them.
func (m *Metrics) jobEnded(ctx context.Context, tenant string, job *store.Job) {
	outcome, ok := outcomes[job.State]
	if m == nil || !ok {
		return
	}
	m.finished.Add(ctx, 1, labels(tenant, job.Queue, outcome))
}

// CommitBatch records one group commit of the store: its operation (e.g.
// "reports"), how many items it applied, how long the flush took and how
// it ended. It has the shape of groupcommit.Config.Observe plus the
// operation, so an engine wires it as
//
//	Observe: func(n int, d time.Duration, err error) { m.CommitBatch("reports", n, d, err) }
func (m *Metrics) CommitBatch(op string, items int, d time.Duration, err error) {
	if m == nil {
		return
	}
	ctx := context.Background()
	m.commitItems.Record(ctx, int64(items), metric.WithAttributes(attribute.String("op", op)))
	m.commitDuration.Record(ctx, d.Seconds(), metric.WithAttributes(attribute.String("op", op), attrResult(err)))
}

// DispatchRound records one dispatch round: how long it took and how many
// leases it claimed (zero for a round that found nothing).
func (m *Metrics) DispatchRound(d time.Duration, claimed int) {
	if m == nil {
		return
	}
	ctx := context.Background()
	m.dispatchRound.Record(ctx, d.Seconds())
	if claimed > 0 {
		m.dispatchLeases.Add(ctx, int64(claimed))
	}
}

// BreakerState records that the breaker of (tenant, dependency) entered
// state (BreakerClosed, BreakerHalfOpen or BreakerOpen): the state gauge
// and a transition. Unknown states are ignored.
func (m *Metrics) BreakerState(tenant, dependency, state string) {
	value, ok := map[string]int64{BreakerClosed: 0, BreakerHalfOpen: 1, BreakerOpen: 2}[state]
	if m == nil || !ok {
		return
	}
	ctx := context.Background()
	attrs := []attribute.KeyValue{attrTenant(tenant), attribute.String("dependency", dependency)}
	m.breakerState.Record(ctx, value, metric.WithAttributes(attrs...))
	m.breakerTransitions.Add(ctx, 1, metric.WithAttributes(append(attrs, attribute.String("state", state))...))
}

// RateLimited counts a call refused because its caller (of tenant) is
// over its rate (RESOURCE_EXHAUSTED, RATE_LIMITED). method is the full gRPC
// method name. The refusal is also in the Warn summary of its interval
// (overloadReporter).
func (m *Metrics) RateLimited(ctx context.Context, tenant, method string) {
	if m == nil {
		return
	}
	m.limited.Add(ctx, 1, metric.WithAttributes(attrTenant(tenant),
		attribute.String("rpc.method", method), attribute.String("reason", "rate_limited")))
}

// Shed counts a call refused because the coordinator is over capacity
// (UNAVAILABLE, OVERLOADED, to be retried). It is in the Warn summary too.
func (m *Metrics) Shed(ctx context.Context, method string) {
	if m == nil {
		return
	}
	m.limited.Add(ctx, 1, metric.WithAttributes(
		attribute.String("rpc.method", method), attribute.String("reason", "shed")))
}

// WatchLimited counts a WatchJob refused by a watcher cap
// (RESOURCE_EXHAUSTED, WATCH_LIMIT).
func (m *Metrics) WatchLimited(ctx context.Context, tenant, method string) {
	if m == nil {
		return
	}
	m.limited.Add(ctx, 1, metric.WithAttributes(attrTenant(tenant),
		attribute.String("rpc.method", method), attribute.String("reason", "watch_limit")))
}

func attrTenant(t string) attribute.KeyValue { return attribute.String("tenant", t) }
func attrQueue(q string) attribute.KeyValue  { return attribute.String("queue", q) }

func attrResult(err error) attribute.KeyValue {
	if err != nil {
		return attribute.String("result", "error")
	}
	return attribute.String("result", "ok")
}

// observeCoordinator registers the gauges read from c: the queues' live
// jobs (one cached store query for all queues) and this coordinator's
// streams, held leases and recently seen unary workers.
func (m *Metrics) observeCoordinator(c *Coordinator) error {
	var errs []error
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := m.meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	jobs := gauge("leasehold.queue.jobs", "{job}",
		"Live jobs by tenant, queue and state: queued (due or scheduled), leased (expired leases included), dead (the dead-letter queue, abandoned jobs excluded).")
	available := gauge("leasehold.queue.available", "{job}", "Queued jobs that are due now, by tenant and queue.")
	expired := gauge("leasehold.queue.leases.expired", "{lease}",
		"Leased jobs whose lease has expired and that no claim has taken back yet, by tenant and queue.")
	streams := gauge("leasehold.worker.streams", "{stream}", "Worker Connect streams open on this coordinator.")
	held := gauge("leasehold.worker.stream.leases", "{lease}", "Leases held through the worker streams open on this coordinator.")
	unary := gauge("leasehold.worker.unary", "{worker}",
		"Workers without a stream that called this coordinator within the last WorkerSeenWindow.")
	lag, err := m.meter.Float64ObservableGauge("leasehold.queue.lag", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest due job (how long it has been available), by tenant and queue; 0 when none is due."))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("coordinator gauges: %w", err)
	}
	_, err = m.meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		nStreams, nHeld := c.streamCounts()
		o.ObserveInt64(streams, int64(nStreams))
		o.ObserveInt64(held, int64(nHeld))
		o.ObserveInt64(unary, int64(c.core.seen.count(c.wallNow())))
		snap, err := c.probes.queueGauges.read(ctx, c)
		if err != nil {
			m.queueMetricsErrors.Add(ctx, 1)
			// No gauges rather than stale ones: an absent series is what
			// alerts can see.
			return nil
		}
		for _, q := range snap.Queues {
			tq := metric.WithAttributes(attrTenant(q.Tenant), attrQueue(q.Queue))
			o.ObserveInt64(jobs, q.Queued, metric.WithAttributes(attrTenant(q.Tenant), attrQueue(q.Queue), attribute.String("state", "queued")))
			o.ObserveInt64(jobs, q.Leased, metric.WithAttributes(attrTenant(q.Tenant), attrQueue(q.Queue), attribute.String("state", "leased")))
			o.ObserveInt64(jobs, q.Dead, metric.WithAttributes(attrTenant(q.Tenant), attrQueue(q.Queue), attribute.String("state", "dead")))
			o.ObserveInt64(available, q.Available, tq)
			o.ObserveInt64(expired, q.LeasesExpired, tq)
			o.ObserveFloat64(lag, q.OldestAvailableAge.Seconds(), tq)
		}
		return nil
	}, jobs, available, expired, streams, held, unary, lag)
	return err
}

// streamCounts is the number of open worker streams and the leases held
// through them.
func (c *Coordinator) streamCounts() (streams, leases int) {
	sessions := c.core.streams.list("", false)
	for _, s := range sessions {
		leases += s.held()
	}
	return len(sessions), leases
}

// queueGauges caches the store's queue metrics: every collection within
// interval of the last reading reuses it, so that several readers
// (Prometheus, OTLP) and frequent scrapes cost one query per interval.
type queueGauges struct {
	interval time.Duration

	mu   sync.Mutex // guards the fields below; held during a reading, so concurrent collections share it
	at   time.Time  // when the last reading was attempted (zero: never)
	snap *store.QueueMetricsSnapshot
	err  error
}

// read returns the cached reading, refreshing it first when it is older
// than the interval.
func (g *queueGauges) read(ctx context.Context, c *Coordinator) (*store.QueueMetricsSnapshot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.at.IsZero() && now.Sub(g.at) < g.interval {
		return g.snap, g.err
	}
	ctx, cancel := context.WithTimeout(ctx, queueMetricsTimeout)
	defer cancel()
	g.at = now
	g.snap, g.err = c.store.QueueMetrics(ctx, store.QueueMetricsParams{Now: c.now()})
	return g.snap, g.err
}

// setUpMetrics takes Config.Metrics (or creates the recorder) and
// registers the coordinator's gauges on it.
func (c *Coordinator) setUpMetrics() error {
	m := c.cfg.Metrics
	if m == nil {
		var err error
		if m, err = NewMetrics(c.cfg.MeterProvider); err != nil {
			return err
		}
	}
	c.core.metrics = m
	return m.observeCoordinator(c)
}

// BreakerTransition implements store.BreakerObserver: the store reports
// every committed breaker transition, whichever coordinator's report,
// probe or operator made it here.
func (m *Metrics) BreakerTransition(tenant, dependency string, state store.BreakerState) {
	m.BreakerState(tenant, dependency, string(state))
}

// scheduleTicked counts a schedule's ticks of one outcome.
func (m *Metrics) scheduleTicked(ctx context.Context, tenant, queue, outcome string, n int64) {
	if m == nil || n == 0 {
		return
	}
	m.scheduleTicks.Add(ctx, n, metric.WithAttributes(attrTenant(tenant), attrQueue(queue), attribute.String("outcome", outcome)))
}

// scheduleTickLag records how late a tick's job committed.
func (m *Metrics) scheduleTickLag(ctx context.Context, tenant, queue string, lag time.Duration) {
	if m == nil {
		return
	}
	m.scheduleLag.Record(ctx, max(0, lag.Seconds()), metric.WithAttributes(attrTenant(tenant), attrQueue(queue)))
}

// operationRunning counts an operation this coordinator starts (+1) or
// stops (-1) working on.
func (m *Metrics) operationRunning(delta int) {
	if m == nil {
		return
	}
	m.operationsRunning.Add(context.Background(), int64(delta))
}

// operationChunk records one committed chunk of a bulk operation: its
// rows by result, and its rate over since (the previous chunk's end).
func (m *Metrics) operationChunk(ctx context.Context, tenant, kind string, rows store.OperationCounts, rate float64) {
	if m == nil {
		return
	}
	for _, r := range []struct {
		result string
		n      int64
	}{{"acted", rows.Acted}, {"skipped_changed", rows.SkippedChanged}, {"skipped_out_of_scope", rows.SkippedOutOfScope}, {"failed", rows.Failed}} {
		if r.n > 0 {
			m.operationRows.Add(ctx, r.n, metric.WithAttributes(attrTenant(tenant), attribute.String("kind", kind), attribute.String("result", r.result)))
		}
	}
	m.operationRate.Record(ctx, rate, metric.WithAttributes(attrTenant(tenant), attribute.String("kind", kind)))
}
