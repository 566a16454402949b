package coordinator

import (
	"cmp"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/coordinator/bulk"
	"github.com/leasehold/leasehold/coordinator/dispatch"
	"github.com/leasehold/leasehold/coordinator/retention"
	"github.com/leasehold/leasehold/coordinator/scheduler"
	"github.com/leasehold/leasehold/store"
)

// Defaults of Config. Each field's doc names the constant it falls back to.
const (
	// TenantDefault is the tenant every call runs as with AuthNone (with
	// authentication, each caller's principal has its own).
	TenantDefault = "default"
	// VersionDefault is reported by GetVersion when Config.Version is empty.
	VersionDefault = "dev"
	// PayloadMaxBytesDefault bounds job payloads, results, checkpoint state
	// and effect results accepted over the API (1 MiB).
	PayloadMaxBytesDefault = 1 << 20
	// IdempotencyWindowDefault is how long a request_id is remembered.
	IdempotencyWindowDefault = store.IdempotencyWindowDefault
	// StreamUnackedLeasesDefault and StreamUnackedBytesDefault bound what
	// one stream may have been pushed and not acknowledged: 64 leases,
	// 16 MiB. An acknowledging worker answers within a round trip, so the
	// bounds only cap a burst; a stream that never reads holds no more.
	StreamUnackedLeasesDefault = 64
	StreamUnackedBytesDefault  = 16 << 20
	// StreamUnackedBytesMax is the largest StreamUnackedBytes (1 GiB).
	StreamUnackedBytesMax = 1 << 30
	// StreamAckTimeoutDefault is how long a lease_acks worker may leave a
	// pushed lease unacknowledged before its stream is ended.
	StreamAckTimeoutDefault = 10 * time.Second
	// StreamAckTimeoutMin and StreamAckTimeoutMax bound StreamAckTimeout.
	StreamAckTimeoutMin = 10 * time.Millisecond
	StreamAckTimeoutMax = 10 * time.Minute
	// UnaryTimeoutDefault is the server-side deadline of a unary call whose
	// client set none (or a longer one).
	UnaryTimeoutDefault = 30 * time.Second
	// PollIntervalDefault is the dispatcher's first fallback poll interval;
	// it doubles while polls find nothing, up to PollMaxIntervalDefault.
	PollIntervalDefault = dispatch.PollIntervalDefault
	// PollMaxIntervalDefault caps the dispatcher's poll backoff.
	PollMaxIntervalDefault = dispatch.PollMaxIntervalDefault
	// RetentionDefault is how long finished jobs are kept (7 days).
	RetentionDefault = retention.RetentionDefault
	// RetentionIntervalDefault is how often maintenance runs.
	RetentionIntervalDefault = retention.IntervalDefault
	// ShutdownGraceDefault bounds how long streams get to drain and how long
	// GracefulStop may wait.
	ShutdownGraceDefault = 10 * time.Second
	// ClaimWaitMax bounds a unary Claim's long-poll wait.
	ClaimWaitMax = 60 * time.Second
	// MaxConcurrentStreamsDefault bounds concurrent RPCs per client
	// connection (HTTP/2 streams).
	MaxConcurrentStreamsDefault = 1000
	// ListPageBytesDefault is the byte budget of one ListJobs or
	// ListDeadJobs page (store.PageBytesDefault, 2 MiB): under grpc-go's
	// default 4 MiB receive limit with room for one large first job.
	ListPageBytesDefault = store.PageBytesDefault
	// ListPageBytesMax bounds ListPageBytes: the send limit is derived from
	// it, and a page is held in memory while it is encoded.
	ListPageBytesMax = 64 << 20
	// ConnectionTimeoutDefault bounds a new connection's handshake (TLS and
	// the HTTP/2 preface): a peer that opens a socket and sends nothing is
	// closed after it instead of grpc-go's 120s. 5s is ample for a TLS
	// handshake over a slow link.
	ConnectionTimeoutDefault = 5 * time.Second
	// MaxConnectionsDefault caps the connections a listener holds at once,
	// handshaking or established. Beyond it new connections wait in the
	// kernel's accept queue until one closes. Workers and producers each
	// need one connection (they multiplex every call over it), so 10,000
	// is a large fleet per coordinator, and it stays under a typical 20k+
	// file-descriptor limit.
	MaxConnectionsDefault = 10_000
	// MaxHeaderListBytesDefault bounds the headers (metadata) of one call,
	// the sum of each field's name, value and 32 bytes (HTTP/2's
	// SETTINGS_MAX_HEADER_LIST_SIZE). grpc-go reads a call's headers
	// before any interceptor runs, authentication included, and otherwise
	// accepts 16 MiB per call: a few calls with no key could take
	// hundreds of megabytes. 16 KiB holds an authorization header, trace
	// context and a user agent many times over; grpc-go itself is moving
	// its default to 8 KiB. A larger header list ends the call (a header
	// block far beyond it, the connection) before it is decoded.
	MaxHeaderListBytesDefault = 16 << 10
	// MaxHeaderListBytesMin and MaxHeaderListBytesMax bound
	// MaxHeaderListBytes.
	MaxHeaderListBytesMin = 1 << 10
	MaxHeaderListBytesMax = 1 << 20
	// MaxConnectionAgeGraceDefault is how long calls on a connection that
	// reached MaxConnectionAge get to finish after its GOAWAY.
	MaxConnectionAgeGraceDefault = 30 * time.Second
	// UnaryRateDefault and UnaryBurstDefault are each caller's token
	// bucket for unary calls: 1,000 calls a second sustained, bursts of
	// 2,000. A BatchCreateJobs of 1,000 jobs is one call, and a fleet
	// sharing one worker key renews every lease in one call per worker per
	// heartbeat, so this is far above honest use and far below what one
	// client can send.
	UnaryRateDefault  = 1000
	UnaryBurstDefault = 2000
	// StreamOpenRateDefault and StreamOpenBurstDefault are each caller's
	// token bucket for opening streams (Connect, WatchJob): 100 a second,
	// bursts of 1,000 (a fleet reconnecting after a coordinator restart).
	StreamOpenRateDefault  = 100
	StreamOpenBurstDefault = 1000
	// ConnectionCallRateDefault and ConnectionCallBurstDefault are each
	// client connection's token bucket for unary calls, taken before
	// authentication (so a caller with a wrong key or none is throttled
	// too): twice a principal's, since one connection normally carries one
	// principal's calls.
	ConnectionCallRateDefault  = 2000
	ConnectionCallBurstDefault = 4000
	// AddressCallRateDefault and AddressCallBurstDefault are the same per
	// remote address (many clients may share one behind NAT).
	AddressCallRateDefault  = 5000
	AddressCallBurstDefault = 10_000
	// ConnectionStreamOpenRateDefault and ConnectionStreamOpenBurstDefault
	// are each connection's bucket for opening streams before
	// authentication; AddressStreamOpenRateDefault and
	// AddressStreamOpenBurstDefault each remote address's (a fleet behind
	// one address reconnecting at once: up to MaxConnectionsDefault).
	ConnectionStreamOpenRateDefault  = 100
	ConnectionStreamOpenBurstDefault = 1000
	AddressStreamOpenRateDefault     = 1000
	AddressStreamOpenBurstDefault    = 10_000
	// TrustedProxiesMax bounds TrustedProxies.
	TrustedProxiesMax = 64
	// AuthFailureAuditIntervalDefault is the shortest time between two
	// audit events summarising refused authentications.
	AuthFailureAuditIntervalDefault = time.Minute
	// MaxInFlightReadsDefault and MaxInFlightWritesDefault bound the unary
	// calls doing store work at once, per lane (reads: Get*/List*; writes:
	// everything else but Claim). Above the store's connection pool and
	// its committers' batches (a create flush takes up to 32 calls), so
	// the store stays busy; low enough that a flood waits in bounded
	// memory for at most ShedWait. Under the abuse suite's flood of 10,000
	// creates, more writes in flight only made every call slower.
	MaxInFlightReadsDefault  = 256
	MaxInFlightWritesDefault = 256
	// ShedWaitDefault is how long a call waits for a slot of its lane
	// before it is refused OVERLOADED.
	ShedWaitDefault = 500 * time.Millisecond
	// WatchersPerConnectionMaxDefault caps WatchJob streams per client
	// connection (below MaxConcurrentStreamsDefault, so a connection that
	// watches still has streams left for its other calls).
	WatchersPerConnectionMaxDefault = 500
	// WatchersMaxDefault caps WatchJob streams per coordinator. An idle
	// watcher costs one goroutine and a map entry (~10 KB), so 20,000 are
	// ~200 MB at most.
	WatchersMaxDefault = 20_000
	// HealthWatchersPerConnectionMaxDefault and HealthWatchersMaxDefault
	// cap grpc.health.v1 Watch streams per client connection and per
	// coordinator. Health needs no credentials, so these caps are what
	// stands between an anonymous client and a goroutine per stream. A
	// gRPC client's health checking holds one Watch per connection and
	// probes use Check (not limited); 1,000 watches cost ~10 MB.
	HealthWatchersPerConnectionMaxDefault = 8
	HealthWatchersMaxDefault              = 1000
	// AuthCacheTTLDefault is how long a verified principal is trusted
	// before the store is asked again: the longest a key revoked through
	// another coordinator keeps working here.
	AuthCacheTTLDefault = 2 * time.Second
	// AuthCacheTTLMax bounds AuthCacheTTL: a revoked key must stop
	// working everywhere within 5s (streams re-check every TTL, and a
	// cache entry may be up to a TTL old then).
	AuthCacheTTLMax = 2500 * time.Millisecond
)

