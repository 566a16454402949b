package main

// The outbox commands: `outbox install|uninstall|sql` manage the outbox
// schema in the application's database, and `relay` moves its rows into a
// coordinator as jobs (packages outbox and outbox/relay; docs/outbox.md).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/outbox"
	"github.com/leasehold/leasehold/outbox/relay"
)

// relayHTTPListenDefault is where relay answers /metrics, /healthz and
// /readyz: next to serve's 7401, so both fit on one host.
const relayHTTPListenDefault = "127.0.0.1:7402"

// outboxFlags locate the outbox: the application's database and schema.
type outboxFlags struct {
	databaseURL     string
	schema          string
	payloadMaxBytes int
	force           bool
}

func (c *cli) addOutboxFlags(fs *pflag.FlagSet, f *outboxFlags, urlFlag string) {
	fs.StringVar(&f.databaseURL, urlFlag, c.getenv("LEASEHOLD_OUTBOX_DATABASE_URL"),
		"the application's PostgreSQL URL, where the outbox lives (env LEASEHOLD_OUTBOX_DATABASE_URL)")
	fs.StringVar(&f.schema, "schema", envOr(c.getenv, "LEASEHOLD_OUTBOX_SCHEMA", outbox.SchemaDefault),
		"PostgreSQL schema of the outbox tables (env LEASEHOLD_OUTBOX_SCHEMA)")
}

func (c *cli) outboxCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Install or remove the transactional outbox in an application's database",
		Long: "The outbox lets an application enqueue jobs in its own PostgreSQL transaction;\n" +
			"\"leasehold relay\" turns its rows into jobs. See docs/outbox.md.",
		Args:                       cobra.ArbitraryArgs,
		RunE:                       noSubcommand,
		SuggestionsMinimumDistance: suggestionDistance,
	}
	cmd.AddCommand(c.outboxInstallCommand(), c.outboxUninstallCommand(), c.outboxSQLCommand())
	return withoutGlobalFlags(cmd)
}

func (c *cli) outboxInstallCommand() *cobra.Command {
	var f outboxFlags
	cmd := &cobra.Command{
		Use:   "install --database-url URL",
		Short: "Create the outbox schema (does nothing when it is there)",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withOutboxConn(cmd.Context(), f, func(ctx context.Context, conn *pgx.Conn, o outbox.Options) error {
				if err := outbox.Install(ctx, conn, o); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "outbox installed in schema %s (version %d)\n", o.Schema, outbox.SchemaVersion)
				return nil
			})
		},
	}
	c.addOutboxFlags(cmd.Flags(), &f, "database-url")
	cmd.Flags().IntVar(&f.payloadMaxBytes, "max-payload-bytes", outbox.PayloadMaxBytesDefault,
		"largest payload a row may hold: the coordinator's --max-payload-bytes")
	return withoutGlobalFlags(cmd)
}

func (c *cli) outboxUninstallCommand() *cobra.Command {
	var f outboxFlags
	cmd := &cobra.Command{
		Use:   "uninstall --database-url URL [--force]",
		Short: "Drop the outbox schema; refused while rows wait unless --force",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.withOutboxConn(cmd.Context(), f, func(ctx context.Context, conn *pgx.Conn, o outbox.Options) error {
				if err := outbox.Uninstall(ctx, conn, o, f.force); err != nil {
					return err
				}
				fmt.Fprintf(c.stdout, "outbox uninstalled: schema %s is gone\n", o.Schema)
				return nil
			})
		},
	}
	c.addOutboxFlags(cmd.Flags(), &f, "database-url")
	cmd.Flags().BoolVar(&f.force, "force", false, "drop the rows still waiting for the relay (their jobs are lost)")
	return withoutGlobalFlags(cmd)
}

