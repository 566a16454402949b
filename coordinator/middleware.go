package coordinator

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/auth"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc/filters"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Transport limits. Each is explicit so that its reason is written down
// (grpc-go leaves several at "unlimited").
const (
	// RecvHeadroom is added to the payload limit to get the largest request
	// accepted off the wire: room for the envelope (metadata, names, ids) of
	// a request that carries one maximal payload. A request whose payload
	// is slightly over the limit therefore still arrives and is answered
	// with a BadRequest naming the field, instead of a bare
	// RESOURCE_EXHAUSTED from the transport. Batches must fit in the same
	// budget: split large payloads over several BatchCreateJobs calls.
	RecvHeadroom = 1 << 20
	// keepaliveMinTime is the most often a client may ping without a
	// stream; more frequent pings are a misbehaving client and get the
	// connection closed (GOAWAY "too_many_pings"). SDKs ping every 30s.
	keepaliveMinTime = 10 * time.Second
	// keepaliveTime: the server pings an idle connection after this long,
	// so dead peers (a worker whose host vanished) are noticed and their
	// streams end instead of holding a session for ever.
	keepaliveTime = 30 * time.Second
	// keepaliveTimeout: a ping unanswered this long closes the connection.
	keepaliveTimeout = 10 * time.Second
	// sendFloor is the least send limit (see sendLimit).
	sendFloor = 64 << 20
	// attemptHistoryMax is the most a dead job's attempt history can
	// encode to: store.MaxAttemptsMax attempts with an error message of
	// store.ErrorMessageMaxLen each, rounded up.
	attemptHistoryMax = 9 << 20
	// claimWaitMargin is added to a long-poll Claim's wait for its
	// server-side deadline: the store calls around the wait still need time.
	claimWaitMargin = 10 * time.Second
)

// serverOptions is the gRPC server configuration: limits, keepalive,
// tracing and the interceptor chains.
//
// Chain order, outermost first (go-grpc-middleware's example server):
// the call's note (refusals.go), which the inner defences write and the
// logger reads; logging sees every call with its final code, refusals
// included; the limits that act before authentication (the health Watch
// caps, then the buckets per connection and per remote address:
// preauth.go), so that a caller without a valid credential is throttled
// too; auth (skipped by a selector for health and reflection, which
// are public) resolves the caller and checks the method's permission
// before any handler runs; a request the codec could not decode is then
// refused INVALID_ARGUMENT (request_codec.go); the rate limits, after auth
// so that buckets are
// per principal; the load shedder, so that only admitted calls wait for
// store work; the unary deadline applies to the handler only; recovery
// is innermost so a panic becomes INTERNAL and is still logged by the
// logging interceptor with that code. Metrics come from the stats handler.
func (c *Coordinator) serverOptions() []grpc.ServerOption {
	logOpts := []logging.Option{
		// Only the finish line: method, code, duration and peer come with
		// it. Payload events are never enabled: requests carry payloads,
		// results and idempotency keys.
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithLevels(codeToLevel),
	}
	logger := interceptorLogger(c.log)
	recoveryOpt := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		c.log.ErrorContext(ctx, "panic in handler", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		return statusError(codes.Internal, ReasonInternal, "internal error")
	})
	opts := []grpc.ServerOption{
		grpc.StatsHandler(otelgrpc.NewServerHandler(
			otelgrpc.WithTracerProvider(c.cfg.TracerProvider), otelgrpc.WithMeterProvider(c.cfg.MeterProvider),
			// Probes and reflection are neither traced nor in the RPC
			// metrics: a kubelet's health checks would otherwise be a
			// steady share of every trace backend's spans.
			otelgrpc.WithFilter(filters.None(filters.HealthCheck(), filters.ServicePrefix("grpc.reflection."))))),
		grpc.MaxRecvMsgSize(c.cfg.PayloadMaxBytes + RecvHeadroom),
		// Headers are read before any interceptor (authentication
		// included) runs; grpc-go's default lets each call bring 16 MiB.
		// The limit is also advertised, so honest clients fail fast.
		grpc.MaxHeaderListSize(uint32(c.cfg.MaxHeaderListBytes)),
		// Bounds any one response; see sendLimit.
		grpc.MaxSendMsgSize(c.sendLimit()),
		// Each worker stream and long-poll Claim is one HTTP/2 stream; this
		// bounds what one connection can hold open.
		grpc.MaxConcurrentStreams(c.cfg.MaxConcurrentStreams),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: keepaliveMinTime,
			// Workers keep connections open between claims; pinging them
			// is legitimate.
			PermitWithoutStream: true,
		}),
		// A connection that has not finished its handshake (TLS, HTTP/2
		// preface) in this long is closed: sockets that never speak must
		// not hold a slot of MaxConnections.
		grpc.ConnectionTimeout(c.cfg.ConnectionTimeout),
		grpc.KeepaliveParams(c.keepaliveParams()),
		// The transport buffers (ReadBufferSize, WriteBufferSize: 32 KiB
		// per connection) and the flow-control windows are grpc-go's
		// defaults on purpose. A connection takes its write buffer from a
		// shared pool only while it writes (grpc-go's default since
		// SharedWriteBuffer was deprecated), and its read buffer only while
		// received bytes wait to be parsed (limitListener keeps grpc's
		// pooled reads), so an idle worker connection holds neither:
		// smaller buffers would save no memory and cost syscalls under
		// load (in bench idle, 8 and 16 KiB buffers changed nothing beyond
		// noise). The windows are credit, not memory held.
		// Requests that do not decode are INVALID_ARGUMENT, not grpc-go's
		// INTERNAL (request_codec.go).
		grpc.ForceServerCodecV2(newRequestCodec()),
		grpc.ChainUnaryInterceptor(
			forgetUndecodable,
			noteUnary,
			logging.UnaryServerInterceptor(logger, logOpts...),
			c.preAuthUnary,
			selector.UnaryServerInterceptor(auth.UnaryServerInterceptor(c.identity.auth.authenticate), needsAuth),
			checkDecodedUnary,
			selector.UnaryServerInterceptor(c.rateLimitUnary(c.defences.unaryLimit), needsAuth),
			selector.UnaryServerInterceptor(c.defences.shedder.unary(), needsAuth),
			c.deadlineUnary(),
			recovery.UnaryServerInterceptor(recoveryOpt),
		),
		grpc.ChainStreamInterceptor(
			noteStream,
			logging.StreamServerInterceptor(logger, logOpts...),
			c.limitHealthWatch,
			c.preAuthStream,
			selector.StreamServerInterceptor(c.identity.auth.streamInterceptor, needsAuth),
			checkDecodedStream,
			selector.StreamServerInterceptor(c.rateLimitStream(c.defences.streamLimit), needsAuth),
			recovery.StreamServerInterceptor(recoveryOpt),
		),
	}
	if c.cfg.TLS != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(c.cfg.TLS)))
	}
	return opts
}

