package main

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/coordinator/bulk"
	"github.com/leasehold/leasehold/coordinator/scheduler"
	"github.com/leasehold/leasehold/store"
)

// limitFlags are serve's flags for the coordinator's limits: one flag per
// coordinator.Config limit, each with a LEASEHOLD_* environment variable
// (the flag's name in upper snake case). Their defaults are the
// coordinator's; the coordinator's Config documents each one and
// validates the values.
type limitFlags struct {
	streams              streamFlags // serve_streams.go
	payloadMaxBytes      int
	listPageBytes        int
	unaryTimeout         time.Duration
	maxConcurrentStreams uint32
	connectionTimeout    time.Duration
	maxConnections       int
	maxHeaderListBytes   int
	maxConnectionAge     time.Duration
	maxConnectionGrace   time.Duration
	unaryRate            float64
	unaryBurst           int
	streamOpenRate       float64
	streamOpenBurst      int
	connCallRate         float64
	connCallBurst        int
	addrCallRate         float64
	addrCallBurst        int
	connStreamRate       float64
	connStreamBurst      int
	addrStreamRate       float64
	addrStreamBurst      int
	trustedProxies       prefixList
	maxInFlightReads     int
	maxInFlightWrites    int
	shedWait             time.Duration
	watchersPerConn      int
	watchersMax          int
	healthWatchersPer    int
	healthWatchersMax    int
	overloadLogInterval  time.Duration
	authFailureAudit     time.Duration
	schedulesMax         int
	schedulePoll         time.Duration
	operationsMax        int
	operationRate        float64
	operationChunk       int
	operationLease       time.Duration
	operationPoll        time.Duration
	operationRetention   time.Duration
	retention            time.Duration
	retentionInterval    time.Duration
	idempotencyWindow    time.Duration
}

// limitEnv is the environment variable of a limit flag.
func limitEnv(flag string) string { return flagEnv(flag) }

