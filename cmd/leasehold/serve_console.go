package main

// serve's web console (package console) on the HTTP listener, under
// --console-prefix. It is a client of the coordinator's own gRPC listener,
// dialled over loopback with the client TLS settings of LEASEHOLD_TLS_*
// (as the embedded outbox relay does) but never LEASEHOLD_API_KEY: each
// call carries the signed-in person's key, or with --auth mtls the
// browser's certificate forwarded with a proof (docs/security.md).

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/console"
	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/worker"
)

// consoleFlags are serve's console flags.
type consoleFlags struct {
	prefix         string
	frameAncestors string
	sessionTTL     time.Duration
}

func (c *cli) addConsoleFlags(fs *pflag.FlagSet, f *consoleFlags) {
	fs.StringVar(&f.prefix, "console-prefix", console.PrefixDefault,
		`path the web console is served under on --http-listen (docs/console.md); "" turns it off`)
	fs.StringVar(&f.frameAncestors, "console-frame-ancestors", console.FrameAncestorsDefault,
		`the console's Content-Security-Policy frame-ancestors: who may embed it in a frame, e.g. "'self' https://ops.example.com"`)
	fs.DurationVar(&f.sessionTTL, "console-session-ttl", console.SessionTTLDefault,
		"how long a console sign-in lasts")
}

// consoleRoute is the console mounted at its prefix, and what stops it.
type consoleRoute struct {
	prefix  string
	handler http.Handler
	stop    func()
}

// startConsole builds the console against the coordinator listening on
// lis. It returns a zero route (nothing mounted) when the console or the
// HTTP listener is off, or with --auth mtls without --http-tls (it says so
// in the log).
func (c *cli) startConsole(ctx context.Context, log *slog.Logger, f *serveFlags, coord *coordinator.Coordinator, lis net.Addr) (consoleRoute, error) {
	cf := f.console
	if cf.prefix == "" || f.observe.httpListen == "" {
		return consoleRoute{}, nil
	}
	if coordinator.AuthMode(f.security.auth) == coordinator.AuthMTLS && !f.observe.httpTLS {
		log.WarnContext(ctx, "the web console is off: with --auth mtls it needs --http-tls, since a browser presents its client certificate only over TLS (docs/console.md)")
		return consoleRoute{}, nil
	}
	dial := worker.DialConfigFromEnv(c.getenv)
	dial.APIKey = ""
	opts, err := worker.DialOptions(dial)
	if err != nil {
		return consoleRoute{}, usagef("the console's connection to the coordinator: %v", err)
	}
	if !dial.UsesTLS() && f.security.certFile != "" {
		// The listener serves TLS and no client TLS is configured: this
		// process dials the loopback port it has itself just bound, so
		// there is no other party whose certificate could be checked.
		opts = []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
			MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, //nolint:gosec // G402: our own listener over loopback, see above
		}))}
	}
	conn, err := grpc.NewClient(loopback(lis), opts...)
	if err != nil {
		return consoleRoute{}, err
	}
	h, err := console.Handler(console.Config{
		Conn: conn, Auth: f.security.auth, SessionKey: coord.ConsoleSessionKey(),
		Prefix: cf.prefix, FrameAncestors: cf.frameAncestors, SessionTTL: cf.sessionTTL,
		Logger: log.With(slog.String("component", "console")),
	})
	if err != nil {
		_ = conn.Close()
		return consoleRoute{}, usagef("%v", err)
	}
	return consoleRoute{prefix: cf.prefix, handler: h, stop: func() { _ = conn.Close() }}, nil
}
