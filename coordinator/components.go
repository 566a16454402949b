package coordinator

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/health"

	"github.com/leasehold/leasehold/coordinator/bulk"
	"github.com/leasehold/leasehold/coordinator/dispatch"
	"github.com/leasehold/leasehold/coordinator/reaper"
	"github.com/leasehold/leasehold/coordinator/retention"
	"github.com/leasehold/leasehold/coordinator/scheduler"
)

// core owns what a lease goes through on this coordinator: the dispatch
// hand-off, the registry of worker streams, the watches that wake on a
// job's change, and the metrics and activity counts of it all.
type core struct {
	dispatcher *dispatch.Dispatcher
	// streams maps each worker id to its Connect stream (session.go).
	streams streamRegistry
	// watches wakes WatchJob streams (watch_hub.go).
	watches *watchHub
	// seen remembers the workers lately active here (ListWorkers).
	seen     *seenWorkers
	metrics  *Metrics
	tracer   trace.Tracer
	activity activity
	// reporter logs the activity counts once per interval.
	reporter *activityReporter
}

// identity resolves who calls: the authenticator (auth.go), the owner of
// each worker id (worker_identity.go) and the signer of lease secrets
// (lease_secret.go).
type identity struct {
	auth         *authenticator
	workerOwners workerOwners
	leases       leaseSigner
}

// defences are the bounds a client meets before a call does anything
// (refusals.go, preauth.go, rate_limiter.go, health_watch_limit.go).
type defences struct {
	// preAuth throttles calls before authentication.
	preAuth     *preAuthLimits
	unaryLimit  *rateLimiter
	streamLimit *rateLimiter
	shedder     *loadShedder
	// healthWatches caps grpc.health.v1 Watch streams.
	healthWatches *healthWatchLimit
	// overload counts the refusals; overloadRep logs them.
	overload    overloadCounts
	overloadRep *overloadReporter
}

// maintenance is the background work of the coordinator.
type maintenance struct {
	reaper *reaper.Reaper
	pruner *retention.Pruner
	// scheduler fires due schedules; nil when Config.SchedulePollInterval
	// is negative.
	scheduler *scheduler.Scheduler
	// operations runs bulk operations; nil when
	// Config.OperationPollInterval is negative.
	operations *bulk.Runner
	// throughput samples the jobs finished per interval (throughput.go).
	throughput *throughputSampler
}

// probes answer how the coordinator and its queues are doing: the
// grpc.health.v1 server, readiness (health.go) and the cached queue
// readings (metrics.go, queue_counts.go).
type probes struct {
	health *health.Server
	ready  readiness
	// queueGauges caches the store reading behind the queue gauges.
	queueGauges queueGauges
	// queueCounts keeps the counts of ListQueues calls that accept stale
	// ones.
	queueCounts queueCounts
}

// lifecycle is what Serve starts and Shutdown stops.
type lifecycle struct {
	// bgCtx carries the dispatcher, maintenance and every stream session;
	// cancelling it (with errShuttingDown) is the hard stop.
	bgCtx    context.Context
	bgCancel context.CancelCauseFunc
	// closing is closed at shutdown step 2: long-polls and WatchJob end,
	// new Connect streams are refused.
	closing chan struct{}
	// watchesDone and readinessDone are closed when the watch hub's store
	// subscription and the store prober have returned (nil until Serve).
	watchesDone   chan struct{}
	readinessDone chan struct{}

	startOnce    sync.Once
	shutdownOnce sync.Once
	shutdownErr  error
}