func (c *cli) addLimitFlags(fs *pflag.FlagSet, f *limitFlags) {
	c.addStreamFlags(fs, f)
	env := func(flag string) string { return " (env " + limitEnv(flag) + ")" }
	fs.IntVar(&f.payloadMaxBytes, "max-payload-bytes", coordinator.PayloadMaxBytesDefault,
		"largest payload, result, checkpoint state or effect result accepted, in bytes; requests may be this plus 1 MiB"+env("max-payload-bytes"))
	fs.IntVar(&f.listPageBytes, "list-page-bytes", coordinator.ListPageBytesDefault,
		"byte budget of one ListJobs/ListDeadJobs page: a page ends early with a next_page_token"+env("list-page-bytes"))
	fs.DurationVar(&f.unaryTimeout, "unary-timeout", coordinator.UnaryTimeoutDefault,
		"server-side deadline of a unary call"+env("unary-timeout"))
	fs.Uint32Var(&f.maxConcurrentStreams, "max-concurrent-streams", coordinator.MaxConcurrentStreamsDefault,
		"concurrent calls (HTTP/2 streams) per client connection"+env("max-concurrent-streams"))
	fs.DurationVar(&f.connectionTimeout, "connection-timeout", coordinator.ConnectionTimeoutDefault,
		"a connection that has not finished its TLS/HTTP/2 handshake in this long is closed"+env("connection-timeout"))
	fs.IntVar(&f.maxConnections, "max-connections", coordinator.MaxConnectionsDefault,
		"connections held at once; more wait to be accepted"+env("max-connections"))
	fs.IntVar(&f.maxHeaderListBytes, "max-header-list-bytes", coordinator.MaxHeaderListBytesDefault,
		"largest headers (metadata) of one call, in bytes; read before authentication"+env("max-header-list-bytes"))
	fs.DurationVar(&f.maxConnectionAge, "max-connection-age", 0,
		"end each connection after about this long (GOAWAY) so clients rebalance across replicas; 0 = never"+env("max-connection-age"))
	fs.DurationVar(&f.maxConnectionGrace, "max-connection-age-grace", coordinator.MaxConnectionAgeGraceDefault,
		"how long calls on an aged-out connection get to finish"+env("max-connection-age-grace"))
	fs.Float64Var(&f.unaryRate, "unary-rate", coordinator.UnaryRateDefault,
		"unary calls a second per principal (per connection with --auth none); negative = unlimited"+env("unary-rate"))
	fs.IntVar(&f.unaryBurst, "unary-burst", coordinator.UnaryBurstDefault,
		"burst of unary calls above --unary-rate"+env("unary-burst"))
	fs.Float64Var(&f.streamOpenRate, "stream-open-rate", coordinator.StreamOpenRateDefault,
		"streams (Connect, WatchJob) opened a second per principal (per connection with --auth none); negative = unlimited"+env("stream-open-rate"))
	fs.IntVar(&f.streamOpenBurst, "stream-open-burst", coordinator.StreamOpenBurstDefault,
		"burst of stream opens above --stream-open-rate"+env("stream-open-burst"))
	fs.Float64Var(&f.connCallRate, "connection-call-rate", coordinator.ConnectionCallRateDefault,
		"unary calls a second per client connection, counted before authentication; negative = unlimited"+env("connection-call-rate"))
	fs.IntVar(&f.connCallBurst, "connection-call-burst", coordinator.ConnectionCallBurstDefault,
		"burst of unary calls above --connection-call-rate"+env("connection-call-burst"))
	fs.Float64Var(&f.addrCallRate, "address-call-rate", coordinator.AddressCallRateDefault,
		"unary calls a second per remote address (see --trusted-proxies), counted before authentication; negative = unlimited"+env("address-call-rate"))
	fs.IntVar(&f.addrCallBurst, "address-call-burst", coordinator.AddressCallBurstDefault,
		"burst of unary calls above --address-call-rate"+env("address-call-burst"))
	fs.Float64Var(&f.connStreamRate, "connection-stream-open-rate", coordinator.ConnectionStreamOpenRateDefault,
		"streams opened a second per client connection, counted before authentication; negative = unlimited"+env("connection-stream-open-rate"))
	fs.IntVar(&f.connStreamBurst, "connection-stream-open-burst", coordinator.ConnectionStreamOpenBurstDefault,
		"burst of stream opens above --connection-stream-open-rate"+env("connection-stream-open-burst"))
	fs.Float64Var(&f.addrStreamRate, "address-stream-open-rate", coordinator.AddressStreamOpenRateDefault,
		"streams opened a second per remote address, counted before authentication; negative = unlimited"+env("address-stream-open-rate"))
	fs.IntVar(&f.addrStreamBurst, "address-stream-open-burst", coordinator.AddressStreamOpenBurstDefault,
		"burst of stream opens above --address-stream-open-rate"+env("address-stream-open-burst"))
	fs.Var(&f.trustedProxies, "trusted-proxies",
		"comma-separated networks (CIDR or address) of proxies whose x-forwarded-for is believed for the per-address limits; "+
			"empty = always the peer's address"+env("trusted-proxies"))
	fs.IntVar(&f.maxInFlightReads, "max-in-flight-reads", coordinator.MaxInFlightReadsDefault,
		"reads (Get*, List*) doing store work at once; more wait --shed-wait, then are refused OVERLOADED"+env("max-in-flight-reads"))
	fs.IntVar(&f.maxInFlightWrites, "max-in-flight-writes", coordinator.MaxInFlightWritesDefault,
		"writes (creates, reports, admin changes) doing store work at once"+env("max-in-flight-writes"))
	fs.DurationVar(&f.shedWait, "shed-wait", coordinator.ShedWaitDefault,
		"how long a call waits for room before it is refused OVERLOADED"+env("shed-wait"))
	fs.IntVar(&f.watchersPerConn, "watchers-per-connection", coordinator.WatchersPerConnectionMaxDefault,
		"WatchJob streams per client connection"+env("watchers-per-connection"))
	fs.IntVar(&f.watchersMax, "watchers-max", coordinator.WatchersMaxDefault,
		"WatchJob streams per coordinator"+env("watchers-max"))
	fs.IntVar(&f.healthWatchersPer, "health-watchers-per-connection", coordinator.HealthWatchersPerConnectionMaxDefault,
		"grpc.health.v1 Watch streams per client connection (no credentials needed; Check is not limited)"+env("health-watchers-per-connection"))
	fs.IntVar(&f.healthWatchersMax, "health-watchers-max", coordinator.HealthWatchersMaxDefault,
		"grpc.health.v1 Watch streams per coordinator"+env("health-watchers-max"))
	fs.DurationVar(&f.overloadLogInterval, "overload-log-interval", coordinator.OverloadLogIntervalDefault,
		"how often refused calls are summarised in one Warn line; negative = never"+env("overload-log-interval"))
	fs.DurationVar(&f.authFailureAudit, "auth-failure-audit-interval", coordinator.AuthFailureAuditIntervalDefault,
		"shortest time between two audit events summarising refused authentications; negative = none"+env("auth-failure-audit-interval"))
	fs.IntVar(&f.schedulesMax, "max-schedules-per-tenant", store.ScheduleLimitDefault,
		"schedules one tenant may have"+env("max-schedules-per-tenant"))
	fs.DurationVar(&f.schedulePoll, "schedule-poll-interval", scheduler.PollIntervalDefault,
		"how often this coordinator looks for due schedules; negative = it fires none (others still do)"+env("schedule-poll-interval"))
	fs.IntVar(&f.operationsMax, "max-operations-per-tenant", store.OperationsRunningDefault,
		"bulk operations (job cancel/retry/delete/priority --filter, dlq replay/abandon --filter) one tenant may run at once"+env("max-operations-per-tenant"))
	fs.Float64Var(&f.operationRate, "operation-rate", bulk.RateDefault,
		"jobs a second this coordinator's bulk operations handle at most, so live traffic keeps its latency; negative = unpaced"+env("operation-rate"))
	fs.IntVar(&f.operationChunk, "operation-chunk", bulk.ChunkDefault,
		"jobs per bulk-operation transaction (at most 5000)"+env("operation-chunk"))
	fs.DurationVar(&f.operationLease, "operation-lease", bulk.LeaseDefault,
		"how long a coordinator holds a bulk operation past its last chunk: how soon another resumes it if this one dies"+env("operation-lease"))
	fs.DurationVar(&f.operationPoll, "operation-poll-interval", bulk.PollIntervalDefault,
		"how often this coordinator looks for bulk operations to run; negative = it runs none (others still do)"+env("operation-poll-interval"))
	fs.DurationVar(&f.operationRetention, "operation-retention", bulk.RetentionDefault,
		"how long finished bulk operations are kept; negative = kept for ever"+env("operation-retention"))
	fs.DurationVar(&f.retention, "retention", coordinator.RetentionDefault,
		"how long finished jobs (succeeded, failed, cancelled, dead) and their events are kept before they are deleted; negative = kept for ever"+env("retention"))
	fs.DurationVar(&f.retentionInterval, "retention-interval", coordinator.RetentionIntervalDefault,
		"how often expired finished jobs and idempotency records are deleted"+env("retention-interval"))
	fs.DurationVar(&f.idempotencyWindow, "idempotency-window", coordinator.IdempotencyWindowDefault,
		"how long a request_id is remembered: a repeat within it returns the original job"+env("idempotency-window"))
}

