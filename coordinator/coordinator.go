package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/leasehold/leasehold/coordinator/bulk"
	"github.com/leasehold/leasehold/coordinator/dispatch"
	"github.com/leasehold/leasehold/coordinator/reaper"
	"github.com/leasehold/leasehold/coordinator/retention"
	"github.com/leasehold/leasehold/coordinator/scheduler"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// errShuttingDown is the cancel cause of work ended by Shutdown.
var errShuttingDown = errors.New("coordinator shutting down")

// Coordinator serves the Leasehold API over a Store. Create it with New,
// run it with Serve, stop it with Shutdown.
type Coordinator struct {
	cfg   Config
	log   *slog.Logger
	store store.Store
	v     validator

	grpc       *grpc.Server
	health     *health.Server
	dispatcher *dispatch.Dispatcher
	reaper     *reaper.Reaper
	pruner     *retention.Pruner
	// scheduler fires due schedules; nil when Config.SchedulePollInterval
	// is negative.
	scheduler *scheduler.Scheduler
	// operations runs bulk operations; nil when
	// Config.OperationPollInterval is negative.
	operations *bulk.Runner
	// watches wakes WatchJob streams (watch_hub.go); watchesDone is
	// closed when its store subscription has returned (nil until Serve).
	watches     *watchHub
	watchesDone chan struct{}
	activity    activity
	reporter    *activityReporter
	// overload counts the defences' refusals; overloadRep logs them.
	overload    overloadCounts
	overloadRep *overloadReporter
	unaryLimit  *rateLimiter
	streamLimit *rateLimiter
	shedder     *loadShedder
	// preAuth throttles calls before authentication (preauth.go).
	preAuth *preAuthLimits
	// healthWatches caps grpc.health.v1 Watch streams.
	healthWatches *healthWatchLimit
	leases        leaseSigner
	metrics       *Metrics
	tracer        trace.Tracer
	ready         readiness
	seen          *seenWorkers
	// queueGauges caches the store reading behind the queue gauges.
	queueGauges queueGauges
	// queueCounts keeps the counts of ListQueues calls that accept stale
	// ones (queue_counts.go); throughput samples the jobs finished per
	// interval (throughput.go).
	queueCounts queueCounts
	throughput  *throughputSampler
	// readinessDone is closed when the store prober has returned; nil
	// until Serve starts it.
	readinessDone chan struct{}

	// auth resolves each call's caller (auth.go); workerOwners caches
	// which principal owns which worker id (worker_identity.go).
	auth         *authenticator
	workerOwners workerOwners

	// bgCtx carries the dispatcher, maintenance and every stream session;
	// cancelling it (with errShuttingDown) is the hard stop.
	bgCtx    context.Context
	bgCancel context.CancelCauseFunc
	// closing is closed at shutdown step 2: long-polls and WatchJob end,
	// new Connect streams are refused.
	closing chan struct{}

	// mu guards sessions and draining. Lock order: mu, then session.mu.
	// The stream holding a lease is found from the lease's owner: one
	// stream per worker id.
	mu       sync.Mutex
	sessions map[sessionKey]*session
	draining bool

	startOnce    sync.Once
	shutdownOnce sync.Once
	shutdownErr  error
}

type sessionKey struct{ tenant, worker string }

