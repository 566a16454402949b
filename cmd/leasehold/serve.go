package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

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

// telemetryShutdownTimeout bounds the final telemetry flush. It comes after the
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

func (c *cli) addStoreFlags(fs *pflag.FlagSet, sf *storeFlags) {
	fs.StringVar(&sf.databaseURL, "database-url", "",
		"PostgreSQL URL (env LEASEHOLD_DATABASE_URL); empty: the embedded SQLite file")
	fs.StringVar(&sf.sqlitePath, "sqlite-path", sqlitePathDefault,
		"SQLite database file when no --database-url (env LEASEHOLD_SQLITE_PATH)")
}

func envOr(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// serveFlags are serve's flags.
type serveFlags struct {
	store     storeFlags
	listen    string
	noMigrate bool
	tenant    string
	logLevel  string
	grace     time.Duration
	security  securityFlags
	observe   observeFlags
	limits    limitFlags
	// outboxRelay is the embedded relay (serve_outbox.go).
	outboxRelay outboxRelayFlags
	// console is the web console (serve_console.go).
	console consoleFlags
}

func (c *cli) serveCommand() *cobra.Command {
	var f serveFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the coordinator (SQLite ./leasehold.db by default)",
		Long: "Run the coordinator until SIGINT or SIGTERM, then shut it down gracefully.\n" +
			"It uses PostgreSQL when --database-url is set, otherwise the embedded SQLite file.",
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := bindFlagEnv(c.getenv, cmd.Flags()); err != nil {
				return err
			}
			return c.runServe(cmd.Context(), &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.listen, "listen", listenDefault, "address to serve gRPC on")
	fs.BoolVar(&f.noMigrate, "no-migrate", false, "do not apply PostgreSQL migrations at start (run \"leasehold migrate\" instead); the embedded SQLite file is always brought up to date")
	fs.StringVar(&f.tenant, "tenant", coordinator.TenantDefault, "tenant every call runs as with --auth none; with auth, the caller's key decides")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.DurationVar(&f.grace, "shutdown-grace", coordinator.ShutdownGraceDefault, "how long worker streams get to drain, and in-flight calls to finish, at shutdown")
	c.addStoreFlags(fs, &f.store)
	c.addLimitFlags(fs, &f.limits)
	c.addSecurityFlags(fs, &f.security)
	_ = cmd.RegisterFlagCompletionFunc("auth", cobra.FixedCompletions([]string{"none", "api-key", "mtls"}, cobra.ShellCompDirectiveNoFileComp))
	c.addObserveFlags(cmd, fs, &f.observe)
	c.addOutboxRelayFlags(fs, &f.outboxRelay)
	c.addConsoleFlags(fs, &f.console)
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logLevels, cobra.ShellCompDirectiveNoFileComp))
	documentFlagEnv(fs)
	return withoutGlobalFlags(cmd)
}

// runServe runs the coordinator until ctx ends (SIGINT/SIGTERM), then shuts
// it down in the steps documented on coordinator.Coordinator.Shutdown, stops
// the HTTP port and flushes buffered telemetry as the last step. Once the logger exists,
// failures are logged rather than printed, so that serve's stderr stays one
// log stream, and returned as a bare exit status.
func (c *cli) runServe(ctx context.Context, f *serveFlags) error {
	tuneGC(c.getenv)
	log, err := f.logger(c)
	if err != nil {
		return err
	}
	tel, flushTelemetry, err := c.startTelemetry(ctx, log, telemetry.ServiceNameDefault, f.observe.httpListen != "")
	if err != nil {
		return err
	}
	// Deferred first, so it runs last: after the store has closed, and on
	// every early return.
	defer flushTelemetry()
	coord, err := openCoordinator(ctx, log, f, tel)
	if err != nil {
		return err
	}
	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", f.listen)
	if err != nil {
		_ = coord.Shutdown(context.WithoutCancel(ctx))
		log.ErrorContext(ctx, "cannot listen", slog.String("listen", f.listen), slog.String("error", err.Error()))
		return exitStatus(exitFail)
	}
	if err := f.security.checkExposure(log, lis.Addr()); err != nil {
		log.ErrorContext(ctx, "unsafe configuration", slog.String("error", err.Error()))
		_ = lis.Close() // the error above is the one to report
		_ = coord.Shutdown(context.WithoutCancel(ctx))
		return exitStatus(exitUsage)
	}
	httpTLS, err := f.httpTLSConfig(log)
	if err != nil {
		log.ErrorContext(ctx, "cannot set up TLS on the HTTP listener", slog.String("error", err.Error()))
		_ = lis.Close() // the error above is the one to report
		_ = coord.Shutdown(context.WithoutCancel(ctx))
		return exitStatus(exitUsage)
	}
	ui, err := c.startConsole(ctx, log, f, coord, lis.Addr())
	if err != nil {
		log.ErrorContext(ctx, "cannot start the web console", slog.String("error", err.Error()))
		_ = lis.Close() // the error above is the one to report
		_ = coord.Shutdown(context.WithoutCancel(ctx))
		return exitStatus(exitUsage)
	}
	if ui.stop != nil {
		defer ui.stop()
	}
	// Stopped after the coordinator, so /readyz answers 503 while it
	// drains.
	stopHTTP, err := startHTTP(ctx, log, f.observe.httpListen, coord, tel.MetricsHandler, f.observe.pprof, ui, httpTLS)
	if err != nil {
		_ = lis.Close() // the error above is the one to report
		_ = coord.Shutdown(context.WithoutCancel(ctx))
		return err
	}
	defer stopHTTP()
	// The relay's calls fail once ctx ends (their rows stay for the next
	// start), so stopping it last, after the coordinator, loses nothing.
	stopRelay, err := c.startOutboxRelay(ctx, log, f, lis.Addr())
	if err != nil {
		log.ErrorContext(ctx, "cannot start the outbox relay", slog.String("error", err.Error()))
		_ = lis.Close() // the error above is the one to report
		_ = coord.Shutdown(context.WithoutCancel(ctx))
		var usage *usageError
		if errors.As(err, &usage) {
			return exitStatus(exitUsage)
		}
		return exitStatus(exitFail)
	}
	defer stopRelay()
	return serveUntilDone(ctx, log, coord, lis, f.grace)
}

