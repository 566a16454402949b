package coordinator

import (
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthWatchMethod is the full name of grpc.health.v1's Watch.
var healthWatchMethod = "/" + healthpb.Health_ServiceDesc.ServiceName + "/Watch"

// healthWatchLimit caps the grpc.health.v1 Watch streams held open at
// once, per client connection and per coordinator. The health service
// needs no credentials (load balancers and kubelets cannot present any),
// so without a cap anyone who reaches the port could hold a goroutine and
// its buffers per stream for ever. A gRPC client's health checking holds
// one Watch per connection; probes use Check, which is not limited.
type healthWatchLimit struct {
	perConn, total int

	// mu guards conns and n.
	mu    sync.Mutex
	conns map[string]int
	n     int
}

func newHealthWatchLimit(perConn, total int) *healthWatchLimit {
	return &healthWatchLimit{perConn: perConn, total: total, conns: make(map[string]int)}
}

// acquire takes a slot for a Watch on conn; false when a cap is reached.
func (l *healthWatchLimit) acquire(conn string) (ok, perConnection bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.total {
		return false, false
	}
	if l.conns[conn] >= l.perConn {
		return false, true
	}
	l.conns[conn]++
	l.n++
	return true, false
}

func (l *healthWatchLimit) release(conn string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conns[conn]--; l.conns[conn] <= 0 {
		delete(l.conns, conn)
	}
	l.n--
}

// healthWatchRetryDelay is the RetryInfo delay of a refused Watch.
const healthWatchRetryDelay = 5 * time.Second

// limitHealthWatch is the stream interceptor that applies the cap, before
// any authentication (there is none for health) and before the stream
// reaches the health server.
func (c *Coordinator) limitHealthWatch(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod != healthWatchMethod {
		return h(srv, ss)
	}
	ctx := ss.Context()
	conn := connectionKey(ctx)
	ok, perConn := c.defences.healthWatches.acquire(conn)
	if !ok {
		c.defences.overload.watchesRefused.Add(1)
		noteRefusal(ctx, refusalWatchLimit, healthWatchRetryDelay)
		msg := "too many health watches on this coordinator"
		if perConn {
			msg = "too many health watches on this connection"
		}
		return refusalError(codes.ResourceExhausted, ReasonWatchLimit,
			msg+": use Check, or retry after the RetryInfo delay", healthWatchRetryDelay)
	}
	defer c.defences.healthWatches.release(conn)
	return h(srv, ss)
}
