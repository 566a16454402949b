package coordinator

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/internal/startstop"
)

// Refusals are the answers of the overload defences: a caller over its
// rate (RESOURCE_EXHAUSTED, RATE_LIMITED), a coordinator with no room for
// more store work (UNAVAILABLE, OVERLOADED) and a watch beyond the caps
// (RESOURCE_EXHAUSTED, WATCH_LIMIT). Each carries a google.rpc.RetryInfo
// delay, and each is refused before the handler does anything, so the call
// is always safe to repeat after the delay (the Go SDK does so). They are
// counted and logged as one Warn summary per interval (overloadReporter);
// the per-call log line drops to Debug, since a flood of refusals must not
// become a flood of log lines.
type refusalKind int

const (
	refusalNone refusalKind = iota
	refusalRateLimited
	refusalOverloaded
	refusalWatchLimit
	// refusalUnauthenticated: a failed authentication, summarised by
	// authFailures rather than logged per call.
	refusalUnauthenticated
)

// callNote is what the defences write about one call for the interceptors
// outside them: whether and why it was refused. The outermost interceptor
// puts one in the context; it is written and read by the call's own
// goroutine only.
type callNote struct {
	refused    refusalKind
	retryAfter time.Duration
}

type callNoteKey struct{}

func withCallNote(ctx context.Context) context.Context {
	return context.WithValue(ctx, callNoteKey{}, &callNote{})
}

// noteRefusal records a refusal in the call's note, if it has one.
func noteRefusal(ctx context.Context, kind refusalKind, retryAfter time.Duration) {
	if n, ok := ctx.Value(callNoteKey{}).(*callNote); ok {
		n.refused, n.retryAfter = kind, retryAfter
	}
}

// refused reports whether ctx's call was refused by a defence.
func refused(ctx context.Context) bool {
	n, ok := ctx.Value(callNoteKey{}).(*callNote)
	return ok && n.refused != refusalNone
}

// refusedBy reports whether ctx's call was refused by the defence kind.
// The rate-limit wrappers ask it, not the code, so that a refusal made
// deeper in (a watch cap) is passed on as it is.
func refusedBy(ctx context.Context, kind refusalKind) bool {
	n, ok := ctx.Value(callNoteKey{}).(*callNote)
	return ok && n.refused == kind
}

// noteUnary and noteStream are the outermost interceptors: they give each
// call its note.
func noteUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	return h(withCallNote(ctx), req)
}

func noteStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	return h(srv, &contextStream{ServerStream: ss, ctx: withCallNote(ss.Context())})
}

// contextStream is a ServerStream with another context.
type contextStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *contextStream) Context() context.Context { return s.ctx }

// refusalError is the status of a refusal: code, reason, message and the
// RetryInfo delay (at least a millisecond, so that it is never "now").
func refusalError(code codes.Code, reason, msg string, retryAfter time.Duration) error {
	st := status.New(code, msg)
	withDetails, err := st.WithDetails(
		&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain},
		&errdetails.RetryInfo{RetryDelay: durationpb.New(max(retryAfter, time.Millisecond))},
	)
	if err != nil {
		return st.Err()
	}
	return withDetails.Err()
}

// overloadCounts counts refusals since start.
type overloadCounts struct {
	rateLimitedCalls, rateLimitedStreams, shedReads, shedWrites, watchesRefused atomic.Int64
}

// overloadReading is one reading of overloadCounts.
type overloadReading struct {
	rateLimitedCalls, rateLimitedStreams, shedReads, shedWrites, watchesRefused int64
}

func (o *overloadCounts) read() overloadReading {
	return overloadReading{
		rateLimitedCalls: o.rateLimitedCalls.Load(), rateLimitedStreams: o.rateLimitedStreams.Load(),
		shedReads: o.shedReads.Load(), shedWrites: o.shedWrites.Load(), watchesRefused: o.watchesRefused.Load(),
	}
}

// rateLimitUnary is go-grpc-middleware's ratelimit interceptor with the
// refusal turned into Leasehold's: ratelimit answers a bare
// RESOURCE_EXHAUSTED, and clients need the reason and the RetryInfo delay
// the limiter noted.
func (c *Coordinator) rateLimitUnary(l *rateLimiter) grpc.UnaryServerInterceptor {
	inner := ratelimit.UnaryServerInterceptor(l)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := inner(ctx, req, info, h)
		if err != nil && refusedBy(ctx, refusalRateLimited) {
			c.defences.overload.rateLimitedCalls.Add(1)
			c.core.metrics.RateLimited(ctx, tenantFrom(ctx), info.FullMethod)
			return nil, c.rateLimitedError(ctx, l.kind)
		}
		return resp, err
	}
}

// rateLimitStream is rateLimitUnary for stream opens.
func (c *Coordinator) rateLimitStream(l *rateLimiter) grpc.StreamServerInterceptor {
	inner := ratelimit.StreamServerInterceptor(l)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		err := inner(srv, ss, info, h)
		if err != nil && refusedBy(ss.Context(), refusalRateLimited) {
			c.defences.overload.rateLimitedStreams.Add(1)
			c.core.metrics.RateLimited(ss.Context(), tenantFrom(ss.Context()), info.FullMethod)
			return c.rateLimitedError(ss.Context(), l.kind)
		}
		return err
	}
}