// keepaliveParams pings idle connections and, when MaxConnectionAge is
// set, ages connections out so clients rebalance. MaxConnectionIdle stays
// infinite: an idle worker connection is a worker waiting for work.
func (c *Coordinator) keepaliveParams() keepalive.ServerParameters {
	p := keepalive.ServerParameters{Time: keepaliveTime, Timeout: keepaliveTimeout}
	if c.cfg.MaxConnectionAge > 0 {
		p.MaxConnectionAge = c.cfg.MaxConnectionAge
		p.MaxConnectionAgeGrace = c.cfg.MaxConnectionAgeGrace
	}
	return p
}

// sendLimit is the largest response the server sends. List pages are
// held to ListPageBytes by their byte budget (plus the one job a page
// always holds, which may be over it); the largest single answers are a
// whole job (payload, result and checkpoint state, each up to the payload
// limit) and a dead job's attempt history. The limit covers all of those,
// and is never below sendFloor, so that a unary Claim of a batch of
// ordinary jobs fits: a Claim of many large jobs is the one answer that
// can exceed it (RESOURCE_EXHAUSTED; its leases then expire unreported):
// claim fewer at a time, or use Connect, which pushes one lease per
// message.
func (c *Coordinator) sendLimit() int {
	return max(sendFloor, c.cfg.ListPageBytes+4*c.cfg.PayloadMaxBytes+attemptHistoryMax+RecvHeadroom)
}

// needsAuth selects every call except those to the public services
// (health, reflection): load balancers and kubelet probes cannot present
// credentials, and reflection only describes the API.
var needsAuth = selector.MatchFunc(func(_ context.Context, cm interceptors.CallMeta) bool {
	return !publicServices[cm.Service]
})

// interceptorLogger adapts slog to go-grpc-middleware's logger.
func interceptorLogger(l *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		if refused(ctx) {
			// Counted and summarised at Warn by overloadReporter.
			lvl = logging.LevelDebug
		}
		l.Log(ctx, slog.Level(lvl), msg, fields...)
	})
}

// codeToLevel keeps routine calls at Debug (a busy fleet makes thousands a
// second), caller mistakes at Info, and server trouble at Warn/Error:
// UNAVAILABLE (the store is down) and RESOURCE_EXHAUSTED (a message over a
// size limit) are signs an operator should see. The refusals of the
// overload defences are the exception: their lines drop to Debug
// (interceptorLogger) and one Warn summary per interval counts them. Cancelled calls are client-caused
// endings (a worker closing its stream) and stay at Debug.
func codeToLevel(code codes.Code) logging.Level {
	switch code {
	case codes.OK, codes.Canceled, codes.DeadlineExceeded:
		return logging.LevelDebug
	case codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.FailedPrecondition,
		codes.Aborted, codes.OutOfRange, codes.Unauthenticated, codes.PermissionDenied:
		return logging.LevelInfo
	case codes.Unavailable, codes.Unimplemented, codes.ResourceExhausted:
		return logging.LevelWarn
	default:
		return logging.LevelError
	}
}

// deadlineUnary gives every unary call a server-side deadline: the
// client's when it is shorter, otherwise UnaryTimeout — or, for a
// long-poll Claim, its wait plus a margin.
func (c *Coordinator) deadlineUnary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		limit := c.cfg.UnaryTimeout
		if cr, ok := req.(*leaseholdv1.ClaimRequest); ok && cr.GetWait() != nil {
			if w := cr.GetWait().AsDuration(); w > 0 && w <= ClaimWaitMax {
				limit = max(limit, w+claimWaitMargin)
			}
		}
		ctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		return h(ctx, req)
	}
}