// logger checks the flags that need checking and builds serve's log.
func (f *serveFlags) logger(c *cli) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return nil, usagef("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	if f.grace <= 0 {
		return nil, usagef("--shutdown-grace must be positive")
	}
	if err := f.security.check(); err != nil {
		return nil, err
	}
	h, err := logHandler(f.observe.logFormat, c.stderr, level)
	if err != nil {
		return nil, err
	}
	return slog.New(h), nil
}

// openCoordinator opens the store and builds the coordinator over it.
func openCoordinator(ctx context.Context, log *slog.Logger, f *serveFlags, tel *telemetry.Telemetry) (*coordinator.Coordinator, error) {
	cfg, err := coordinatorTelemetry(tel)
	if err != nil {
		log.ErrorContext(ctx, "cannot set up metrics", slog.String("error", err.Error()))
		return nil, exitStatus(exitFail)
	}
	opts := store.EngineOptions{Commits: store.CommitTelemetry{Observer: cfg.Metrics, TracerProvider: cfg.TracerProvider}, Breakers: cfg.Metrics}
	st, err := openStore(ctx, log, f.store, !f.noMigrate, opts)
	if err != nil {
		log.ErrorContext(ctx, "cannot open the store", slog.String("error", err.Error()))
		return nil, exitStatus(exitFail)
	}
	tlsCfg, err := f.security.tlsConfig(log, f.consoleDelegates())
	if err != nil {
		_ = st.Close() // the error below is the one to report
		log.ErrorContext(ctx, "cannot load the TLS certificate", slog.String("error", err.Error()))
		return nil, exitStatus(exitUsage)
	}
	cfg.Store, cfg.Logger, cfg.Tenant, cfg.Version, cfg.ShutdownGrace = st, log, f.tenant, Version, f.grace
	cfg.Auth, cfg.TLS = coordinator.AuthMode(f.security.auth), tlsCfg
	f.limits.apply(&cfg)
	coord, err := coordinator.New(cfg) //nolint:contextcheck // New takes no ctx (its API); its one store read is bounded by its own timeout
	if err != nil {
		_ = st.Close() // the error below is the one to report
		log.ErrorContext(ctx, "invalid configuration", slog.String("error", err.Error()))
		return nil, exitStatus(exitUsage)
	}
	return coord, nil
}

// openStore opens the configured engine: PostgreSQL when a database URL is
// set (migrated first unless migrate is false), otherwise the SQLite file
// (which Open creates and migrates).
func openStore(ctx context.Context, log *slog.Logger, sf storeFlags, migrate bool, opts store.EngineOptions) (store.Store, error) {
	if sf.databaseURL != "" {
		if migrate {
			if err := postgres.Migrate(ctx, sf.databaseURL); err != nil {
				return nil, err
			}
		}
		return postgres.Open(ctx, postgres.Config{DatabaseURL: sf.databaseURL, Logger: log, Options: opts})
	}
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sf.sqlitePath, Logger: log, Options: opts})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// serveUntilDone serves on lis until ctx ends or serving fails, then shuts
// the coordinator down.
func serveUntilDone(ctx context.Context, log *slog.Logger, coord *coordinator.Coordinator, lis net.Listener, grace time.Duration) error {
	served := make(chan error, 1)
	go func() { served <- coord.Serve(lis) }()

	failed := false
	select {
	case <-ctx.Done():
		// Restore the default disposition: a second Ctrl-C or SIGTERM
		// ends the process at once instead of waiting for the grace.
		signal.Reset(os.Interrupt, syscall.SIGTERM)
		log.InfoContext(ctx, "signal received; shutting down (a second signal stops at once)", slog.Duration("grace", grace))
	case err := <-served:
		// Serve ended without a shutdown: the listener broke.
		log.ErrorContext(ctx, "serve failed", slog.String("error", err.Error()))
		failed = true
	}
	// Shutdown is bounded by its own steps (two grace periods at most);
	// the extra minute only guards against a store that hangs on close.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*grace+time.Minute)
	defer cancel()
	if err := coord.Shutdown(sctx); err != nil {
		log.ErrorContext(ctx, "shutdown", slog.String("error", err.Error()))
		failed = true
	}
	if !failed {
		if err := <-served; err != nil {
			log.ErrorContext(ctx, "serve failed", slog.String("error", err.Error()))
			failed = true
		}
	}
	if failed {
		return exitStatus(exitFail)
	}
	return nil
}
