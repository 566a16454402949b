package e2e

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// A socket that never sends the HTTP/2 preface is closed after
// ConnectionTimeout, and while MaxConnections such sockets are held a new
// client waits for a slot instead of being served beyond the cap.
func TestSilentConnectionsAreClosedAndCapped(t *testing.T) {
	t.Parallel()
	const timeout = 500 * time.Millisecond
	s, _ := setup(t, false, func(cfg *coordinator.Config) {
		cfg.ConnectionTimeout = timeout
		cfg.MaxConnections = 3
	})
	ctx := ctxT(t)
	start := time.Now()
	closedAt := make(chan time.Duration, 3)
	for range 3 {
		nc, err := net.Dial("tcp", s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		go func() {
			_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 1<<16)
			for { // the server's SETTINGS, then EOF when it gives up
				if _, err := nc.Read(buf); err != nil {
					break
				}
			}
			closedAt <- time.Since(start)
		}()
	}
	conn, err := grpc.NewClient(s.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if _, err := leaseholdv1.NewJobServiceClient(conn).ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); err != nil {
		t.Fatalf("a call once a slot is free: %v", err)
	}
	served := time.Since(start)
	first := <-closedAt
	if first < timeout/2 || first > 10*time.Second {
		t.Fatalf("a silent connection was closed after %v; want about %v", first, timeout)
	}
	if served < first-50*time.Millisecond {
		t.Fatalf("a fourth connection was served after %v, before any of the 3 silent ones (the cap) was closed at %v", served, first)
	}
	for range 2 {
		if d := <-closedAt; d > 10*time.Second {
			t.Fatalf("a silent connection was held for %v", d)
		}
	}
}

// With MaxConnectionAge set, the server ends a connection with a GOAWAY
// after about that long, and the client reconnects for its next call.
func TestConnectionsAgeOut(t *testing.T) {
	t.Parallel()
	s, _ := setup(t, false, func(cfg *coordinator.Config) {
		cfg.MaxConnectionAge = 500 * time.Millisecond
		cfg.MaxConnectionAgeGrace = 500 * time.Millisecond
	})
	ctx := ctxT(t)
	conn := s.Dial(t)
	jobs := leaseholdv1.NewJobServiceClient(conn)
	if _, err := jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for conn.GetState() == connectivity.Ready {
		if time.Now().After(deadline) {
			t.Fatal("the connection is still READY 10s after its 500ms max age")
		}
		wctx, cancel := context.WithDeadline(ctx, deadline)
		conn.WaitForStateChange(wctx, connectivity.Ready)
		cancel()
	}
	if _, err := jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); err != nil {
		t.Fatalf("a call after the connection aged out: %v", err)
	}
}
