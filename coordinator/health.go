package coordinator

import (
	"context"
	"log/slog"
	"net/http"
	"sync"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// The grpc.health.v1 service names for probes. Liveness answers SERVING
// while the process runs (a kubelet restarts the container when it does
// not); readiness answers NOT_SERVING while the store is unreachable and
// from the start of shutdown (a load balancer stops sending calls). The
// overall "" status and the three API services follow readiness.
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
)

// ReadinessProbeIntervalDefault is how often the store is probed (with its
// Now method) for readiness.
const ReadinessProbeIntervalDefault = 5 * time.Second

// OutageLogIntervalDefault is how often a store outage that goes on is
// summarised at Warn.
const OutageLogIntervalDefault = 30 * time.Second

// readinessFollowers are the service names whose status is readiness'.
var readinessFollowers = []string{
	"", HealthReadiness,
	leaseholdv1.JobService_ServiceDesc.ServiceName,
	leaseholdv1.WorkerService_ServiceDesc.ServiceName,
	leaseholdv1.AdminService_ServiceDesc.ServiceName,
	leaseholdv1.ScheduleService_ServiceDesc.ServiceName,
}

// readiness is whether this coordinator should be sent calls.
type readiness struct {
	mu           sync.Mutex // guards the fields below
	storeErr     error      // the last probe's failure; nil when the store answered
	shuttingDown bool

	// The outage in progress, when storeErr is set; written by probeStore
	// only.
	downSince    time.Time // the first failed probe
	failedProbes int       // failed probes since downSince
	summarised   time.Time // the last Warn about it (start or summary)
}

// Ready reports whether the coordinator takes calls: the store answered
// its last probe and shutdown has not begun. When it does not, reason
// says why, for /readyz and the log.
func (c *Coordinator) Ready() (ready bool, reason string) {
	c.probes.ready.mu.Lock()
	defer c.probes.ready.mu.Unlock()
	switch {
	case c.probes.ready.shuttingDown:
		return false, "shutting down"
	case c.probes.ready.storeErr != nil:
		return false, "store unreachable: " + c.probes.ready.storeErr.Error()
	}
	return true, ""
}

// publishHealth sets the grpc.health.v1 statuses from readiness; liveness
// is always SERVING (set once in New).
func (c *Coordinator) publishHealth() {
	st := healthpb.HealthCheckResponse_SERVING
	if ok, _ := c.Ready(); !ok {
		st = healthpb.HealthCheckResponse_NOT_SERVING
	}
	for _, svc := range readinessFollowers {
		c.probes.health.SetServingStatus(svc, st)
	}
}

// markShuttingDown turns readiness off for good (shutdown step 1).
func (c *Coordinator) markShuttingDown() {
	c.probes.ready.mu.Lock()
	c.probes.ready.shuttingDown = true
	c.probes.ready.mu.Unlock()
	c.publishHealth()
}

// probeStore asks the store for its clock once and updates readiness. It
// is the one place that logs a store outage: one Warn when it starts, a
// Warn summary every OutageLogInterval while it lasts, one Info when it
// ends (the loops that fail meanwhile log at Debug: store.FailureLevel).
// It is the body of the readiness loop; tests call it directly.
func (c *Coordinator) probeStore(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ReadinessProbeInterval)
	_, err := c.store.Now(pctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return // shutting down: not the store's fault
	}
	now := c.wallNow()
	r := &c.probes.ready
	r.mu.Lock()
	was := r.storeErr
	r.storeErr = err
	since, failed := r.downSince, r.failedProbes
	summary := false
	switch {
	case err != nil && was == nil:
		r.downSince, r.failedProbes, r.summarised = now, 1, now
		since, failed = now, 1
	case err != nil:
		r.failedProbes++
		failed = r.failedProbes
		if now.Sub(r.summarised) >= c.cfg.OutageLogInterval {
			r.summarised, summary = now, true
		}
	case was != nil:
		r.downSince, r.failedProbes, r.summarised = time.Time{}, 0, time.Time{}
	}
	r.mu.Unlock()
	engine := slog.String("engine", c.store.Engine())
	switch {
	case err != nil && was == nil:
		c.log.WarnContext(ctx, "store unreachable; readiness is NOT_SERVING until it answers",
			engine, slog.String("error", err.Error()))
	case summary:
		c.log.WarnContext(ctx, "store still unreachable; readiness is NOT_SERVING",
			engine, slog.Duration("down_for", now.Sub(since).Round(time.Millisecond)), slog.Int("failed_probes", failed), slog.String("error", err.Error()))
	case err == nil && was != nil:
		c.log.InfoContext(ctx, "store reachable again; readiness is SERVING",
			engine, slog.Duration("down_for", now.Sub(since).Round(time.Millisecond)), slog.Int("failed_probes", failed))
	}
	c.publishHealth()
}

// runReadiness probes the store every ReadinessProbeInterval until ctx
// ends.
func (c *Coordinator) runReadiness(ctx context.Context) {
	t := time.NewTicker(c.cfg.ReadinessProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			c.probeStore(ctx)
		}
	}
}

// HealthHandler serves the HTTP probes: /healthz answers 200 while the
// process runs, /readyz 200 while Ready and 503 with the reason otherwise.
// Neither touches the store: readiness is the last probe's result.
func (c *Coordinator) HealthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if ok, reason := c.Ready(); !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("not ready: " + reason + "\n"))
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}