// Config configures a Coordinator. The zero value of every field except
// Store means its default; WithDefaults fills them in.
type Config struct {
	// Store is the durable core. Required. Shutdown closes it as its last
	// step unless KeepStoreOpen is set.
	Store store.Store
	// KeepStoreOpen leaves the Store open after Shutdown, for callers that
	// own it. Default false: the coordinator closes what it was given.
	KeepStoreOpen bool
	// Logger receives the coordinator's logs. Nil discards them.
	Logger *slog.Logger
	// Tenant is the tenant every call runs as with Auth AuthNone; with
	// authentication the tenant is the caller's principal's. Default
	// TenantDefault ("default").
	Tenant string
	// Auth is how callers authenticate: AuthNone (default), AuthAPIKey or
	// AuthMTLS. Whatever the mode, grpc.health.v1 and reflection need no
	// credentials.
	Auth AuthMode
	// AuthCacheTTL is how long a verified principal is cached. Default
	// AuthCacheTTLDefault (2s); at most AuthCacheTTLMax.
	AuthCacheTTL time.Duration
	// TLS, when set, serves TLS with it (its certificates may be reloaded
	// through GetCertificate or GetConfigForClient). AuthMTLS needs it to
	// require and verify client certificates. Nil: plaintext.
	TLS *tls.Config
	// ID names this coordinator instance (Welcome, ListWorkers). Default
	// hostname-pid-random.
	ID string
	// Version is reported by GetVersion. Default VersionDefault ("dev").
	Version string
	// PayloadMaxBytes bounds payloads, results, checkpoint state and effect
	// results. Default PayloadMaxBytesDefault (1 MiB); at most
	// store.PayloadMaxBytes.
	PayloadMaxBytes int
	// ListPageBytes is the byte budget of one ListJobs or ListDeadJobs
	// page: a page whose jobs would exceed it ends early with a
	// next_page_token (it always holds one job). Default
	// ListPageBytesDefault (2 MiB); at most ListPageBytesMax.
	ListPageBytes int
	// DefaultLeaseDuration is the lease of a Renew or stream heartbeat that
	// names none, and the lease announced in Welcome when Hello names none.
	// Claims without a duration use their queue policy's default. Default
	// store.LeaseDurationDefault (30s); within [1s, 1h].
	DefaultLeaseDuration time.Duration
	// StreamUnackedLeases and StreamUnackedBytes bound the leases (and
	// their encoded bytes) pushed to one Connect stream and not yet
	// acknowledged by its worker (a LeaseAck, or a heartbeat or report
	// naming the lease): at either bound nothing more is pushed to the
	// stream until acknowledgements come. A claim for the stream takes no
	// more leases than fit in the bytes left if each were as large as the
	// largest lease pushed to it so far (the payload limit before the
	// first), and at least one. Defaults StreamUnackedLeasesDefault (64) and
	// StreamUnackedBytesDefault (16 MiB); see docs/streams.md.
	StreamUnackedLeases int
	StreamUnackedBytes  int
	// StreamAckTimeout is how long a lease pushed to a stream whose worker
	// declared the "lease_acks" feature may stay unacknowledged: past it
	// the stream is ended (RESOURCE_EXHAUSTED, STREAM_NOT_ACKNOWLEDGING)
	// and its unacknowledged leases are released. Default
	// StreamAckTimeoutDefault (10s).
	StreamAckTimeout time.Duration
	// StreamBatchesOff turns stream batches off: GetVersion advertises
	// neither "lease_batches" nor "report_batches", every lease and report
	// answer is pushed in a message of its own, and a ReportBatch ends
	// the stream (INVALID_ARGUMENT), as with a coordinator that predates
	// them. A switch for rolling back, and for testing workers against
	// such a coordinator; see docs/streams.md.
	StreamBatchesOff bool
	// IdempotencyWindow is how long a request_id is remembered. Default
	// IdempotencyWindowDefault (24h).
	IdempotencyWindow time.Duration
	// UnaryTimeout is the server-side deadline of unary calls. A long-poll
	// Claim gets its wait plus this margin instead. Default
	// UnaryTimeoutDefault (30s).
	UnaryTimeout time.Duration
	// PollInterval is the dispatcher's fallback polling interval when
	// streams or long-polls wait for work; it backs off up to
	// PollMaxInterval while polls find nothing. Default PollIntervalDefault
	// (1s).
	PollInterval time.Duration
	// PollMaxInterval caps the poll backoff. Default PollMaxIntervalDefault
	// (5s), and never below PollInterval.
	PollMaxInterval time.Duration
	// ReapIntervalMax bounds how long the lease reaper sleeps between looks
	// when it knows of no earlier expiry (leases granted by another
	// coordinator, or an injected clock that moved). Default
	// reaper.IntervalMaxDefault (2s).
	ReapIntervalMax time.Duration
	// SchedulePollInterval is how often the scheduler looks for due
	// schedules. Default scheduler.PollIntervalDefault (200ms); negative
	// disables the scheduler on this coordinator (others still fire).
	SchedulePollInterval time.Duration
	// SchedulesPerTenantMax caps the schedules of one tenant. Default
	// store.ScheduleLimitDefault (10,000).
	SchedulesPerTenantMax int
	// OperationsPerTenantMax is how many bulk operations a tenant may run
	// at once. Default store.OperationsRunningDefault (2).
	OperationsPerTenantMax int
	// OperationRate is how many jobs per second this coordinator's bulk
	// operation runner handles at most (it pauses between chunks), so
	// that live traffic keeps its latency. Default bulk.RateDefault
	// (2,000); negative: unpaced.
	OperationRate float64
	// OperationChunk is the jobs per chunk transaction. Default
	// bulk.ChunkDefault (250); at most store.OperationChunkMax (5,000).
	OperationChunk int
	// OperationLease is how long a coordinator holds a bulk operation
	// past its last chunk: how long a dead coordinator's operation waits
	// before another resumes it. Default bulk.LeaseDefault (30s).
	OperationLease time.Duration
	// OperationPollInterval is how often an idle runner looks for
	// operations; negative disables the runner on this coordinator
	// (others still run them). Default bulk.PollIntervalDefault (1s).
	OperationPollInterval time.Duration
	// OperationRetention is how long finished operations are kept.
	// Default bulk.RetentionDefault (7 days); negative keeps them.
	OperationRetention time.Duration
	// Retention is how long finished jobs are kept before pruning. Zero
	// means RetentionDefault (7 days); negative disables pruning (expired
	// idempotency records are still removed).
	Retention time.Duration
	// RetentionInterval is how often maintenance runs. Default
	// RetentionIntervalDefault (1m).
	RetentionInterval time.Duration
	// ShutdownGrace bounds how long streams get to drain after Drain and,
	// separately, how long GracefulStop may wait before Stop. Default
	// ShutdownGraceDefault (10s).
	ShutdownGrace time.Duration
	// MaxConcurrentStreams bounds concurrent RPCs per client connection.
	// Default MaxConcurrentStreamsDefault (1000).
	MaxConcurrentStreams uint32
	// ConnectionTimeout bounds a new connection's handshake. Default
	// ConnectionTimeoutDefault (5s).
	ConnectionTimeout time.Duration
	// MaxConnections caps the connections each listener holds at once (a
	// limiting net.Listener: further connections wait to be accepted).
	// Default MaxConnectionsDefault (10,000).
	MaxConnections int
	// MaxHeaderListBytes bounds the headers (metadata) of one call.
	// Default MaxHeaderListBytesDefault (16 KiB); within
	// [MaxHeaderListBytesMin, MaxHeaderListBytesMax].
	MaxHeaderListBytes int
	// MaxConnectionAge, when positive, ends each connection after about
	// this long (grpc-go adds ±10% jitter) with a GOAWAY, so clients
	// reconnect and spread over the replicas behind a load balancer (a
	// Kubernetes Service balances connections, not calls). Calls in flight
	// get MaxConnectionAgeGrace to finish; worker streams still open then
	// are cut, and the SDK reconnects. Default 0: connections live for
	// ever (worker streams are meant to last hours).
	MaxConnectionAge time.Duration
	// MaxConnectionAgeGrace is the grace after MaxConnectionAge. Default
	// MaxConnectionAgeGraceDefault (30s).
	MaxConnectionAgeGrace time.Duration
	// UnaryRate and UnaryBurst are each caller's token bucket for unary
	// calls (per principal; per client connection with AuthNone). Refused
	// calls get RESOURCE_EXHAUSTED, reason RATE_LIMITED, with a RetryInfo
	// delay. Defaults UnaryRateDefault (1,000/s) and UnaryBurstDefault
	// (2,000); a negative rate disables the limit.
	UnaryRate  float64
	UnaryBurst int
	// StreamOpenRate and StreamOpenBurst are the same for opening streams
	// (Connect, WatchJob). Defaults StreamOpenRateDefault (100/s) and
	// StreamOpenBurstDefault (1,000); a negative rate disables the limit.
	StreamOpenRate  float64
	StreamOpenBurst int
	// ConnectionCallRate and ConnectionCallBurst, AddressCallRate and
	// AddressCallBurst are token buckets for unary calls per client
	// connection and per remote address, taken before authentication
	// (RESOURCE_EXHAUSTED, RATE_LIMITED, with a RetryInfo delay).
	// ConnectionStreamOpenRate, ConnectionStreamOpenBurst,
	// AddressStreamOpenRate and AddressStreamOpenBurst are the same for
	// opening streams. Defaults ConnectionCallRateDefault (2,000/s),
	// ConnectionCallBurstDefault (4,000), AddressCallRateDefault (5,000/s),
	// AddressCallBurstDefault (10,000), ConnectionStreamOpenRateDefault
	// (100/s), ConnectionStreamOpenBurstDefault (1,000),
	// AddressStreamOpenRateDefault (1,000/s), AddressStreamOpenBurstDefault
	// (10,000); a negative rate disables a limit.
	ConnectionCallRate        float64
	ConnectionCallBurst       int
	AddressCallRate           float64
	AddressCallBurst          int
	ConnectionStreamOpenRate  float64
	ConnectionStreamOpenBurst int
	AddressStreamOpenRate     float64
	AddressStreamOpenBurst    int
	// TrustedProxies are the networks of proxies whose x-forwarded-for
	// header is believed: a call from one of them counts against the
	// address it forwarded (the rightmost one not itself trusted), not
	// against the proxy. Empty (the default): the peer's address always;
	// x-forwarded-for is ignored. At most TrustedProxiesMax.
	TrustedProxies []netip.Prefix
	// MaxInFlightReads and MaxInFlightWrites bound the unary calls doing
	// store work at once (see loadShedder); a call that finds its lane
	// full for ShedWait is refused UNAVAILABLE, reason OVERLOADED, with a
	// RetryInfo delay. Defaults MaxInFlightReadsDefault (256),
	// MaxInFlightWritesDefault (256), ShedWaitDefault (500ms).
	MaxInFlightReads  int
	MaxInFlightWrites int
	ShedWait          time.Duration
	// WatchersPerConnectionMax and WatchersMax cap WatchJob streams per
	// client connection and per coordinator (RESOURCE_EXHAUSTED, reason
	// WATCH_LIMIT). Defaults WatchersPerConnectionMaxDefault (500) and
	// WatchersMaxDefault (20,000).
	WatchersPerConnectionMax int
	WatchersMax              int
	// HealthWatchersPerConnectionMax and HealthWatchersMax cap
	// grpc.health.v1 Watch streams per client connection and per
	// coordinator (RESOURCE_EXHAUSTED, reason WATCH_LIMIT), counted before
	// anything else runs. Defaults HealthWatchersPerConnectionMaxDefault
	// (8) and HealthWatchersMaxDefault (1,000).
	HealthWatchersPerConnectionMax int
	HealthWatchersMax              int
	// OverloadLogInterval is how often the refusals of the rate limits,
	// the load shedder and the watch caps are logged, at Warn, as one
	// summary line with counts (when there were any). Default
	// OverloadLogIntervalDefault (10s); negative disables.
	OverloadLogInterval time.Duration
	// AuthFailureAuditInterval is the shortest time between two
	// AUTHENTICATION_FAILURES audit events of this coordinator (one when
	// there were failures: a store write per interval, never per
	// failure). Default AuthFailureAuditIntervalDefault (1m); negative
	// disables.
	AuthFailureAuditInterval time.Duration
	// ActivityLogInterval is how often the coordinator logs its activity
	// counters (jobs created, leases granted, outcomes) at Info, when they
	// changed. Default ActivityLogIntervalDefault (10s); negative disables.
	ActivityLogInterval time.Duration
	// ReadinessProbeInterval is how often the store is probed (Store.Now)
	// for the readiness health status; a probe also times out after it.
	// Default ReadinessProbeIntervalDefault (5s).
	ReadinessProbeInterval time.Duration
	// OutageLogInterval is how often an outage of the store that goes on
	// is summarised at Warn (it is logged once when it starts and once when
	// it ends). Default OutageLogIntervalDefault (30s).
	OutageLogInterval time.Duration
	// QueueMetricsInterval is how old the queue gauges may get before a
	// collection reads the store again. Default QueueMetricsIntervalDefault
	// (1s).
	QueueMetricsInterval time.Duration
	// ThroughputInterval is the width of one throughput sample: every
	// interval the coordinator counts the jobs of every queue that
	// finished in it and keeps the last ThroughputSamples
	// (QueueStats.throughput). Default ThroughputIntervalDefault (10s);
	// negative disables.
	ThroughputInterval time.Duration
	// WorkerSeenWindow is how long a unary-only worker stays in ListWorkers
	// after its last call. Default WorkerSeenWindowDefault (2m).
	WorkerSeenWindow time.Duration
	// Metrics records the coordinator's metrics. Nil: NewMetrics over
	// MeterProvider. Pass one created with NewMetrics when the store's
	// committer reports into it too.
	Metrics *Metrics
	// MeterProvider receives the RPC metrics of the otelgrpc stats handler
	// (and the coordinator's own, when Metrics is nil). Nil: otel's global
	// MeterProvider.
	MeterProvider metric.MeterProvider
	// TracerProvider records the RPC spans of the otelgrpc stats handler
	// and the coordinator's lease spans. Nil: otel's global
	// TracerProvider.
	TracerProvider trace.TracerProvider
	// Now, when set, is passed as Now to every store call and used for the
	// coordinator's own time decisions, so tests can cross lease expiry
	// without sleeping. Nil in production: the store's clock is the one
	// authority.
	Now func() time.Time
}

