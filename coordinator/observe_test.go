package coordinator

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// outageStore is a real SQLite store whose clock (the readiness probe)
// fails while down is set, and which counts QueueMetrics calls.
type outageStore struct {
	store.Store
	down         atomic.Bool
	metricsReads atomic.Int64
}

var errOutage = errors.New("injected outage: connection refused")

func (s *outageStore) Now(ctx context.Context) (time.Time, error) {
	if s.down.Load() {
		return time.Time{}, errOutage
	}
	return s.Store.Now(ctx)
}

func (s *outageStore) QueueMetrics(ctx context.Context, p store.QueueMetricsParams) (*store.QueueMetricsSnapshot, error) {
	s.metricsReads.Add(1)
	if s.down.Load() {
		return nil, errOutage
	}
	return s.Store.QueueMetrics(ctx, p)
}

// observed is a coordinator (not serving) over an outageStore with its
// metrics in a manual reader and its spans in a recorder.
type observed struct {
	c      *Coordinator
	st     *outageStore
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	logs   *testlog.Buffer
}

func newObserved(t *testing.T) *observed {
	t.Helper()
	return newObservedWith(t, nil)
}

// newObservedWith is newObserved with a last say on the config.
func newObservedWith(t *testing.T, configure func(*Config)) *observed {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "leasehold.db")})
	if err != nil {
		t.Fatal(err)
	}
	o := &observed{st: &outageStore{Store: st}, reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder(), logs: &testlog.Buffer{}}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.reader))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(o.spans))
	cfg := Config{
		Store: o.st, Logger: o.logs.Logger(slog.LevelDebug), MeterProvider: mp, TracerProvider: tp,
		QueueMetricsInterval: time.Hour, // a reading is reused until the test says otherwise
	}
	if configure != nil {
		configure(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o.c = c
	// Served, so that the dispatcher answers unary claims.
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(lis) }()
	t.Cleanup(func() {
		if err := c.Shutdown(context.Background()); err != nil {
			t.Error(err)
		}
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return o
}

// collect reads every metric, keyed by name.
func (o *observed) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := o.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// point is the value of the data point of metric name whose attributes
// include want; ok is false when there is none.
func point(ms map[string]metricdata.Metrics, name string, want ...attribute.KeyValue) (v float64, ok bool) {
	match := func(set attribute.Set) bool {
		for _, kv := range want {
			if got, has := set.Value(kv.Key); !has || got != kv.Value {
				return false
			}
		}
		return true
	}
	switch d := ms[name].Data.(type) {
	case metricdata.Sum[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				return float64(p.Value), true
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				return float64(p.Value), true
			}
		}
	case metricdata.Gauge[float64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				return p.Value, true
			}
		}
	case metricdata.Histogram[int64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				return float64(p.Sum), true
			}
		}
	case metricdata.Histogram[float64]:
		for _, p := range d.DataPoints {
			if match(p.Attributes) {
				return float64(p.Count), true
			}
		}
	}
	return 0, false
}

func (o *observed) health(t *testing.T, svc string) healthpb.HealthCheckResponse_ServingStatus {
	t.Helper()
	r, err := o.c.probes.health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
	if err != nil {
		t.Fatalf("health %q: %v", svc, err)
	}
	return r.GetStatus()
}

func (o *observed) readyz(t *testing.T) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	o.c.HealthHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return rec.Code, string(body)
}

func TestReadinessFollowsTheStoreAndShutdown(t *testing.T) {
	t.Parallel()
	o := newObserved(t)
	ctx := context.Background()
	for _, svc := range []string{"", HealthLiveness, HealthReadiness, leaseholdv1.WorkerService_ServiceDesc.ServiceName} {
		if got := o.health(t, svc); got != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("health %q at start = %v", svc, got)
		}
	}

	o.st.down.Store(true)
	o.c.probeStore(ctx)
	for svc, want := range map[string]healthpb.HealthCheckResponse_ServingStatus{
		"":              healthpb.HealthCheckResponse_NOT_SERVING,
		HealthReadiness: healthpb.HealthCheckResponse_NOT_SERVING,
		HealthLiveness:  healthpb.HealthCheckResponse_SERVING,
		leaseholdv1.JobService_ServiceDesc.ServiceName: healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		if got := o.health(t, svc); got != want {
			t.Errorf("health %q with the store down = %v, want %v", svc, got, want)
		}
	}
	if code, body := o.readyz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "store unreachable") {
		t.Errorf("/readyz with the store down = %d %q", code, body)
	}
	if !strings.Contains(o.logs.String(), "level=WARN msg=\"store unreachable") {
		t.Errorf("the outage was not logged at Warn:\n%s", o.logs.String())
	}

	o.st.down.Store(false)
	o.c.probeStore(ctx)
	if got := o.health(t, HealthReadiness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("readiness after the store came back = %v", got)
	}
	if code, _ := o.readyz(t); code != http.StatusOK {
		t.Errorf("/readyz after the store came back = %d", code)
	}

	o.c.markShuttingDown()
	if got := o.health(t, HealthReadiness); got != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("readiness during shutdown = %v", got)
	}
	if got := o.health(t, HealthLiveness); got != healthpb.HealthCheckResponse_SERVING {
		t.Errorf("liveness during shutdown = %v", got)
	}
	// A probe that succeeds does not bring a shutting-down coordinator back.
	o.c.probeStore(ctx)
	if code, body := o.readyz(t); code != http.StatusServiceUnavailable || !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz during shutdown = %d %q", code, body)
	}
}