// New validates cfg (after defaults) and builds a Coordinator. Nothing runs
// until Serve.
func New(cfg Config) (*Coordinator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	leases, err := newLeaseSigner(cfg.Store)
	if err != nil {
		return nil, err
	}
	bgCtx, bgCancel := context.WithCancelCause(context.Background())
	c := &Coordinator{
		cfg:   cfg,
		log:   cfg.Logger,
		store: cfg.Store,
		v: validator{payloadMax: cfg.PayloadMaxBytes, defaultLease: cfg.DefaultLeaseDuration,
			pageBytes: cfg.ListPageBytes, leases: leases},
		leases:   leases,
		health:   health.NewServer(),
		watches:  newWatchHub(cfg.WatchersPerConnectionMax, cfg.WatchersMax, cfg.Store, cfg.ID),
		bgCtx:    bgCtx,
		bgCancel: bgCancel,
		closing:  make(chan struct{}),
		sessions: make(map[sessionKey]*session),
	}
	c.reporter = &activityReporter{
		interval: cfg.ActivityLogInterval, log: cfg.Logger, counts: &c.activity, streams: c.streams,
	}
	c.overloadRep = &overloadReporter{interval: cfg.OverloadLogInterval, log: cfg.Logger, counts: &c.overload}
	c.unaryLimit = newRateLimiter(cfg.UnaryRate, cfg.UnaryBurst, "calls")
	c.streamLimit = newRateLimiter(cfg.StreamOpenRate, cfg.StreamOpenBurst, "stream opens")
	c.preAuth = newPreAuthLimits(cfg)
	c.healthWatches = newHealthWatchLimit(cfg.HealthWatchersPerConnectionMax, cfg.HealthWatchersMax)
	c.reaper = reaper.New(reaper.Config{
		Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now,
		IntervalMax: cfg.ReapIntervalMax, Reaped: c.reaped,
	})
	c.auth = &authenticator{
		mode: cfg.Auth, tenant: cfg.Tenant, store: cfg.Store, log: cfg.Logger,
		failures: &authFailures{
			interval: cfg.OverloadLogInterval, log: cfg.Logger, trusted: cfg.TrustedProxies,
			auditEvery: cfg.AuthFailureAuditInterval,
		},
		dir: newPrincipalDirectory(cfg.AuthCacheTTL, cfg.Store, cfg.Logger), revalidate: max(cfg.AuthCacheTTL, 100*time.Millisecond),
	}
	c.auth.consoleKey = c.ConsoleSessionKey()
	c.auth.tls = cfg.TLS
	c.auth.failures.audit = func(ctx context.Context, data map[string]any) {
		c.auditCoordinator(ctx, store.AuditAuthenticationFailures, "authentication", data)
	}
	c.tracer = cfg.TracerProvider.Tracer(tracerName)
	c.seen = newSeenWorkers(cfg.WorkerSeenWindow)
	c.queueGauges.interval = cfg.QueueMetricsInterval
	c.throughput = &throughputSampler{interval: cfg.ThroughputInterval, store: cfg.Store, log: cfg.Logger, now: c.wallNow}
	if err := c.setUpMetrics(); err != nil {
		bgCancel(nil)
		return nil, err
	}
	c.shedder = newLoadShedder(cfg.MaxInFlightReads, cfg.MaxInFlightWrites, cfg.ShedWait, &c.overload, c.metrics)
	c.dispatcher = dispatch.New(dispatch.Config{
		Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now,
		PollInterval: cfg.PollInterval, PollMaxInterval: cfg.PollMaxInterval,
		CreditsMax: CreditsMax, Leased: c.leased, Round: c.metrics.DispatchRound,
	})
	c.pruner = retention.New(retention.Config{
		Store: cfg.Store, Logger: cfg.Logger, Retention: cfg.Retention,
		Interval: cfg.RetentionInterval, Now: cfg.Now,
	})
	if cfg.SchedulePollInterval > 0 {
		c.scheduler = scheduler.New(scheduler.Config{
			Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now, PollInterval: cfg.SchedulePollInterval,
			IdempotencyWindow: cfg.IdempotencyWindow, Fired: c.schedulesFired,
		})
	}
	if cfg.OperationPollInterval > 0 {
		c.operations = bulk.New(bulk.Config{
			Store: cfg.Store, Owner: cfg.ID, Logger: cfg.Logger, Now: cfg.Now,
			Lease: cfg.OperationLease, PollInterval: cfg.OperationPollInterval, Chunk: cfg.OperationChunk,
			Rate: cfg.OperationRate, Retention: cfg.OperationRetention,
			Chunked: c.operationChunked, Finished: c.operationFinished, Running: c.metrics.operationRunning,
		})
	}
	c.grpc = grpc.NewServer(c.serverOptions()...)
	leaseholdv1.RegisterJobServiceServer(c.grpc, &jobService{c: c})
	leaseholdv1.RegisterWorkerServiceServer(c.grpc, &workerService{c: c})
	leaseholdv1.RegisterAdminServiceServer(c.grpc, &adminService{c: c})
	leaseholdv1.RegisterScheduleServiceServer(c.grpc, &scheduleService{c: c})
	leaseholdv1.RegisterOperationServiceServer(c.grpc, &operationService{c: c})
	healthpb.RegisterHealthServer(c.grpc, c.health)
	reflection.Register(c.grpc)
	// The store answered when it was opened: ready until a probe says
	// otherwise. Liveness never changes.
	c.health.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	c.publishHealth()
	return c, nil
}