// WithDefaults returns a copy of c with unset fields filled in. It never
// changes c.
func (c Config) WithDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Tenant = cmp.Or(c.Tenant, TenantDefault)
	c.Auth = cmp.Or(c.Auth, AuthNone)
	c.AuthCacheTTL = cmp.Or(c.AuthCacheTTL, AuthCacheTTLDefault)
	if c.ID == "" {
		c.ID = defaultID()
	}
	c.Version = cmp.Or(c.Version, VersionDefault)
	c.PayloadMaxBytes = cmp.Or(c.PayloadMaxBytes, PayloadMaxBytesDefault)
	c.ListPageBytes = cmp.Or(c.ListPageBytes, ListPageBytesDefault)
	c.DefaultLeaseDuration = cmp.Or(c.DefaultLeaseDuration, store.LeaseDurationDefault)
	c.StreamUnackedLeases = cmp.Or(c.StreamUnackedLeases, StreamUnackedLeasesDefault)
	c.StreamUnackedBytes = cmp.Or(c.StreamUnackedBytes, StreamUnackedBytesDefault)
	c.StreamAckTimeout = cmp.Or(c.StreamAckTimeout, StreamAckTimeoutDefault)
	c.IdempotencyWindow = cmp.Or(c.IdempotencyWindow, IdempotencyWindowDefault)
	c.UnaryTimeout = cmp.Or(c.UnaryTimeout, UnaryTimeoutDefault)
	c.PollInterval = cmp.Or(c.PollInterval, PollIntervalDefault)
	c.PollMaxInterval = max(cmp.Or(c.PollMaxInterval, PollMaxIntervalDefault), c.PollInterval)
	c.Retention = cmp.Or(c.Retention, RetentionDefault)
	c.SchedulePollInterval = cmp.Or(c.SchedulePollInterval, scheduler.PollIntervalDefault)
	c.SchedulesPerTenantMax = cmp.Or(c.SchedulesPerTenantMax, store.ScheduleLimitDefault)
	c.RetentionInterval = cmp.Or(c.RetentionInterval, RetentionIntervalDefault)
	c.OperationsPerTenantMax = cmp.Or(c.OperationsPerTenantMax, store.OperationsRunningDefault)
	c.OperationRate = cmp.Or(c.OperationRate, bulk.RateDefault)
	c.OperationChunk = cmp.Or(c.OperationChunk, bulk.ChunkDefault)
	c.OperationLease = cmp.Or(c.OperationLease, bulk.LeaseDefault)
	c.OperationPollInterval = cmp.Or(c.OperationPollInterval, bulk.PollIntervalDefault)
	c.OperationRetention = cmp.Or(c.OperationRetention, bulk.RetentionDefault)
	c.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	c.ActivityLogInterval = cmp.Or(c.ActivityLogInterval, ActivityLogIntervalDefault)
	c.ConnectionTimeout = cmp.Or(c.ConnectionTimeout, ConnectionTimeoutDefault)
	c.UnaryRate = cmp.Or(c.UnaryRate, UnaryRateDefault)
	c.UnaryBurst = cmp.Or(c.UnaryBurst, UnaryBurstDefault)
	c.StreamOpenRate = cmp.Or(c.StreamOpenRate, StreamOpenRateDefault)
	c.StreamOpenBurst = cmp.Or(c.StreamOpenBurst, StreamOpenBurstDefault)
	c.ConnectionCallRate = cmp.Or(c.ConnectionCallRate, ConnectionCallRateDefault)
	c.ConnectionCallBurst = cmp.Or(c.ConnectionCallBurst, ConnectionCallBurstDefault)
	c.AddressCallRate = cmp.Or(c.AddressCallRate, AddressCallRateDefault)
	c.AddressCallBurst = cmp.Or(c.AddressCallBurst, AddressCallBurstDefault)
	c.ConnectionStreamOpenRate = cmp.Or(c.ConnectionStreamOpenRate, ConnectionStreamOpenRateDefault)
	c.ConnectionStreamOpenBurst = cmp.Or(c.ConnectionStreamOpenBurst, ConnectionStreamOpenBurstDefault)
	c.AddressStreamOpenRate = cmp.Or(c.AddressStreamOpenRate, AddressStreamOpenRateDefault)
	c.AddressStreamOpenBurst = cmp.Or(c.AddressStreamOpenBurst, AddressStreamOpenBurstDefault)
	c.MaxInFlightReads = cmp.Or(c.MaxInFlightReads, MaxInFlightReadsDefault)
	c.MaxInFlightWrites = cmp.Or(c.MaxInFlightWrites, MaxInFlightWritesDefault)
	c.ShedWait = cmp.Or(c.ShedWait, ShedWaitDefault)
	c.WatchersPerConnectionMax = cmp.Or(c.WatchersPerConnectionMax, WatchersPerConnectionMaxDefault)
	c.WatchersMax = cmp.Or(c.WatchersMax, WatchersMaxDefault)
	c.HealthWatchersPerConnectionMax = cmp.Or(c.HealthWatchersPerConnectionMax, HealthWatchersPerConnectionMaxDefault)
	c.HealthWatchersMax = cmp.Or(c.HealthWatchersMax, HealthWatchersMaxDefault)
	c.OverloadLogInterval = cmp.Or(c.OverloadLogInterval, OverloadLogIntervalDefault)
	c.AuthFailureAuditInterval = cmp.Or(c.AuthFailureAuditInterval, AuthFailureAuditIntervalDefault)
	c.MaxConnections = cmp.Or(c.MaxConnections, MaxConnectionsDefault)
	c.MaxHeaderListBytes = cmp.Or(c.MaxHeaderListBytes, MaxHeaderListBytesDefault)
	c.MaxConnectionAgeGrace = cmp.Or(c.MaxConnectionAgeGrace, MaxConnectionAgeGraceDefault)
	c.MaxConcurrentStreams = cmp.Or(c.MaxConcurrentStreams, MaxConcurrentStreamsDefault)
	c.ReadinessProbeInterval = cmp.Or(c.ReadinessProbeInterval, ReadinessProbeIntervalDefault)
	c.OutageLogInterval = cmp.Or(c.OutageLogInterval, OutageLogIntervalDefault)
	c.QueueMetricsInterval = cmp.Or(c.QueueMetricsInterval, QueueMetricsIntervalDefault)
	c.ThroughputInterval = cmp.Or(c.ThroughputInterval, ThroughputIntervalDefault)
	c.WorkerSeenWindow = cmp.Or(c.WorkerSeenWindow, WorkerSeenWindowDefault)
	if c.MeterProvider == nil {
		c.MeterProvider = otel.GetMeterProvider()
	}
	if c.TracerProvider == nil {
		c.TracerProvider = otel.GetTracerProvider()
	}
	return c
}