func (c *cli) outboxSQLCommand() *cobra.Command {
	var f outboxFlags
	cmd := &cobra.Command{
		Use:   "sql",
		Short: "Print the install script, for a migration tool",
		Args:  positional(),
		RunE: func(*cobra.Command, []string) error {
			script, err := outbox.SchemaSQL(outbox.Options{Schema: f.schema, PayloadMaxBytes: f.payloadMaxBytes})
			if err != nil {
				return usagef("%v", err)
			}
			_, err = fmt.Fprint(c.stdout, script)
			return err
		},
	}
	cmd.Flags().StringVar(&f.schema, "schema", envOr(c.getenv, "LEASEHOLD_OUTBOX_SCHEMA", outbox.SchemaDefault),
		"PostgreSQL schema of the outbox tables (env LEASEHOLD_OUTBOX_SCHEMA)")
	cmd.Flags().IntVar(&f.payloadMaxBytes, "max-payload-bytes", outbox.PayloadMaxBytesDefault,
		"largest payload a row may hold: the coordinator's --max-payload-bytes")
	return withoutGlobalFlags(cmd)
}

func (c *cli) withOutboxConn(ctx context.Context, f outboxFlags, fn func(context.Context, *pgx.Conn, outbox.Options) error) error {
	if f.databaseURL == "" {
		return usagef("--database-url is required (or LEASEHOLD_OUTBOX_DATABASE_URL)")
	}
	o := outbox.Options{Schema: f.schema, PayloadMaxBytes: f.payloadMaxBytes}.WithDefaults()
	if err := o.Validate(); err != nil {
		return usagef("%v", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, f.databaseURL)
	if err != nil {
		return fmt.Errorf("connect to the outbox database: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	return fn(ctx, conn, o)
}

// relayFlags are relay's own flags; --addr, the TLS flags and
// LEASEHOLD_API_KEY say how to reach the coordinator, as for every client.
type relayFlags struct {
	outbox            outboxFlags
	workers           int
	batchSize         int
	pollInterval      time.Duration
	idempotencyWindow time.Duration
	httpListen        string
	logFormat         string
	logLevel          string
}

func (c *cli) relayCommand() *cobra.Command {
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay --source-database-url URL [--addr host:port]",
		Short: "Move outbox rows from an application's database into jobs",
		Long: "Claim rows of the outbox in --source-database-url and create their jobs on the coordinator at\n" +
			"--addr (authenticated as a producer: LEASEHOLD_API_KEY or --tls-cert-file), deleting each row once\n" +
			"its job exists. Rows the coordinator refuses for good move to outbox_dead. Several relays may run\n" +
			"side by side. SIGTERM or SIGINT stops it after the batch in flight. See docs/outbox.md.",
		Args: positional(),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return c.global.check(cmd)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.runRelay(cmd.Context(), &f)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&f.outbox.databaseURL, "source-database-url", c.getenv("LEASEHOLD_SOURCE_DATABASE_URL"),
		"the application's PostgreSQL URL, where the outbox lives (env LEASEHOLD_SOURCE_DATABASE_URL)")
	fs.StringVar(&f.outbox.schema, "schema", envOr(c.getenv, "LEASEHOLD_OUTBOX_SCHEMA", outbox.SchemaDefault),
		"PostgreSQL schema of the outbox tables (env LEASEHOLD_OUTBOX_SCHEMA)")
	fs.IntVar(&f.workers, "workers", relay.WorkersDefault, "claim loops running at once, each with its own database connection")
	fs.IntVar(&f.batchSize, "batch-size", relay.BatchSizeDefault, "most rows one claim takes (at most 1000)")
	fs.DurationVar(&f.pollInterval, "poll-interval", relay.PollIntervalDefault, "claim this often when no notification came")
	fs.DurationVar(&f.idempotencyWindow, "idempotency-window", relay.Config{}.WithDefaults().IdempotencyWindow,
		"the coordinator's idempotency window (24h unless its configuration changed it): rows older than half of it are reported")
	fs.StringVar(&f.httpListen, "http-listen", envOr(c.getenv, "LEASEHOLD_RELAY_HTTP_LISTEN", relayHTTPListenDefault),
		`plaintext HTTP address for /metrics, /healthz and /readyz (env LEASEHOLD_RELAY_HTTP_LISTEN); "" disables it, port 0 picks a free one`)
	fs.StringVar(&f.logFormat, "log-format", envOr(c.getenv, "LEASEHOLD_LOG_FORMAT", logFormatText), "log format on stderr: text or json (env LEASEHOLD_LOG_FORMAT)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	return cmd
}

// runRelay runs the relay until ctx (SIGTERM/SIGINT in main) is done.
func (c *cli) runRelay(ctx context.Context, f *relayFlags) error {
	if f.outbox.databaseURL == "" {
		return usagef("--source-database-url is required (or LEASEHOLD_SOURCE_DATABASE_URL)")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usagef("--log-level %q: use debug, info, warn or error", f.logLevel)
	}
	h, err := logHandler(f.logFormat, c.stderr, level)
	if err != nil {
		return err
	}
	log := slog.New(h)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg := relay.Config{
		Schema: f.outbox.schema, Workers: f.workers, BatchSize: f.batchSize, PollInterval: f.pollInterval,
		IdempotencyWindow: f.idempotencyWindow, CallTimeout: c.global.timeout, Logger: log, Metrics: relay.NewMetrics(reg),
	}
	// Check the flags before connecting anywhere (Source and Client are
	// filled in below).
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usagef("%v", err)
	}
	poolCfg, err := pgxpool.ParseConfig(f.outbox.databaseURL)
	if err != nil {
		return usagef("--source-database-url: %v", err)
	}
	// One connection per worker plus one for the stats; LISTEN has its own.
	poolCfg.MaxConns = int32(f.workers + 1) // bounded by relay.WorkersMax
	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
	if err != nil {
		return fmt.Errorf("connect to the outbox database: %w", err)
	}
	defer pool.Close()
	if err := checkOutboxVersion(ctx, pool, f.outbox.schema); err != nil {
		return err
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	cfg.Source, cfg.Client = pool, leaseholdv1.NewJobServiceClient(conn)
	r, err := relay.New(cfg)
	if err != nil {
		return usagef("%v", err)
	}
	stopHTTP, err := startRelayHTTP(ctx, log, f.httpListen, r, promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	if err != nil {
		return err
	}
	defer stopHTTP()
	r.Start(ctx)
	log.InfoContext(ctx, "leasehold relay started", slog.String("addr", c.global.addr), slog.String("schema", f.outbox.schema),
		slog.Int("workers", f.workers), slog.Int("batch_size", f.batchSize))
	<-ctx.Done()
	// Stop waits for the batches in flight: their rows are deleted (or
	// left for the next relay) before the process exits.
	r.Stop()
	log.InfoContext(ctx, "leasehold relay stopped")
	return nil
}

// startRelayHTTP serves /metrics, /healthz (the process answers) and
// /readyz (the relay's last round succeeded) on addr; "" serves nothing.
func startRelayHTTP(ctx context.Context, log *slog.Logger, addr string, r *relay.Relay, metrics http.Handler) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		log.ErrorContext(ctx, "cannot listen", slog.String("http_listen", addr), slog.String("error", err.Error()))
		return nil, exitStatus(exitFail)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := r.Healthy(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.ErrorContext(ctx, "http server failed", slog.String("http_listen", lis.Addr().String()), slog.String("error", err.Error()))
		}
	}()
	log.InfoContext(ctx, "leasehold relay http serving /metrics /healthz /readyz", slog.String("http_listen", lis.Addr().String()))
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}

// checkOutboxVersion refuses to relay from an outbox older than this
// binary's (its claim reads columns an older schema lacks): install
// upgrades it in place.
func checkOutboxVersion(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("connect to the outbox database: %w", err)
	}
	defer conn.Release()
	v, err := outbox.InstalledVersion(ctx, conn.Conn(), schema)
	if err != nil {
		return err
	}
	if v < outbox.SchemaVersion {
		return fmt.Errorf("the outbox in schema %s is at version %d, this relay needs %d: run leasehold outbox install (it upgrades in place, keeping waiting rows)",
			schema, v, outbox.SchemaVersion)
	}
	return nil
}