func (c *Coordinator) rateLimitedError(ctx context.Context, kind string) error {
	n, _ := ctx.Value(callNoteKey{}).(*callNote)
	return refusalError(codes.ResourceExhausted, ReasonRateLimited,
		fmt.Sprintf("too many %s from this caller: retry after the RetryInfo delay", kind), n.retryAfter)
}

// shedRetryDelay is the RetryInfo delay of an OVERLOADED refusal: long
// enough for a burst to drain, short enough that a retrying client barely
// notices. Clients add jitter.
const shedRetryDelay = time.Second

// loadShedder bounds the unary calls doing store work at once, in two
// lanes so that a flood of writes (creates, reports) cannot starve reads
// (GetJob, lists) or the reverse. A call waits up to wait for a slot of its
// lane and is then refused UNAVAILABLE (OVERLOADED) with a RetryInfo delay:
// a coordinator with a queue it cannot serve in time answers at once
// instead of letting calls pile up until their deadlines. Claims are not
// counted (they wait in the dispatcher, which claims for all waiters in
// one statement), nor GetVersion (no store work), nor streams (WatchJob
// has its own caps; Connect streams are bounded by MaxConnections ×
// MaxConcurrentStreams and their work is batched).
type loadShedder struct {
	reads, writes chan struct{}
	wait          time.Duration
	counts        *overloadCounts
	// metrics counts each shed call by method (nil: not counted).
	metrics *Metrics
}

func newLoadShedder(reads, writes int, wait time.Duration, counts *overloadCounts, metrics *Metrics) *loadShedder {
	return &loadShedder{reads: make(chan struct{}, reads), writes: make(chan struct{}, writes), wait: wait, counts: counts, metrics: metrics}
}

// lane returns the semaphore of a method, nil for the methods not counted.
func (l *loadShedder) lane(fullMethod string) (chan struct{}, *atomic.Int64) {
	method := fullMethod[strings.LastIndexByte(fullMethod, '/')+1:]
	switch {
	case method == "Claim" || method == "GetVersion":
		return nil, nil
	case strings.HasPrefix(method, "Get"), strings.HasPrefix(method, "List"):
		return l.reads, &l.counts.shedReads
	default:
		return l.writes, &l.counts.shedWrites
	}
}

func (l *loadShedder) unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		lane, shed := l.lane(info.FullMethod)
		if lane == nil {
			return h(ctx, req)
		}
		if err := l.acquire(ctx, lane, shed, info.FullMethod); err != nil {
			return nil, err
		}
		defer func() { <-lane }()
		return h(ctx, req)
	}
}

// acquire takes a slot of lane, waiting up to l.wait; the refusal is
// OVERLOADED with a RetryInfo delay.
func (l *loadShedder) acquire(ctx context.Context, lane chan struct{}, shed *atomic.Int64, method string) error {
	select {
	case lane <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case lane <- struct{}{}:
		return nil
	case <-t.C:
		shed.Add(1)
		l.metrics.Shed(ctx, method)
		noteRefusal(ctx, refusalOverloaded, shedRetryDelay)
		return refusalError(codes.Unavailable, ReasonOverloaded,
			"the coordinator is overloaded: retry after the RetryInfo delay", shedRetryDelay)
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	}
}

// write runs store work of a stream (a Connect's Hello binding its worker
// id) in the write lane, as a unary write would run: a burst of stream
// opens then waits its turn with every other write instead of taking the
// store's connections from the calls in flight.
func (l *loadShedder) write(ctx context.Context, method string, f func() error) error {
	if err := l.acquire(ctx, l.writes, &l.counts.shedWrites, method); err != nil {
		return err
	}
	defer func() { <-l.writes }()
	return f()
}

// OverloadLogIntervalDefault is how often refusals are summarised in the
// log.
const OverloadLogIntervalDefault = 10 * time.Second

// overloadReporter logs, at Warn, how many calls the defences refused in
// each interval that had refusals: one line however many there were. It is
// a startstop service; a zero or negative interval disables it.
type overloadReporter struct {
	startstop.BaseStartStop

	interval time.Duration
	log      *slog.Logger
	counts   *overloadCounts
}

var _ startstop.Service = (*overloadReporter)(nil)

// Start logs every interval until Stop or ctx ends.
func (r *overloadReporter) Start(ctx context.Context) {
	startEvery(ctx, &r.BaseStartStop, r.interval, r.runOnce)
}

// runOnce logs the refusals since last, if any, and returns the reading.
func (r *overloadReporter) runOnce(ctx context.Context, last overloadReading) overloadReading {
	now := r.counts.read()
	if now == last {
		return last
	}
	r.log.WarnContext(ctx, "overload: calls refused in the last interval",
		slog.Duration("interval", r.interval),
		slog.Int64("rate_limited_calls", now.rateLimitedCalls-last.rateLimitedCalls),
		slog.Int64("rate_limited_stream_opens", now.rateLimitedStreams-last.rateLimitedStreams),
		slog.Int64("shed_reads", now.shedReads-last.shedReads),
		slog.Int64("shed_writes", now.shedWrites-last.shedWrites),
		slog.Int64("watches_refused", now.watchesRefused-last.watchesRefused))
	return now
}
