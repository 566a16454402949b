package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/sqlite"
)

// Defaults of `leasehold serve` and `leasehold migrate`.
const (
	listenDefault     = "127.0.0.1:7400"
	sqlitePathDefault = "./leasehold.db"
)

// telemetryShutdownTimeout bounds the final trace flush. It comes after the
// coordinator's own shutdown (at most two grace periods, 20s by default),
// so the whole stays inside Kubernetes' default 30s termination grace even
// when the collector is unreachable.
const telemetryShutdownTimeout = 5 * time.Second

// storeFlags are the flags that choose and locate the database, shared by
// serve and migrate.
type storeFlags struct {
	databaseURL string
	sqlitePath  string
}

func (c *cli) addStoreFlags(fs *flag.FlagSet, sf *storeFlags) {
	fs.StringVar(&sf.databaseURL, "database-url", c.getenv("LEASEHOLD_DATABASE_URL"),
		"PostgreSQL URL (env LEASEHOLD_DATABASE_URL); empty: the embedded SQLite file")
	fs.StringVar(&sf.sqlitePath, "sqlite-path", envOr(c.getenv, "LEASEHOLD_SQLITE_PATH", sqlitePathDefault),
		"SQLite database file when no --database-url (env LEASEHOLD_SQLITE_PATH)")
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// runServe runs the coordinator until ctx ends (SIGINT/SIGTERM), then shuts
// it down in the steps documented on coordinator.Coordinator.Shutdown,
// flushes buffered trace spans as the last step, and exits 0.
func (c *cli) runServe(ctx context.Context, args []string) int {
	fs := flag.NewFlagSet("leasehold serve", flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	var (
		sf       storeFlags
		listen   = fs.String("listen", envOr(c.getenv, "LEASEHOLD_LISTEN", listenDefault), "address to serve gRPC on (env LEASEHOLD_LISTEN)")
		noMig    = fs.Bool("no-migrate", false, "do not apply PostgreSQL migrations at start (run `leasehold migrate` instead); the embedded SQLite file is always brought up to date")
		tenant   = fs.String("tenant", envOr(c.getenv, "LEASEHOLD_TENANT", coordinator.TenantDefault), "tenant every call runs as until authentication lands (env LEASEHOLD_TENANT)")
		logLevel = fs.String("log-level", envOr(c.getenv, "LEASEHOLD_LOG_LEVEL", "info"), "debug, info, warn or error (env LEASEHOLD_LOG_LEVEL)")
		grace    = fs.Duration("shutdown-grace", coordinator.ShutdownGraceDefault, "how long worker streams get to drain, and in-flight calls to finish, at shutdown")
	)
	c.addStoreFlags(fs, &sf)
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "leasehold serve: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(c.stderr, "leasehold serve: --log-level %q: use debug, info, warn or error\n", *logLevel)
		return exitUsage
	}
	if *grace <= 0 {
		fmt.Fprintln(c.stderr, "leasehold serve: --shutdown-grace must be positive")
		return exitUsage
	}
	log := slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: level}))

	traceEndpoint := telemetry.TracesEndpoint(c.getenv)
	if traceEndpoint != "" {
		// Export failures (e.g. the collector is down) reach otel's
		// global error handler; send them to our log rather than the
		// standard logger's unstructured stderr lines.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("opentelemetry", slog.String("error", err.Error()))
		}))
	}
	shutdownTelemetry, err := telemetry.Setup(ctx, c.getenv, Version)
	if err != nil {
		log.Error("cannot set up tracing", slog.String("error", err.Error()))
		return exitUsage
	}
	if traceEndpoint != "" {
		log.Info("exporting traces over OTLP/gRPC", slog.String("endpoint", traceEndpoint))
	}
	// The last shutdown step, after the store has closed and on every
	// early return: flush the spans of the final calls. ctx is already
	// cancelled by then, so detach from it, and bound the flush so an
	// unreachable collector cannot hold the process. A lost flush loses
	// traces, not work, so it is logged but does not change the exit code.
	defer func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryShutdownTimeout)
		defer cancel()
		if err := shutdownTelemetry(fctx); err != nil {
			log.Warn("flushing traces", slog.Duration("timeout", telemetryShutdownTimeout), slog.String("error", err.Error()))
		}
	}()

	st, err := openStore(ctx, log, sf, !*noMig)
	if err != nil {
		log.Error("cannot open the store", slog.String("error", err.Error()))
		return exitFail
	}
	coord, err := coordinator.New(coordinator.Config{
		Store: st, Logger: log, Tenant: *tenant, Version: Version, ShutdownGrace: *grace,
	})
	if err != nil {
		st.Close()
		log.Error("invalid configuration", slog.String("error", err.Error()))
		return exitUsage
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		_ = coord.Shutdown(context.Background())
		log.Error("cannot listen", slog.String("listen", *listen), slog.String("error", err.Error()))
		return exitFail
	}
	served := make(chan error, 1)
	go func() { served <- coord.Serve(lis) }()

	code := exitOK
	select {
	case <-ctx.Done():
		// Restore the default disposition: a second Ctrl-C or SIGTERM
		// ends the process at once instead of waiting for the grace.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		log.Info("signal received; shutting down (a second signal stops at once)", slog.Duration("grace", *grace))
	case err := <-served:
		// Serve ended without a shutdown: the listener broke.
		log.Error("serve failed", slog.String("error", err.Error()))
		code = exitFail
	}
	// Shutdown is bounded by its own steps (two grace periods at most);
	// the extra minute only guards against a store that hangs on close.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2**grace+time.Minute)
	defer cancel()
	if err := coord.Shutdown(sctx); err != nil {
		log.Error("shutdown", slog.String("error", err.Error()))
		code = exitFail
	}
	if code == exitOK {
		if err := <-served; err != nil {
			log.Error("serve failed", slog.String("error", err.Error()))
			code = exitFail
		}
	}
	return code
}

// openStore opens the configured engine: PostgreSQL when a database URL is
// set (migrated first unless migrate is false), otherwise the SQLite file
// (which Open creates and migrates).
func openStore(ctx context.Context, log *slog.Logger, sf storeFlags, migrate bool) (store.Store, error) {
	if sf.databaseURL != "" {
		if migrate {
			if err := postgres.Migrate(ctx, sf.databaseURL); err != nil {
				return nil, err
			}
		}
		return postgres.Open(ctx, postgres.Config{DatabaseURL: sf.databaseURL, Logger: log})
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sf.sqlitePath, Logger: log})
	if err != nil {
		return nil, err
	}
	return st, nil
}