func TestQueueGaugesComeFromOneCachedStoreReading(t *testing.T) {
	t.Parallel()
	o := newObserved(t)
	ctx := context.Background()
	if _, err := o.st.CreateJobs(ctx, store.CreateJobsParams{Tenant: TenantDefault, Requests: []store.CreateRequest{
		{Spec: store.JobSpec{Queue: "a", Kind: "k", RunAt: time.Now().Add(-time.Minute)}},
		{Spec: store.JobSpec{Queue: "a", Kind: "k"}},
		{Spec: store.JobSpec{Queue: "b", Kind: "k"}},
	}}); err != nil {
		t.Fatal(err)
	}
	ms := o.collect(t)
	if v, _ := point(ms, "leasehold.queue.jobs", attrQueue("a"), attribute.String("state", "queued")); v != 2 {
		t.Errorf("queue a queued = %v, want 2", v)
	}
	if v, _ := point(ms, "leasehold.queue.jobs", attrQueue("b"), attribute.String("state", "queued")); v != 1 {
		t.Errorf("queue b queued = %v, want 1", v)
	}
	if v, _ := point(ms, "leasehold.queue.lag", attrQueue("a")); v < 60 || v > 600 {
		t.Errorf("queue a lag = %vs, want about 60", v)
	}
	o.collect(t)
	o.collect(t)
	if n := o.st.metricsReads.Load(); n != 1 {
		t.Errorf("three collections within the interval read the store %d times, want once", n)
	}

	// A failed reading leaves the gauges out (and is counted) rather than
	// showing stale numbers.
	o.c.probes.queueGauges.mu.Lock()
	o.c.probes.queueGauges.at = time.Time{}
	o.c.probes.queueGauges.mu.Unlock()
	o.st.down.Store(true)
	ms = o.collect(t)
	if _, ok := point(ms, "leasehold.queue.jobs", attrQueue("a")); ok {
		t.Error("queue gauges reported during a store outage")
	}
	if v, _ := point(ms, "leasehold.queue.metrics.errors"); v != 1 {
		t.Errorf("queue metrics errors = %v, want 1", v)
	}
}

func TestMetricsRecorderHooks(t *testing.T) {
	t.Parallel()
	o := newObserved(t)
	m := o.c.core.metrics
	m.CommitBatch("reports", 7, 3*time.Millisecond, nil)
	m.CommitBatch("reports", 3, time.Millisecond, errOutage)
	m.DispatchRound(2*time.Millisecond, 5)
	m.BreakerState("default", "payments-api", BreakerOpen)
	m.BreakerState("default", "payments-api", "sideways") // ignored
	m.RateLimited(t.Context(), "default", "/leasehold.v1.JobService/CreateJob")
	m.Shed(t.Context(), "/leasehold.v1.WorkerService/Claim")
	m.WatchLimited(t.Context(), "default", "/leasehold.v1.JobService/WatchJob")
	var none *Metrics // components may hold a nil recorder
	none.CommitBatch("reports", 1, time.Millisecond, nil)
	none.Shed(t.Context(), "x")

	ms := o.collect(t)
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
	}{
		{"leasehold.store.commit.batch.size", []attribute.KeyValue{attribute.String("op", "reports")}, 10},
		{"leasehold.store.commit.duration", []attribute.KeyValue{attribute.String("result", "ok")}, 1},
		{"leasehold.store.commit.duration", []attribute.KeyValue{attribute.String("result", "error")}, 1},
		{"leasehold.dispatch.round.duration", nil, 1},
		{"leasehold.dispatch.leases", nil, 5},
		{"leasehold.breaker.state", []attribute.KeyValue{attribute.String("dependency", "payments-api")}, 2},
		{"leasehold.breaker.transitions", []attribute.KeyValue{attribute.String("state", BreakerOpen)}, 1},
		{"leasehold.rpc.limited", []attribute.KeyValue{attribute.String("reason", "rate_limited"), attrTenant("default")}, 1},
		{"leasehold.rpc.limited", []attribute.KeyValue{attribute.String("reason", "shed")}, 1},
		{"leasehold.rpc.limited", []attribute.KeyValue{attribute.String("reason", "watch_limit"), attrTenant("default")}, 1},
	} {
		if got, ok := point(ms, c.name, c.attrs...); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.attrs, got, ok, c.want)
		}
	}
}