// GRPCServer returns the underlying server, for tests that serve it on a
// bufconn listener (call Serve with that listener so that dispatch and
// maintenance start too).
func (c *Coordinator) GRPCServer() *grpc.Server { return c.grpc }

// ID is the coordinator instance id.
func (c *Coordinator) ID() string { return c.cfg.ID }

// Serve starts dispatch and maintenance (once) and serves gRPC on lis until
// Shutdown. It returns nil after Shutdown and the listener's error
// otherwise. It may be called for several listeners.
func (c *Coordinator) Serve(lis net.Listener) error {
	c.startOnce.Do(func() {
		c.dispatcher.Start(c.bgCtx)
		c.reaper.Start(c.bgCtx)
		c.pruner.Start(c.bgCtx)
		if c.operations != nil {
			c.operations.Start(c.bgCtx)
		}
		if c.scheduler != nil {
			c.scheduler.Start(c.bgCtx)
		}
		c.reporter.Start(c.bgCtx)
		c.overloadRep.Start(c.bgCtx)
		c.auth.failures.Start(c.bgCtx)
		c.throughput.Start(c.bgCtx)
		c.watchesDone = make(chan struct{})
		go func() {
			defer close(c.watchesDone)
			c.watches.run(c.bgCtx, c.log)
		}()
		c.readinessDone = make(chan struct{})
		go func() {
			defer close(c.readinessDone)
			c.runReadiness(c.bgCtx)
		}()
	})
	c.log.Info("leasehold coordinator serving",
		slog.String("listen", lis.Addr().String()), slog.String("engine", c.store.Engine()),
		slog.String("coordinator_id", c.cfg.ID), slog.String("auth", string(c.cfg.Auth)),
		slog.Bool("tls", c.cfg.TLS != nil))
	// At most MaxConnections at once on this listener; the rest wait in
	// the accept queue (a handshake that never completes is closed after
	// ConnectionTimeout, freeing its slot).
	err := c.grpc.Serve(newLimitListener(lis, c.cfg.MaxConnections))
	if errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return err
}

// Shutdown stops the coordinator in written-down steps; it is safe to call
// twice (the second call waits for nothing and returns the first result):
//
//  1. Readiness (and the overall health status) reports NOT_SERVING, so
//     load balancers and SDKs stop sending new work here; liveness stays
//     SERVING while the process runs.
//  2. Dispatch stops pushing new leases; long-poll Claims and WatchJob
//     streams end; new Connect streams are refused.
//  3. Every worker stream gets Drain, and the streams get up to
//     ShutdownGrace to end (workers finish or release their leases and
//     close). Streams still open then are cancelled.
//  4. GracefulStop waits for in-flight calls, bounded by ShutdownGrace (and
//     ctx); then Stop closes whatever is left.
//  5. Dispatch and maintenance stop.
//  6. The store closes (unless Config.KeepStoreOpen).
//
// Leases held by workers are not touched: a lease outlives its stream, and
// one never finished expires and is claimed again.
func (c *Coordinator) Shutdown(ctx context.Context) error {
	c.shutdownOnce.Do(func() { c.shutdownErr = c.shutdown(ctx) })
	return c.shutdownErr
}

