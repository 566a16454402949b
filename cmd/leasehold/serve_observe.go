package main

// serve's observability: the log format, telemetry (traces and metrics from
// the OTEL_* environment, the Prometheus scrape), and the plaintext HTTP
// port with /metrics, /healthz and /readyz. Kept apart from serve.go so the
// serve command's own flow stays short.

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/telemetry"
)

// httpListenDefault is where serve answers /metrics, /healthz and /readyz.
const httpListenDefault = "127.0.0.1:7401"

// Log formats of --log-format.
const (
	logFormatText = "text"
	logFormatJSON = "json"
)

// HTTP server limits: the port serves small, fast answers to scrapers and
// probes, never uploads.
const (
	httpReadHeaderTimeout = 5 * time.Second
	// httpWriteTimeout covers a scrape, whose queue gauges may wait for one
	// store query (bounded at 3s by the coordinator).
	httpWriteTimeout = 15 * time.Second
	httpIdleTimeout  = 2 * time.Minute
	// httpShutdownTimeout bounds the wait for scrapes in flight at exit.
	httpShutdownTimeout = 5 * time.Second
)

// observeFlags are serve's observability flags.
type observeFlags struct {
	httpListen string
	// httpTLS serves httpListen over TLS with the gRPC certificate files.
	httpTLS   bool
	logFormat string
	pprof     bool
}

func (c *cli) addObserveFlags(cmd *cobra.Command, fs *pflag.FlagSet, f *observeFlags) {
	fs.StringVar(&f.httpListen, "http-listen", httpListenDefault,
		`plaintext HTTP address for /metrics, /healthz and /readyz (env LEASEHOLD_HTTP_LISTEN); "" disables it, port 0 picks a free one`)
	fs.BoolVar(&f.httpTLS, "http-tls", false,
		"serve --http-listen over TLS with --tls-cert-file and --tls-key-file (re-read when they change), so the web console can take API keys from other machines (env LEASEHOLD_HTTP_TLS)")
	fs.StringVar(&f.logFormat, "log-format", logFormatText,
		"log format on stderr: text or json (env LEASEHOLD_LOG_FORMAT)")
	fs.BoolVar(&f.pprof, "pprof", false,
		"also serve Go's profiles under /debug/pprof/ on --http-listen (env LEASEHOLD_PPROF, e.g. 1 or true); off by default, since profiles show internals")
	_ = cmd.RegisterFlagCompletionFunc("log-format", cobra.FixedCompletions([]string{logFormatText, logFormatJSON}, cobra.ShellCompDirectiveNoFileComp))
}

// logHandler is the slog handler of --log-format.
func logHandler(format string, w io.Writer, level slog.Level) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case logFormatText:
		return slog.NewTextHandler(w, opts), nil
	case logFormatJSON:
		opts.ReplaceAttr = durationAsString
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, usagef("--log-format %q: use text or json", format)
}

// durationAsString writes a duration as Go's string ("1.5s", "250ms"), the
// form the text log and the flags use, instead of the JSON handler's
// integer nanoseconds.
func durationAsString(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

// startTelemetry sets up telemetry from the OTEL_* environment (and the
// Prometheus scrape when prometheus is set), logs where it goes, and
// returns it with the function that flushes it. The flush runs after ctx
// is cancelled, so it detaches from it, and is bounded so an unreachable
// collector cannot hold the process. A lost flush loses telemetry, not
// work: it is logged but does not change the exit code.
func (c *cli) startTelemetry(ctx context.Context, log *slog.Logger, serviceName string, prometheus bool) (*telemetry.Telemetry, func(), error) {
	tel, err := telemetry.Setup(ctx, telemetry.Options{
		Getenv: c.getenv, ServiceName: serviceName, ServiceVersion: Version, Prometheus: prometheus,
	})
	if err != nil {
		log.ErrorContext(ctx, "cannot set up telemetry", slog.String("error", err.Error()))
		return nil, nil, exitStatus(exitUsage)
	}
	if tel.Traces != "" || tel.Metrics != "" {
		// Export failures (e.g. the collector is down) reach otel's global
		// error handler; send them to our log rather than the standard
		// logger's unstructured stderr lines.
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.WarnContext(ctx, "opentelemetry", slog.String("error", err.Error()))
		}))
	}
	if tel.Traces != "" {
		log.InfoContext(ctx, "exporting traces", slog.String("exporter", tel.Traces))
	}
	if tel.Metrics != "" {
		log.InfoContext(ctx, "exporting metrics", slog.String("exporter", tel.Metrics))
	}
	for _, w := range tel.Warnings {
		log.WarnContext(ctx, "opentelemetry configuration", slog.String("warning", w))
	}
	return tel, func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryShutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			log.WarnContext(ctx, "flushing telemetry", slog.Duration("timeout", telemetryShutdownTimeout), slog.String("error", err.Error()))
		}
	}, nil
}

// coordinatorTelemetry is the coordinator's share of tel: its providers and
// a metrics recorder, created before the store so that the store's commits
// can be recorded too.
func coordinatorTelemetry(tel *telemetry.Telemetry) (coordinator.Config, error) {
	m, err := coordinator.NewMetrics(tel.MeterProvider)
	if err != nil {
		return coordinator.Config{}, err
	}
	return coordinator.Config{Metrics: m, MeterProvider: tel.MeterProvider, TracerProvider: tel.TracerProvider}, nil
}

// startHTTP serves /metrics, /healthz and /readyz on addr until the
// returned stop is called; an empty addr serves nothing. The bound address
// is logged (addr may have port 0).
func startHTTP(ctx context.Context, log *slog.Logger, addr string, coord *coordinator.Coordinator, metrics http.Handler, profiles bool, ui consoleRoute, tlsCfg *tls.Config) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", addr)
	if err != nil {
		log.ErrorContext(ctx, "cannot listen", slog.String("http_listen", addr), slog.String("error", err.Error()))
		return nil, exitStatus(exitFail)
	}
	mux := http.NewServeMux()
	health := coord.HealthHandler()
	mux.Handle("/healthz", health)
	mux.Handle("/readyz", health)
	if metrics != nil {
		mux.Handle("/metrics", metrics)
	}
	if ui.handler != nil {
		mux.Handle(ui.prefix, ui.handler)
	}
	if profiles {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		TLSConfig:         tlsCfg,
	}
	scheme := "http://"
	if tlsCfg != nil {
		scheme = "https://"
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		serve := srv.Serve
		if tlsCfg != nil {
			serve = func(l net.Listener) error { return srv.ServeTLS(l, "", "") }
		}
		if err := serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.ErrorContext(ctx, "http server failed", slog.String("http_listen", lis.Addr().String()), slog.String("error", err.Error()))
		}
	}()
	log.InfoContext(ctx, "leasehold http serving /metrics /healthz /readyz", slog.String("http_listen", lis.Addr().String()))
	if tlsCfg != nil {
		log.InfoContext(ctx, "leasehold http serves TLS (--http-tls)")
	}
	if ui.handler != nil {
		log.InfoContext(ctx, "leasehold web console", slog.String("url", scheme+lis.Addr().String()+ui.prefix))
	}
	return func() {
		// Stopping runs after ctx (the signal) has ended: keep its values only.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), httpShutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}, nil
}