// TestUnaryClaimRecordsLeaseSpansAndCounters claims through the real
// service handler: the lease span is a child of the call's span and links
// to the producer's span from the job metadata; the claim and the outcome
// are counted per queue; the worker is remembered as a unary worker.
func TestUnaryClaimRecordsLeaseSpansAndCounters(t *testing.T) {
	t.Parallel()
	o := newObserved(t)
	ctx := withCaller(context.Background(), anonymous(TenantDefault))
	producerTP := sdktrace.NewTracerProvider()
	pctx, producer := producerTP.Tracer("producer").Start(context.Background(), "produce")
	md := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(pctx, md)
	producer.End()
	js, ws := &jobService{c: o.c}, &workerService{c: o.c}
	if _, err := js.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "traced", Kind: "k", Metadata: md}}); err != nil {
		t.Fatal(err)
	}
	callCtx, call := o.c.core.tracer.Start(ctx, "leasehold.v1.WorkerService/Claim")
	claimed, err := ws.Claim(callCtx, &leaseholdv1.ClaimRequest{WorkerId: "unary-1", Queues: []string{"traced"}})
	call.End()
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("Claim = %v, %v", claimed, err)
	}
	if _, err := ws.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claimed.GetJobs()[0].GetToken()}); err != nil {
		t.Fatal(err)
	}

	var lease sdktrace.ReadOnlySpan
	for _, s := range o.spans.Ended() {
		if s.Name() == spanLeaseClaim {
			lease = s
		}
	}
	if lease == nil {
		t.Fatalf("no %s span among %d", spanLeaseClaim, len(o.spans.Ended()))
	}
	if lease.Parent().SpanID() != call.SpanContext().SpanID() {
		t.Errorf("lease span's parent = %s, want the Claim call's span %s", lease.Parent().SpanID(), call.SpanContext().SpanID())
	}
	if links := lease.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != producer.SpanContext().SpanID() {
		t.Errorf("lease span links = %v, want the producer's span %s", links, producer.SpanContext().SpanID())
	}

	ms := o.collect(t)
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
	}{
		{"leasehold.jobs.created", []attribute.KeyValue{attrQueue("traced")}},
		{"leasehold.jobs.claimed", []attribute.KeyValue{attrQueue("traced")}},
		{"leasehold.jobs.finished", []attribute.KeyValue{attrQueue("traced"), attribute.String("outcome", "succeeded")}},
		{"leasehold.worker.unary", nil},
	} {
		if got, ok := point(ms, c.name, c.attrs...); !ok || got != 1 {
			t.Errorf("%s%v = %v (found %v), want 1", c.name, c.attrs, got, ok)
		}
	}
	workers := o.c.listWorkers(TenantDefault)
	if len(workers) != 1 || workers[0].GetWorkerId() != "unary-1" || workers[0].GetTransport() != leaseholdv1.WorkerTransport_WORKER_TRANSPORT_UNARY {
		t.Errorf("workers = %v", workers)
	}
}

func TestSeenWorkersForgetAfterTheWindow(t *testing.T) {
	t.Parallel()
	r := newSeenWorkers(time.Minute)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	r.saw("t", "w1", []string{"q"}, t0)
	r.sawTokens("t", []store.LeaseToken{{WorkerID: "w2"}, {WorkerID: "w2"}}, t0.Add(30*time.Second))
	r.saw("other", "w3", nil, t0)
	if n := r.count(t0.Add(45 * time.Second)); n != 3 {
		t.Fatalf("count = %d, want 3", n)
	}
	got := r.list("t", t0.Add(80*time.Second), "c1", func(string) bool { return false })
	if len(got) != 1 || got[0].GetWorkerId() != "w2" {
		t.Fatalf("list after w1's window = %v, want w2 only", got)
	}
	if got := r.list("t", t0.Add(80*time.Second), "c1", func(w string) bool { return w == "w2" }); len(got) != 0 {
		t.Fatalf("a worker with a stream is listed as unary too: %v", got)
	}
}