// Validate reports every problem of a config after defaults, so call it on
// WithDefaults' result. It never panics.
func (c Config) Validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("coordinator: Store is required"))
	}
	if !store.ValidWorkerID(c.Tenant) {
		errs = append(errs, fmt.Errorf("coordinator: Tenant %q must be 1-128 characters of [A-Za-z0-9._:@/-]", c.Tenant))
	}
	switch c.Auth {
	case AuthNone, AuthAPIKey:
	case AuthMTLS:
		if c.TLS == nil || c.TLS.ClientAuth != tls.RequireAndVerifyClientCert {
			errs = append(errs, errors.New("coordinator: Auth mtls needs TLS that requires and verifies client certificates (ClientAuth RequireAndVerifyClientCert)"))
		}
	default:
		errs = append(errs, fmt.Errorf("coordinator: Auth %q must be none, api-key or mtls", c.Auth))
	}
	if c.AuthCacheTTL < 0 || c.AuthCacheTTL > AuthCacheTTLMax {
		errs = append(errs, fmt.Errorf("coordinator: AuthCacheTTL must be between 0 and %s", AuthCacheTTLMax))
	}
	if c.PayloadMaxBytes < 0 || c.PayloadMaxBytes > store.PayloadMaxBytes {
		errs = append(errs, fmt.Errorf("coordinator: PayloadMaxBytes must be in [1, %d]", store.PayloadMaxBytes))
	}
	if c.OperationChunk > store.OperationChunkMax {
		errs = append(errs, fmt.Errorf("coordinator: OperationChunk must be at most %d", store.OperationChunkMax))
	}
	if len(c.TrustedProxies) > TrustedProxiesMax {
		errs = append(errs, fmt.Errorf("coordinator: at most %d TrustedProxies", TrustedProxiesMax))
	}
	for _, p := range c.TrustedProxies {
		if !p.IsValid() {
			errs = append(errs, errors.New("coordinator: TrustedProxies holds an invalid network"))
		}
	}
	if c.MaxHeaderListBytes < MaxHeaderListBytesMin || c.MaxHeaderListBytes > MaxHeaderListBytesMax {
		errs = append(errs, fmt.Errorf("coordinator: MaxHeaderListBytes must be in [%d, %d]", MaxHeaderListBytesMin, MaxHeaderListBytesMax))
	}
	if c.ListPageBytes < 0 || c.ListPageBytes > ListPageBytesMax {
		errs = append(errs, fmt.Errorf("coordinator: ListPageBytes must be in [1, %d]", ListPageBytesMax))
	}
	if c.DefaultLeaseDuration < store.LeaseDurationMin || c.DefaultLeaseDuration > store.LeaseDurationMax {
		errs = append(errs, errors.New("coordinator: DefaultLeaseDuration must be between 1s and 1h"))
	}
	if c.StreamUnackedLeases < 1 || c.StreamUnackedLeases > CreditsMax {
		errs = append(errs, fmt.Errorf("coordinator: StreamUnackedLeases must be in [1, %d]", CreditsMax))
	}
	if c.StreamUnackedBytes < 1 || c.StreamUnackedBytes > StreamUnackedBytesMax {
		errs = append(errs, fmt.Errorf("coordinator: StreamUnackedBytes must be in [1, %d]", StreamUnackedBytesMax))
	}
	if c.StreamAckTimeout < StreamAckTimeoutMin || c.StreamAckTimeout > StreamAckTimeoutMax {
		errs = append(errs, fmt.Errorf("coordinator: StreamAckTimeout must be in [%v, %v]", StreamAckTimeoutMin, StreamAckTimeoutMax))
	}
	errs = append(errs, c.signErrors()...)
	return errors.Join(errs...)
}

