package coordinator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

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
//
// Its state is grouped by owner: the core of leases and streams, the
// callers' identity, the overload defences, maintenance, health and the
// lifecycle each have a type of their own (components.go).
type Coordinator struct {
	cfg   Config
	log   *slog.Logger
	store store.Store
	v     validator
	grpc  *grpc.Server

	core        core
	identity    identity
	defences    defences
	maintenance maintenance
	probes      probes
	life        lifecycle
}

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
		identity: identity{leases: leases},
		probes:   probes{health: health.NewServer()},
		life:     lifecycle{bgCtx: bgCtx, bgCancel: bgCancel, closing: make(chan struct{})},
	}
	c.core = core{
		watches: newWatchHub(cfg.WatchersPerConnectionMax, cfg.WatchersMax, cfg.Store, cfg.ID),
		streams: streamRegistry{sessions: make(map[sessionKey]*session)},
		tracer:  cfg.TracerProvider.Tracer(tracerName),
		seen:    newSeenWorkers(cfg.WorkerSeenWindow),
	}
	c.core.reporter = &activityReporter{
		interval: cfg.ActivityLogInterval, log: cfg.Logger, counts: &c.core.activity, streams: c.streams,
	}
	c.probes.queueGauges.interval = cfg.QueueMetricsInterval
	if err := c.setUpMetrics(); err != nil {
		bgCancel(nil)
		return nil, err
	}
	c.defences.init(&cfg, c.core.metrics)
	c.identity.auth = c.newAuthenticator()
	c.core.dispatcher = dispatch.New(dispatch.Config{
		Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now,
		PollInterval: cfg.PollInterval, PollMaxInterval: cfg.PollMaxInterval,
		CreditsMax: CreditsMax, Leased: c.leased, Round: c.core.metrics.DispatchRound,
	})
	c.maintenance = c.newMaintenance()
	c.grpc = grpc.NewServer(c.serverOptions()...)
	leaseholdv1.RegisterJobServiceServer(c.grpc, &jobService{c: c})
	leaseholdv1.RegisterWorkerServiceServer(c.grpc, &workerService{c: c})
	leaseholdv1.RegisterAdminServiceServer(c.grpc, &adminService{c: c})
	leaseholdv1.RegisterScheduleServiceServer(c.grpc, &scheduleService{c: c})
	leaseholdv1.RegisterOperationServiceServer(c.grpc, &operationService{c: c})
	healthpb.RegisterHealthServer(c.grpc, c.probes.health)
	reflection.Register(c.grpc)
	// The store answered when it was opened: ready until a probe says
	// otherwise. Liveness never changes.
	c.probes.health.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	c.publishHealth()
	return c, nil
}

// init builds the overload defences of cfg in place (the shedder and the
// reporter keep a pointer to d.overload); metrics sees the shedder's
// lanes.
func (d *defences) init(cfg *Config, metrics *Metrics) {
	d.preAuth = newPreAuthLimits(*cfg)
	d.unaryLimit = newRateLimiter(cfg.UnaryRate, cfg.UnaryBurst, "calls")
	d.streamLimit = newRateLimiter(cfg.StreamOpenRate, cfg.StreamOpenBurst, "stream opens")
	d.healthWatches = newHealthWatchLimit(cfg.HealthWatchersPerConnectionMax, cfg.HealthWatchersMax)
	d.shedder = newLoadShedder(cfg.MaxInFlightReads, cfg.MaxInFlightWrites, cfg.ShedWait, &d.overload, metrics)
	d.overloadRep = &overloadReporter{interval: cfg.OverloadLogInterval, log: cfg.Logger, counts: &d.overload}
}

// newAuthenticator builds the authenticator of c's configuration.
func (c *Coordinator) newAuthenticator() *authenticator {
	cfg := &c.cfg
	a := &authenticator{
		mode: cfg.Auth, tenant: cfg.Tenant, store: cfg.Store, log: cfg.Logger,
		failures: &authFailures{
			interval: cfg.OverloadLogInterval, log: cfg.Logger, trusted: cfg.TrustedProxies,
			auditEvery: cfg.AuthFailureAuditInterval,
		},
		dir: newPrincipalDirectory(cfg.AuthCacheTTL, cfg.Store, cfg.Logger), revalidate: max(cfg.AuthCacheTTL, 100*time.Millisecond),
	}
	a.consoleKey = c.ConsoleSessionKey()
	a.tls = cfg.TLS
	a.failures.audit = func(ctx context.Context, data map[string]any) {
		c.auditCoordinator(ctx, store.AuditAuthenticationFailures, "authentication", data)
	}
	return a
}

