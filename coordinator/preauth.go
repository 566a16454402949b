package coordinator

import (
	"context"
	"net"
	"net/netip"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
)

// preAuthLimits are the token buckets that act before authentication, so
// that a client with no valid credential (or none at all) is throttled
// like any other: per client connection and per remote address, for calls
// and, apart, for stream opens. The limits per principal (UnaryRate,
// StreamOpenRate) still apply after authentication.
//
// The remote address is the peer's IP, or, when the peer is a trusted
// proxy (Config.TrustedProxies), the client address the proxy forwarded
// in x-forwarded-for: behind a proxy or a Kubernetes Service every
// connection comes from the proxy, and its address alone would put every
// client in one bucket.
type preAuthLimits struct {
	connCalls, addrCalls     *rateLimiter
	connStreams, addrStreams *rateLimiter
	trusted                  []netip.Prefix
}

func newPreAuthLimits(cfg Config) *preAuthLimits {
	return &preAuthLimits{
		connCalls:   newRateLimiter(cfg.ConnectionCallRate, cfg.ConnectionCallBurst, "calls on this connection"),
		addrCalls:   newRateLimiter(cfg.AddressCallRate, cfg.AddressCallBurst, "calls from this address"),
		connStreams: newRateLimiter(cfg.ConnectionStreamOpenRate, cfg.ConnectionStreamOpenBurst, "stream opens on this connection"),
		addrStreams: newRateLimiter(cfg.AddressStreamOpenRate, cfg.AddressStreamOpenBurst, "stream opens from this address"),
		trusted:     cfg.TrustedProxies,
	}
}

// check takes a token from the connection's bucket and the address's; the
// limiter that refused is returned with errRateLimited.
func (l *preAuthLimits) check(ctx context.Context, stream bool) (*rateLimiter, error) {
	conn, addr := l.connCalls, l.addrCalls
	if stream {
		conn, addr = l.connStreams, l.addrStreams
	}
	if err := conn.limitKey(ctx, "conn:"+connectionKey(ctx)); err != nil {
		return conn, err
	}
	if err := addr.limitKey(ctx, "addr:"+remoteAddress(ctx, l.trusted)); err != nil {
		return addr, err
	}
	return nil, nil
}

func (c *Coordinator) preAuthUnary(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if l, err := c.defences.preAuth.check(ctx, false); err != nil {
		c.defences.overload.rateLimitedCalls.Add(1)
		c.core.metrics.RateLimited(ctx, "", info.FullMethod)
		return nil, c.rateLimitedError(ctx, l.kind)
	}
	return h(ctx, req)
}

func (c *Coordinator) preAuthStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx := ss.Context()
	if l, err := c.defences.preAuth.check(ctx, true); err != nil {
		c.defences.overload.rateLimitedStreams.Add(1)
		c.core.metrics.RateLimited(ctx, "", info.FullMethod)
		return c.rateLimitedError(ctx, l.kind)
	}
	return h(srv, ss)
}

// remoteAddress is the call's client address: the peer's IP, or, when
// the peer is a trusted proxy, the rightmost address of x-forwarded-for
// that is not itself a trusted proxy (the nearest hop nobody trusted
// could have forged). "unknown" when there is no peer.
func remoteAddress(ctx context.Context, trusted []netip.Prefix) string {
	pr, ok := peer.FromContext(ctx)
	if !ok || pr.Addr == nil {
		return "unknown"
	}
	ip := peerIP(pr.Addr)
	if !ip.IsValid() {
		return pr.Addr.String()
	}
	if !isTrusted(ip, trusted) {
		return ip.String()
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("x-forwarded-for")
	for i := len(vals) - 1; i >= 0; i-- {
		hops := strings.Split(vals[i], ",")
		for j := len(hops) - 1; j >= 0; j-- {
			hop, err := netip.ParseAddr(strings.TrimSpace(hops[j]))
			if err != nil {
				// A malformed hop: nothing left of it can be believed.
				return ip.String()
			}
			hop = hop.Unmap()
			if !isTrusted(hop, trusted) {
				return hop.String()
			}
			ip = hop
		}
	}
	return ip.String()
}

func peerIP(a net.Addr) netip.Addr {
	if ta, ok := a.(*net.TCPAddr); ok {
		ip, _ := netip.AddrFromSlice(ta.IP)
		return ip.Unmap()
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

func isTrusted(ip netip.Addr, trusted []netip.Prefix) bool {
	for _, p := range trusted {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}
