package coordinator

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Calls with no key (and with a valid one) draw on their connection's
// bucket before authentication: past the burst they are refused
// RATE_LIMITED, not UNAUTHENTICATED, and the refusal reaches neither the
// store nor the authenticator.
func TestCallsAreLimitedPerConnectionBeforeAuthentication(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) {
		cfg.ConnectionCallRate, cfg.ConnectionCallBurst = 0.001, 3
	})
	ctx := t.Context()
	// A plain client: the SDK's would wait out the RetryInfo delay.
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	anon := leaseholdv1.NewJobServiceClient(conn)
	for i := range 3 {
		_, err := anon.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: store.NewID()})
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("call %d with no key: %v; want UNAUTHENTICATED", i, err)
		}
	}
	_, err = anon.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: store.NewID()})
	if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != ReasonRateLimited {
		t.Fatalf("the 4th call on the connection: %v; want RESOURCE_EXHAUSTED RATE_LIMITED", err)
	}
	if !strings.Contains(err.Error(), "connection") {
		t.Errorf("the refusal %q does not say what was limited", err)
	}
	// Another connection has its own bucket.
	key, _ := e.key(tenantA, store.RoleAdmin)
	if _, err := leaseholdv1.NewJobServiceClient(e.dial(key)).ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); err != nil {
		t.Fatalf("a call on a second connection: %v", err)
	}
}

// Behind a trusted proxy the forwarded client address is the one
// counted; a forwarded address from anyone else is ignored, and a hop
// nobody trusted cannot hide behind the ones it forged.
func TestRemoteAddressBelievesOnlyTrustedProxies(t *testing.T) {
	t.Parallel()
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	at := func(peerAddr string, xff ...string) context.Context {
		ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(peerAddr))})
		if len(xff) > 0 {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-forwarded-for", strings.Join(xff, ", ")))
		}
		return ctx
	}
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want string
	}{
		{"a direct client", at("203.0.113.7:5000"), "203.0.113.7"},
		{"a direct client forging x-forwarded-for", at("203.0.113.7:5000", "198.51.100.1"), "203.0.113.7"},
		{"a trusted proxy forwarding its client", at("10.1.2.3:443", "198.51.100.1"), "198.51.100.1"},
		{"two trusted proxies", at("10.1.2.3:443", "198.51.100.1", "10.9.9.9"), "198.51.100.1"},
		{"a client forging hops before the proxy", at("10.1.2.3:443", "192.0.2.50", "198.51.100.1"), "198.51.100.1"},
		{"a trusted proxy without the header", at("10.1.2.3:443"), "10.1.2.3"},
		{"a malformed hop", at("10.1.2.3:443", "not-an-ip"), "10.1.2.3"},
		{"an IPv4-mapped peer", at("[::ffff:203.0.113.7]:5000"), "203.0.113.7"},
	} {
		if got := remoteAddress(tc.ctx, trusted); got != tc.want {
			t.Errorf("%s: remote address %q; want %q", tc.name, got, tc.want)
		}
	}
}

// A flood of unknown keys costs one directory reload per
// principalMissRefresh, not a query per key, and a key created behind the
// coordinator's back works on its first use.
func TestUnknownKeysCostNoQueryEach(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	key, _ := e.key(tenantA, store.RoleAdmin)
	if _, err := leaseholdv1.NewJobServiceClient(e.dial(key)).ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); err != nil {
		t.Fatal(err)
	}
	before := e.c.identity.auth.dir.reloads()
	conn := e.dial("")
	jobs := leaseholdv1.NewJobServiceClient(conn)
	const calls = 200
	start := time.Now()
	errs := make(chan error, calls)
	for range calls {
		go func() {
			secret, _, err := NewAPIKey()
			if err != nil {
				errs <- err
				return
			}
			_, err = jobs.GetJob(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+secret), &leaseholdv1.GetJobRequest{JobId: store.NewID()})
			errs <- err
		}()
	}
	for range calls {
		if err := <-errs; status.Code(err) != codes.Unauthenticated {
			t.Fatalf("an unknown key: %v; want UNAUTHENTICATED", err)
		}
	}
	// Misses reload at most once per principalMissRefresh: on a loaded
	// machine the calls may span several of those, never 200.
	elapsed := time.Since(start)
	if n, most := e.c.identity.auth.dir.reloads()-before, 3+int(elapsed/principalMissRefresh); n > most {
		t.Errorf("%d unknown keys in %v reloaded the directory %d times; want at most %d", calls, elapsed, n, most)
	}
	// Created straight in the store, as another coordinator would: no
	// invalidation here, and it works on its first use.
	secret, hash, err := NewAPIKey()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.CreatePrincipal(ctx, store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleReader, KeyHash: hash, Actor: "elsewhere"}); err != nil {
		t.Fatal(err)
	}
	if _, err := leaseholdv1.NewJobServiceClient(e.dial(secret)).ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); err != nil {
		t.Fatalf("a key created elsewhere, on its first use: %v", err)
	}
}
