// Package testserver runs real Leasehold coordinators for tests: in-process
// on a real TCP socket (Start), or as the real binary in its own process
// (StartProcess). Everything it starts is stopped with t.Cleanup.
//
// In-process servers default to fast dispatcher polling (50ms backing off
// to 500ms) and a 5s shutdown grace, so tests do not wait on production
// intervals; Options.Configure can set anything else.
package testserver

import (
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/sqlite"
)

// Options choose the engine and tweak the coordinator.
type Options struct {
	// Postgres selects PostgreSQL on a fresh migrated pgtest schema (or
	// on DatabaseURL when set, migrated first). False: SQLite on a fresh
	// migrated sqlitetest file (or SQLitePath).
	Postgres bool
	// Configure, when set, adjusts the coordinator config after the test
	// defaults are applied.
	Configure func(*coordinator.Config)
	// DatabaseURL reuses an existing PostgreSQL database (implies
	// Postgres), e.g. for a second coordinator on the same database.
	DatabaseURL string
	// SQLitePath reuses an existing SQLite file.
	SQLitePath string
	// Addr is the listen address; empty means 127.0.0.1 on a free port.
	Addr string
	// EngineOptions are passed to the store engine.
	EngineOptions store.EngineOptions
}

// Server is a coordinator serving on a real socket.
type Server struct {
	// Addr is host:port of the listener.
	Addr string
	// Store is the coordinator's store. It is closed by Stop.
	Store store.Store
	// Coordinator is the running coordinator.
	Coordinator *coordinator.Coordinator
	// DatabaseURL is the PostgreSQL URL (PostgreSQL only).
	DatabaseURL string
	// SQLitePath is the database file (SQLite only).
	SQLitePath string

	t        testing.TB
	opts     Options
	served   chan error
	stopOnce sync.Once
	stopped  chan struct{}
}

// Start opens a store, starts a coordinator on 127.0.0.1:0 (or
// opts.Addr) and stops it when the test ends.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := &Server{t: t, opts: opts, served: make(chan error, 1), stopped: make(chan struct{})}
	// The coordinator's log goes to the test's output until the test's
	// cleanups have run (Stop is one of them); later lines are dropped.
	log := slog.New(testlog.NewHandler(t, &slog.HandlerOptions{Level: slog.LevelInfo}))

	var st store.Store
	if opts.Postgres || opts.DatabaseURL != "" {
		s.DatabaseURL = opts.DatabaseURL
		if s.DatabaseURL == "" {
			s.DatabaseURL = pgtest.MigratedSchema(t)
		} else if err := postgres.Migrate(ctx, s.DatabaseURL); err != nil {
			t.Fatalf("testserver: migrate postgres: %v", err)
		}
		pg, err := postgres.Open(ctx, postgres.Config{DatabaseURL: s.DatabaseURL, Options: opts.EngineOptions, Logger: log})
		if err != nil {
			t.Fatalf("testserver: open postgres: %v", err)
		}
		st = pg
	} else {
		s.SQLitePath = opts.SQLitePath
		if s.SQLitePath == "" {
			s.SQLitePath = sqlitetest.Path(t)
		}
		lite, err := sqlite.Open(ctx, sqlite.Config{Path: s.SQLitePath, Options: opts.EngineOptions, Logger: log})
		if err != nil {
			t.Fatalf("testserver: open sqlite: %v", err)
		}
		st = lite
	}
	s.Store = st

	cfg := coordinator.Config{
		Store:           st,
		Logger:          log,
		PollInterval:    50 * time.Millisecond,
		PollMaxInterval: 500 * time.Millisecond,
		ShutdownGrace:   5 * time.Second,
	}
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	c, err := coordinator.New(cfg)
	if err != nil {
		_ = st.Close() // the coordinator error is the one to report
		t.Fatalf("testserver: new coordinator: %v", err)
	}
	s.Coordinator = c
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		_ = c.Shutdown(ctx)
		t.Fatalf("testserver: listen on %s: %v", addr, err)
	}
	s.Addr = lis.Addr().String()
	go func() { s.served <- c.Serve(lis) }()
	t.Cleanup(s.Stop)
	return s
}

// Stop shuts the coordinator down gracefully (see Coordinator.Shutdown)
// and waits for Serve to return. It closes the store. Idempotent.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		defer close(s.stopped)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := s.Coordinator.Shutdown(ctx); err != nil {
			s.t.Errorf("testserver: shutdown: %v", err)
		}
		if err := <-s.served; err != nil {
			s.t.Errorf("testserver: serve: %v", err)
		}
	})
}

// Dial returns an insecure client connection to s, closed when the test
// ends.
func (s *Server) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	return dial(t, s.Addr)
}

// dial connects to addr with opts, or in plaintext when there are none.
func dial(t testing.TB, addr string, opts ...grpc.DialOption) *grpc.ClientConn {
	t.Helper()
	if len(opts) == 0 {
		opts = []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		t.Fatalf("testserver: dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Restart stops s and starts a new coordinator on the same address and the
// same database, with the same options.
func Restart(t testing.TB, s *Server) *Server {
	t.Helper()
	s.Stop()
	opts := s.opts
	opts.Addr = s.Addr
	opts.DatabaseURL = s.DatabaseURL
	opts.SQLitePath = s.SQLitePath
	return Start(t, opts)
}

// freeAddr returns 127.0.0.1:<a port that was free a moment ago>.
func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}