// apply copies the limits into cfg.
func (f *limitFlags) apply(cfg *coordinator.Config) {
	f.streams.apply(cfg)
	cfg.PayloadMaxBytes = f.payloadMaxBytes
	cfg.ListPageBytes = f.listPageBytes
	cfg.UnaryTimeout = f.unaryTimeout
	cfg.MaxConcurrentStreams = f.maxConcurrentStreams
	cfg.ConnectionTimeout = f.connectionTimeout
	cfg.MaxConnections = f.maxConnections
	cfg.MaxHeaderListBytes = f.maxHeaderListBytes
	cfg.MaxConnectionAge = f.maxConnectionAge
	cfg.MaxConnectionAgeGrace = f.maxConnectionGrace
	cfg.UnaryRate = f.unaryRate
	cfg.UnaryBurst = f.unaryBurst
	cfg.StreamOpenRate = f.streamOpenRate
	cfg.StreamOpenBurst = f.streamOpenBurst
	cfg.ConnectionCallRate = f.connCallRate
	cfg.ConnectionCallBurst = f.connCallBurst
	cfg.AddressCallRate = f.addrCallRate
	cfg.AddressCallBurst = f.addrCallBurst
	cfg.ConnectionStreamOpenRate = f.connStreamRate
	cfg.ConnectionStreamOpenBurst = f.connStreamBurst
	cfg.AddressStreamOpenRate = f.addrStreamRate
	cfg.AddressStreamOpenBurst = f.addrStreamBurst
	cfg.TrustedProxies = f.trustedProxies
	cfg.MaxInFlightReads = f.maxInFlightReads
	cfg.MaxInFlightWrites = f.maxInFlightWrites
	cfg.ShedWait = f.shedWait
	cfg.WatchersPerConnectionMax = f.watchersPerConn
	cfg.WatchersMax = f.watchersMax
	cfg.HealthWatchersPerConnectionMax = f.healthWatchersPer
	cfg.HealthWatchersMax = f.healthWatchersMax
	cfg.OverloadLogInterval = f.overloadLogInterval
	cfg.AuthFailureAuditInterval = f.authFailureAudit
	cfg.SchedulesPerTenantMax = f.schedulesMax
	cfg.SchedulePollInterval = f.schedulePoll
	cfg.OperationsPerTenantMax = f.operationsMax
	cfg.OperationRate = f.operationRate
	cfg.OperationChunk = f.operationChunk
	cfg.OperationLease = f.operationLease
	cfg.OperationPollInterval = f.operationPoll
	cfg.OperationRetention = f.operationRetention
	cfg.Retention = f.retention
	cfg.RetentionInterval = f.retentionInterval
	cfg.IdempotencyWindow = f.idempotencyWindow
}

// prefixList is a flag of comma-separated networks: CIDRs, or single
// addresses (a /32 or /128).
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	parts := make([]string, 0, len(*l))
	for _, p := range *l {
		parts = append(parts, p.String())
	}
	return strings.Join(parts, ",")
}

func (l *prefixList) Set(v string) error {
	var out prefixList
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if p, err := netip.ParsePrefix(part); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(part)
		if err != nil {
			return fmt.Errorf("%q is neither a CIDR network nor an address", part)
		}
		out = append(out, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
	}
	*l = out
	return nil
}

func (l *prefixList) Type() string { return "networks" }