// A store outage is one Warn when it starts, one Warn summary per
// OutageLogInterval while it lasts and one Info when it ends, however
// often the store is probed (it was a Warn per failed call of every
// loop).
func TestAStoreOutageIsOneWarnASummaryAndOneInfo(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }
	o := newObservedWith(t, func(c *Config) { c.Now = clock })
	ctx := context.Background()
	lines := func(level, msg string) []string {
		var out []string
		for _, l := range strings.Split(o.logs.String(), "\n") {
			if strings.Contains(l, "level="+level) && strings.Contains(l, msg) {
				out = append(out, l)
			}
		}
		return out
	}

	o.st.down.Store(true)
	for range 25 { // 25 s of outage, probed every second
		o.c.probeStore(ctx)
		advance(time.Second)
	}
	if got := lines("WARN", "store"); len(got) != 1 || !strings.Contains(got[0], "store unreachable") {
		t.Fatalf("25 s into the outage: %d Warn lines, want the one that starts it:\n%s", len(got), strings.Join(got, "\n"))
	}
	advance(10 * time.Second) // 35 s: past the 30 s summary interval
	o.c.probeStore(ctx)
	summaries := lines("WARN", "store still unreachable")
	if len(summaries) != 1 || !strings.Contains(summaries[0], "down_for=35s") || !strings.Contains(summaries[0], "failed_probes=26") {
		t.Fatalf("35 s into the outage, want one summary with down_for=35s failed_probes=26:\n%s", o.logs.String())
	}
	o.c.probeStore(ctx)
	if n := len(lines("WARN", "store")); n != 2 {
		t.Errorf("%d Warn lines after a probe right after the summary, want 2", n)
	}

	o.st.down.Store(false)
	advance(time.Second)
	o.c.probeStore(ctx)
	o.c.probeStore(ctx)
	back := lines("INFO", "store reachable again")
	if len(back) != 1 || !strings.Contains(back[0], "down_for=36s") || !strings.Contains(back[0], "failed_probes=27") {
		t.Fatalf("after the outage, want one Info with down_for=36s failed_probes=27:\n%s", o.logs.String())
	}
	if n := len(lines("WARN", "store")); n != 2 {
		t.Errorf("%d Warn lines in all, want 2 (start and one summary)", n)
	}
}

// TestUniqueConflictsAreCounted: a unique create answered with the holder
// counts as a duplicate, one refused with ON_CONFLICT_FAIL as refused, by
// tenant and queue; the duplicate is not counted as created.
func TestUniqueConflictsAreCounted(t *testing.T) {
	t.Parallel()
	o := newObserved(t)
	ctx := withCaller(context.Background(), anonymous(TenantDefault))
	js := &jobService{c: o.c}
	create := func(fail bool) error {
		u := &leaseholdv1.UniqueOptions{Key: "k-1"}
		if fail {
			u.OnConflict = leaseholdv1.UniqueOptions_ON_CONFLICT_FAIL
		}
		_, err := js.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "uniq", Kind: "k"}, Unique: u})
		return err
	}
	for range 3 { // one new job, two duplicates
		if err := create(false); err != nil {
			t.Fatal(err)
		}
	}
	if err := create(true); status.Code(err) != codes.AlreadyExists {
		t.Fatalf("a FAIL duplicate: %v, want ALREADY_EXISTS", err)
	}
	ms := o.collect(t)
	for _, c := range []struct {
		name  string
		attrs []attribute.KeyValue
		want  float64
	}{
		{"leasehold.jobs.unique.conflicts", []attribute.KeyValue{attrQueue("uniq"), attribute.String("outcome", "duplicate")}, 2},
		{"leasehold.jobs.unique.conflicts", []attribute.KeyValue{attrQueue("uniq"), attribute.String("outcome", "refused")}, 1},
		{"leasehold.jobs.created", []attribute.KeyValue{attrQueue("uniq")}, 1},
	} {
		if got, ok := point(ms, c.name, c.attrs...); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.attrs, got, ok, c.want)
		}
	}
}