func (c *Coordinator) shutdown(ctx context.Context) error {
	grace := c.cfg.ShutdownGrace
	c.log.InfoContext(ctx, "leasehold coordinator shutting down", slog.Duration("grace", grace))

	// 1.
	c.markShuttingDown()

	// 2.
	c.dispatcher.Quiesce()
	c.mu.Lock()
	c.draining = true
	sessions := make([]*session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	close(c.closing)

	// 3.
	for _, s := range sessions {
		s.drain(grace)
	}
	drainCtx, cancel := context.WithTimeout(ctx, grace)
	for _, s := range sessions {
		select {
		case <-s.done:
		case <-drainCtx.Done():
		}
	}
	cancel()
	for _, s := range sessions {
		s.cancel(errShuttingDown)
	}

	// 4.
	stopped := make(chan struct{})
	go func() {
		c.grpc.GracefulStop()
		close(stopped)
	}()
	stopCtx, cancel := context.WithTimeout(ctx, grace)
	select {
	case <-stopped:
	case <-stopCtx.Done():
		c.log.WarnContext(ctx, "graceful stop timed out; closing remaining calls")
		c.grpc.Stop()
		<-stopped
	}
	cancel()

	// 5.
	c.bgCancel(errShuttingDown)
	c.dispatcher.Stop()
	c.reaper.Stop()
	c.pruner.Stop()
	if c.operations != nil {
		c.operations.Stop()
	}
	if c.scheduler != nil {
		c.scheduler.Stop()
	}
	c.reporter.Stop()
	c.overloadRep.Stop()
	c.auth.failures.Stop()
	c.throughput.Stop()
	c.queueCounts.wg.Wait()
	c.startOnce.Do(func() {}) // a Serve after Shutdown starts nothing
	if c.readinessDone != nil {
		<-c.readinessDone
	}
	if c.watchesDone != nil {
		<-c.watchesDone
	}
	c.reporter.runOnce(ctx, activityCounts{})

	// 6.
	if !c.cfg.KeepStoreOpen {
		if err := c.store.Close(); err != nil {
			return fmt.Errorf("close store: %w", err)
		}
	}
	c.log.InfoContext(ctx, "leasehold coordinator stopped")
	return nil
}

// streams returns how many worker streams are connected here.
func (c *Coordinator) streams() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.sessions)
}

// now is the time passed to store calls: zero (the store's clock) unless a
// test injected Config.Now.
func (c *Coordinator) now() time.Time {
	if c.cfg.Now == nil {
		return time.Time{}
	}
	return c.cfg.Now()
}

// wallNow is a display time (connected_at): the injected clock or the
// process clock.
func (c *Coordinator) wallNow() time.Time {
	if c.cfg.Now != nil {
		return c.cfg.Now()
	}
	return time.Now()
}

// leased is told of every lease the dispatcher delivered: the reaper
// wakes at the earliest expiry.
func (c *Coordinator) leased(jobs []store.ClaimedJob) {
	var first time.Time
	for _, j := range jobs {
		if first.IsZero() || j.Job.LeaseExpiresAt.Before(first) {
			first = j.Job.LeaseExpiresAt
		}
	}
	if !first.IsZero() {
		c.reaper.Expect(first)
	}
}

// reaped is told of the expired leases the reaper ended: their streams
// stop counting them, watchers wake, and requeued jobs wake dispatch.
func (c *Coordinator) reaped(res store.ReapResult) {
	for _, j := range res.Jobs {
		c.activity.ended(j.State)
		c.leaseEnded(j.Tenant, j)
	}
	for _, q := range res.Requeued {
		c.dispatcher.Wake(q.Tenant, q.Queue)
	}
	for _, j := range res.Jobs {
		c.watches.notify(j.Tenant, j.ID)
	}
}

// holder returns the stream on this coordinator through which worker
// holds leases, if any.
func (c *Coordinator) holder(tenant, worker string) *session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[sessionKey{tenant, worker}]
}

// leaseEnded tells the stream of the lease's owner, if it is on this
// coordinator, that the job's lease ended: the one of job.LeaseGeneration,
// which a job keeps after its last lease ends.
func (c *Coordinator) leaseEnded(tenant string, job *store.Job) {
	if s := c.holder(tenant, job.LeaseOwner); s != nil {
		s.forget(job.ID, job.LeaseGeneration)
	}
}

// notifyCancel pushes a CancelNotice to the stream of the job's lease
// owner, if it is on this coordinator and still holds that generation. A
// holder on another coordinator learns it from its next heartbeat
// (RENEW_STATUS_CANCEL_REQUESTED).
func (c *Coordinator) notifyCancel(tenant string, job *store.Job, reason string) {
	s := c.holder(tenant, job.LeaseOwner)
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	tok, ok := s.leases[job.ID]
	if !ok || tok.Generation != job.LeaseGeneration {
		return
	}
	s.enqueueLocked(&leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_CancelRequested{
		CancelRequested: &leaseholdv1.CancelNotice{Token: toToken(tok), Reason: reason},
	}})
}

// Waiters returns the worker ids of the streams and long-poll Claims
// registered with the dispatcher right now (introspection and tests).
func (c *Coordinator) Waiters() []string {
	ws := c.dispatcher.Waiters()
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Worker)
	}
	return out
}
