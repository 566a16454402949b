package main

// serve --outbox-relay: the outbox relay embedded in the coordinator, for
// an application whose tables live in the coordinator's own PostgreSQL
// database. It is the relay of `leasehold relay`, in-process: it installs
// the outbox schema (like the migrations), and creates jobs through the
// coordinator's own gRPC listener, authenticated by the same client
// environment as every client (LEASEHOLD_API_KEY, LEASEHOLD_TLS_*), so
// jobs go through the same validation, scopes and idempotency.

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/outbox"
	"github.com/leasehold/leasehold/outbox/relay"
	"github.com/leasehold/leasehold/worker"
)

// outboxRelayFlags are serve's flags for the embedded relay.
type outboxRelayFlags struct {
	on     bool
	schema string
}

func (c *cli) addOutboxRelayFlags(fs *pflag.FlagSet, f *outboxRelayFlags) {
	fs.BoolVar(&f.on, "outbox-relay", false,
		"also relay the outbox in the coordinator's own PostgreSQL database into jobs (env LEASEHOLD_OUTBOX_RELAY, e.g. 1 or true); see docs/outbox.md")
	fs.StringVar(&f.schema, "outbox-schema", outbox.SchemaDefault,
		"schema of the outbox --outbox-relay installs and relays (env LEASEHOLD_OUTBOX_SCHEMA)")
}

// startOutboxRelay installs the outbox (unless noMigrate) and starts the
// relay against the coordinator listening on lis. The returned stop ends
// it; a relay call in flight when ctx ends fails and its rows stay for the
// next start.
func (c *cli) startOutboxRelay(ctx context.Context, log *slog.Logger, f *serveFlags, lis net.Addr) (stop func(), err error) {
	o := f.outboxRelay
	if !o.on {
		return func() {}, nil
	}
	if f.store.databaseURL == "" {
		return nil, usagef("--outbox-relay needs --database-url: the outbox lives in PostgreSQL")
	}
	if err := outbox.ValidateSchemaName(o.schema); err != nil {
		return nil, usagef("--outbox-schema: %v", err)
	}
	poolCfg, err := pgxpool.ParseConfig(f.store.databaseURL)
	if err != nil {
		return nil, usagef("--database-url: %v", err)
	}
	poolCfg.MaxConns = relay.WorkersDefault + 1
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return nil, err
	}
	if !f.noMigrate {
		ictx, cancel := context.WithTimeout(ctx, time.Minute)
		err := func() error {
			defer cancel()
			conn, err := pool.Acquire(ictx)
			if err != nil {
				return err
			}
			defer conn.Release()
			return outbox.Install(ictx, conn.Conn(), outbox.Options{Schema: o.schema, PayloadMaxBytes: f.limits.payloadMaxBytes})
		}()
		if err != nil {
			pool.Close()
			return nil, err
		}
	}
	opts, err := worker.DialOptions(worker.DialConfigFromEnv(c.getenv))
	if err != nil {
		pool.Close()
		return nil, usagef("--outbox-relay: %v", err)
	}
	conn, err := grpc.NewClient(loopback(lis), opts...)
	if err != nil {
		pool.Close()
		return nil, err
	}
	r, err := relay.New(relay.Config{
		Source: pool, Client: leaseholdv1.NewJobServiceClient(conn), Schema: o.schema,
		Logger: log.With(slog.String("component", "outbox_relay")),
	})
	if err != nil {
		_ = conn.Close()
		pool.Close()
		return nil, usagef("%v", err)
	}
	r.Start(ctx)
	log.InfoContext(ctx, "outbox relay started", slog.String("outbox_schema", o.schema))
	return func() {
		r.Stop()
		_ = conn.Close()
		pool.Close()
	}, nil
}

// loopback is the address to dial a listener on: itself, with an
// unspecified host (0.0.0.0, ::) replaced by loopback.
func loopback(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(tcp.Port))
}