// newMaintenance builds the background work of c's configuration; its
// hooks tell c what the work did.
func (c *Coordinator) newMaintenance() maintenance {
	cfg := &c.cfg
	m := maintenance{
		reaper: reaper.New(reaper.Config{
			Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now,
			IntervalMax: cfg.ReapIntervalMax, Reaped: c.reaped,
		}),
		pruner: retention.New(retention.Config{
			Store: cfg.Store, Logger: cfg.Logger, Retention: cfg.Retention,
			Interval: cfg.RetentionInterval, Now: cfg.Now,
		}),
		throughput: &throughputSampler{interval: cfg.ThroughputInterval, store: cfg.Store, log: cfg.Logger, now: c.wallNow},
	}
	if cfg.SchedulePollInterval > 0 {
		m.scheduler = scheduler.New(scheduler.Config{
			Store: cfg.Store, Logger: cfg.Logger, Now: cfg.Now, PollInterval: cfg.SchedulePollInterval,
			IdempotencyWindow: cfg.IdempotencyWindow, Fired: c.schedulesFired,
		})
	}
	if cfg.OperationPollInterval > 0 {
		m.operations = bulk.New(bulk.Config{
			Store: cfg.Store, Owner: cfg.ID, Logger: cfg.Logger, Now: cfg.Now,
			Lease: cfg.OperationLease, PollInterval: cfg.OperationPollInterval, Chunk: cfg.OperationChunk,
			Rate: cfg.OperationRate, Retention: cfg.OperationRetention,
			Chunked: c.operationChunked, Finished: c.operationFinished, Running: c.core.metrics.operationRunning,
		})
	}
	return m
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
	c.life.startOnce.Do(func() {
		c.core.dispatcher.Start(c.life.bgCtx)
		c.maintenance.reaper.Start(c.life.bgCtx)
		c.maintenance.pruner.Start(c.life.bgCtx)
		if c.maintenance.operations != nil {
			c.maintenance.operations.Start(c.life.bgCtx)
		}
		if c.maintenance.scheduler != nil {
			c.maintenance.scheduler.Start(c.life.bgCtx)
		}
		c.core.reporter.Start(c.life.bgCtx)
		c.defences.overloadRep.Start(c.life.bgCtx)
		c.identity.auth.failures.Start(c.life.bgCtx)
		c.maintenance.throughput.Start(c.life.bgCtx)
		c.life.watchesDone = make(chan struct{})
		go func() {
			defer close(c.life.watchesDone)
			c.core.watches.run(c.life.bgCtx, c.log)
		}()
		c.life.readinessDone = make(chan struct{})
		go func() {
			defer close(c.life.readinessDone)
			c.runReadiness(c.life.bgCtx)
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
	c.life.shutdownOnce.Do(func() { c.life.shutdownErr = c.shutdown(ctx) })
	return c.life.shutdownErr
}

func (c *Coordinator) shutdown(ctx context.Context) error {
	grace := c.cfg.ShutdownGrace
	c.log.InfoContext(ctx, "leasehold coordinator shutting down", slog.Duration("grace", grace))

	// 1.
	c.markShuttingDown()

	// 2.
	c.core.dispatcher.Quiesce()
	sessions := c.core.streams.list("", true)
	close(c.life.closing)

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
	c.life.bgCancel(errShuttingDown)
	c.core.dispatcher.Stop()
	c.maintenance.reaper.Stop()
	c.maintenance.pruner.Stop()
	if c.maintenance.operations != nil {
		c.maintenance.operations.Stop()
	}
	if c.maintenance.scheduler != nil {
		c.maintenance.scheduler.Stop()
	}
	c.core.reporter.Stop()
	c.defences.overloadRep.Stop()
	c.identity.auth.failures.Stop()
	c.maintenance.throughput.Stop()
	c.probes.queueCounts.wg.Wait()
	c.life.startOnce.Do(func() {}) // a Serve after Shutdown starts nothing
	if c.life.readinessDone != nil {
		<-c.life.readinessDone
	}
	if c.life.watchesDone != nil {
		<-c.life.watchesDone
	}
	c.core.reporter.runOnce(ctx, activityCounts{})

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
	return c.core.streams.count()
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
		c.maintenance.reaper.Expect(first)
	}
}

// reaped is told of the expired leases the reaper ended: their streams
// stop counting them, watchers wake, and requeued jobs wake dispatch.
func (c *Coordinator) reaped(res store.ReapResult) {
	for _, j := range res.Jobs {
		c.core.activity.ended(j.State)
		c.leaseEnded(j.Tenant, j)
	}
	for _, q := range res.Requeued {
		c.core.dispatcher.Wake(q.Tenant, q.Queue)
	}
	for _, j := range res.Jobs {
		c.core.watches.notify(j.Tenant, j.ID)
	}
}

// holder returns the stream on this coordinator through which worker
// holds leases, if any.
func (c *Coordinator) holder(tenant, worker string) *session {
	return c.core.streams.get(tenant, worker)
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
	ws := c.core.dispatcher.Waiters()
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.Worker)
	}
	return out
}
