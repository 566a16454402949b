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
}

// Ready reports whether the coordinator takes calls: the store answered
// its last probe and shutdown has not begun. When it does not, reason
// says why, for /readyz and the log.
func (c *Coordinator) Ready() (ready bool, reason string) {
	c.ready.mu.Lock()
	defer c.ready.mu.Unlock()
	switch {
	case c.ready.shuttingDown:
		return false, "shutting down"
	case c.ready.storeErr != nil:
		return false, "store unreachable: " + c.ready.storeErr.Error()
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
		c.health.SetServingStatus(svc, st)
	}
}

// markShuttingDown turns readiness off for good (shutdown step 1).
func (c *Coordinator) markShuttingDown() {
	c.ready.mu.Lock()
	c.ready.shuttingDown = true
	c.ready.mu.Unlock()
	c.publishHealth()
}

// probeStore asks the store for its clock once and updates readiness,
// logging a change at Warn (unreachable) or Info (back). It is the body of
// the readiness loop; tests call it directly.
func (c *Coordinator) probeStore(ctx context.Context) {
	pctx, cancel := context.WithTimeout(ctx, c.cfg.ReadinessProbeInterval)
	_, err := c.store.Now(pctx)
	cancel()
	if err != nil && ctx.Err() != nil {
		return // shutting down: not the store's fault
	}
	c.ready.mu.Lock()
	was := c.ready.storeErr
	c.ready.storeErr = err
	c.ready.mu.Unlock()
	switch {
	case err != nil && was == nil:
		c.log.WarnContext(ctx, "store unreachable; readiness is NOT_SERVING until it answers",
			slog.String("engine", c.store.Engine()), slog.String("error", err.Error()))
	case err == nil && was != nil:
		c.log.InfoContext(ctx, "store reachable again; readiness is SERVING", slog.String("engine", c.store.Engine()))
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