// signErrors reports the rates that are not numbers and the counts and
// durations that are negative.
func (c Config) signErrors() []error {
	var errs []error
	for _, r := range []struct {
		name string
		v    float64
	}{
		{"UnaryRate", c.UnaryRate}, {"StreamOpenRate", c.StreamOpenRate},
		{"ConnectionCallRate", c.ConnectionCallRate}, {"AddressCallRate", c.AddressCallRate},
		{"ConnectionStreamOpenRate", c.ConnectionStreamOpenRate}, {"AddressStreamOpenRate", c.AddressStreamOpenRate},
	} {
		if math.IsNaN(r.v) || math.IsInf(r.v, 0) {
			errs = append(errs, fmt.Errorf("coordinator: %s must be a number of calls a second (negative: unlimited)", r.name))
		}
	}
	for _, n := range []struct {
		name string
		v    int
	}{
		{"MaxConnections", c.MaxConnections},
		{"UnaryBurst", c.UnaryBurst},
		{"StreamOpenBurst", c.StreamOpenBurst},
		{"ConnectionCallBurst", c.ConnectionCallBurst},
		{"AddressCallBurst", c.AddressCallBurst},
		{"ConnectionStreamOpenBurst", c.ConnectionStreamOpenBurst},
		{"AddressStreamOpenBurst", c.AddressStreamOpenBurst},
		{"MaxInFlightReads", c.MaxInFlightReads},
		{"MaxInFlightWrites", c.MaxInFlightWrites},
		{"WatchersPerConnectionMax", c.WatchersPerConnectionMax},
		{"WatchersMax", c.WatchersMax},
		{"HealthWatchersPerConnectionMax", c.HealthWatchersPerConnectionMax},
		{"HealthWatchersMax", c.HealthWatchersMax},
		{"SchedulesPerTenantMax", c.SchedulesPerTenantMax},
		{"OperationsPerTenantMax", c.OperationsPerTenantMax},
		{"OperationChunk", c.OperationChunk},
	} {
		if n.v < 0 {
			errs = append(errs, fmt.Errorf("coordinator: %s must not be negative", n.name))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"IdempotencyWindow", c.IdempotencyWindow},
		{"UnaryTimeout", c.UnaryTimeout},
		{"PollInterval", c.PollInterval},
		{"PollMaxInterval", c.PollMaxInterval},
		{"ReapIntervalMax", c.ReapIntervalMax},
		{"RetentionInterval", c.RetentionInterval},
		{"ShutdownGrace", c.ShutdownGrace},
		{"ReadinessProbeInterval", c.ReadinessProbeInterval},
		{"OutageLogInterval", c.OutageLogInterval},
		{"QueueMetricsInterval", c.QueueMetricsInterval},
		{"WorkerSeenWindow", c.WorkerSeenWindow},
		{"ConnectionTimeout", c.ConnectionTimeout},
		{"MaxConnectionAge", c.MaxConnectionAge},
		{"MaxConnectionAgeGrace", c.MaxConnectionAgeGrace},
		{"ShedWait", c.ShedWait},
		{"OperationLease", c.OperationLease},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("coordinator: %s must not be negative", d.name))
		}
	}
	return errs
}

// defaultID is hostname-pid-random: unique enough to tell coordinators
// apart in ListWorkers and logs.
func defaultID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "coordinator"
	}
	return host + "-" + strconv.Itoa(os.Getpid()) + "-" + store.NewID()[24:]
}
