package main

// serve's security flags: TLS (certificate files reloaded when they
// change), client certificate verification, the auth mode, and the refusal
// to serve unauthenticated beyond loopback.

import (
	"crypto/tls"
	"log/slog"
	"net"
	"strings"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/certreload"
)

// Environment variables of serve's security flags. The certificate
// variables say SERVER so that a shell set up for the CLI's client
// certificate (LEASEHOLD_TLS_CERT_FILE) never hands it to serve as the
// server's.
const (
	envAuth              = "LEASEHOLD_AUTH"
	envServerTLSCert     = "LEASEHOLD_SERVER_TLS_CERT_FILE"
	envServerTLSKey      = "LEASEHOLD_SERVER_TLS_KEY_FILE"
	envServerTLSClientCA = "LEASEHOLD_SERVER_TLS_CLIENT_CA_FILE"
)

// securityFlags are serve's TLS and auth flags.
type securityFlags struct {
	auth         string
	certFile     string
	keyFile      string
	clientCAFile string
	// allowUnauthenticated lets --auth none listen beyond loopback. It
	// has no environment variable on purpose: it must be on the command
	// line, where it is seen.
	allowUnauthenticated bool
}

func (c *cli) addSecurityFlags(fs *pflag.FlagSet, f *securityFlags) {
	fs.StringVar(&f.auth, "auth", string(coordinator.AuthNone),
		"how callers authenticate: none, api-key or mtls (env "+envAuth+")")
	fs.StringVar(&f.certFile, "tls-cert-file", "",
		"serve TLS with this PEM certificate (chain), re-read when it changes (env "+envServerTLSCert+")")
	fs.StringVar(&f.keyFile, "tls-key-file", "",
		"the certificate's PEM private key (env "+envServerTLSKey+")")
	fs.StringVar(&f.clientCAFile, "tls-client-ca-file", "",
		"verify client certificates against these PEM CAs: required with --auth mtls, optional otherwise (env "+envServerTLSClientCA+")")
	fs.BoolVar(&f.allowUnauthenticated, "insecure-allow-unauthenticated", false,
		"with --auth none, listen on a non-loopback address anyway: anyone who reaches the port may do anything")
}

// check validates the flag combination.
func (f *securityFlags) check() error {
	switch coordinator.AuthMode(f.auth) {
	case coordinator.AuthNone, coordinator.AuthAPIKey, coordinator.AuthMTLS:
	default:
		return usagef("--auth %q: use none, api-key or mtls", f.auth)
	}
	if (f.certFile == "") != (f.keyFile == "") {
		return usagef("--tls-cert-file and --tls-key-file go together")
	}
	if f.clientCAFile != "" && f.certFile == "" {
		return usagef("--tls-client-ca-file needs TLS: set --tls-cert-file and --tls-key-file")
	}
	if coordinator.AuthMode(f.auth) == coordinator.AuthMTLS && f.clientCAFile == "" {
		return usagef("--auth mtls needs --tls-cert-file, --tls-key-file and --tls-client-ca-file")
	}
	return nil
}

// tlsConfig loads the certificate files into a reloading TLS config, or
// returns nil without TLS. Client certificates are required with --auth
// mtls and otherwise only verified when given, so that clients without one
// (kubelet probes of grpc.health.v1, API-key clients) still connect.
//
// With consoleDelegates, loopback connections may omit the client
// certificate: the console dials over loopback and forwards the browser's
// certificate with a proof instead; the coordinator still refuses any
// call without a certificate, direct or forwarded.
func (f *securityFlags) tlsConfig(log *slog.Logger, consoleDelegates bool) (*tls.Config, error) {
	if f.certFile == "" {
		return nil, nil
	}
	clientAuth := tls.VerifyClientCertIfGiven
	if coordinator.AuthMode(f.auth) == coordinator.AuthMTLS {
		clientAuth = tls.RequireAndVerifyClientCert
	}
	r, err := certreload.New(certreload.Config{
		CertFile: f.certFile, KeyFile: f.keyFile, ClientCAFile: f.clientCAFile,
		ClientAuth: clientAuth, LoopbackMayOmitCert: consoleDelegates, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	return r.ServerConfig(), nil
}

// consoleDelegates reports whether the console will forward browsers'
// client certificates to the coordinator (--auth mtls, console on, over
// --http-tls).
func (f *serveFlags) consoleDelegates() bool {
	return coordinator.AuthMode(f.security.auth) == coordinator.AuthMTLS &&
		f.console.prefix != "" && f.observe.httpListen != "" && f.observe.httpTLS
}

// httpTLSConfig is the HTTP listener's TLS with --http-tls (nil without):
// the gRPC certificate files, re-read the same way, with HTTP/2 or
// HTTP/1.1. It asks for no client certificate (scrapers and probes have
// none), except with --auth mtls: then it asks for one and verifies a
// given one against --tls-client-ca-file, for the console, which refuses
// requests without one; /metrics and the probes still answer without.
func (f *serveFlags) httpTLSConfig(log *slog.Logger) (*tls.Config, error) {
	if !f.observe.httpTLS {
		return nil, nil
	}
	if f.security.certFile == "" || f.observe.httpListen == "" {
		return nil, usagef("--http-tls needs --tls-cert-file, --tls-key-file and --http-listen")
	}
	rc := certreload.Config{
		CertFile: f.security.certFile, KeyFile: f.security.keyFile, ClientAuth: tls.NoClientCert, Logger: log,
	}
	if coordinator.AuthMode(f.security.auth) == coordinator.AuthMTLS {
		rc.ClientCAFile, rc.ClientAuth = f.security.clientCAFile, tls.VerifyClientCertIfGiven
	}
	r, err := certreload.New(rc)
	if err != nil {
		return nil, err
	}
	base := r.ServerConfig()
	return &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := base.GetConfigForClient(h)
		if err != nil {
			return nil, err
		}
		c.NextProtos = []string{"h2", "http/1.1"}
		return c, nil
	}}, nil
}

// checkExposure refuses to serve unauthenticated beyond loopback unless
// --insecure-allow-unauthenticated, and warns (at every start) about the
// setups that are allowed but unsafe.
func (f *securityFlags) checkExposure(log *slog.Logger, addr net.Addr) error {
	loopback := isLoopback(addr)
	mode := coordinator.AuthMode(f.auth)
	switch {
	case mode == coordinator.AuthNone && !loopback && !f.allowUnauthenticated:
		return usagef("refusing to listen on %s with --auth none: anyone who can reach it could do anything. "+
			"Use --auth api-key or --auth mtls (see \"leasehold key create\"), listen on 127.0.0.1, "+
			"or pass --insecure-allow-unauthenticated", addr)
	case mode == coordinator.AuthNone && !loopback:
		log.Warn("INSECURE: serving without authentication on a non-loopback address (--insecure-allow-unauthenticated): "+
			"anyone who can reach it may create, read, cancel and complete any job", slog.String("listen", addr.String()))
	case mode == coordinator.AuthAPIKey && f.certFile == "" && !loopback:
		log.Warn("API keys will cross the network in clear text: serve TLS (--tls-cert-file) unless a proxy or mesh terminates TLS in front",
			slog.String("listen", addr.String()))
	}
	if f.allowUnauthenticated && mode != coordinator.AuthNone {
		log.Warn("--insecure-allow-unauthenticated has no effect with --auth " + f.auth)
	}
	return nil
}

// isLoopback reports whether addr is a loopback listener: 127.0.0.0/8 or
// ::1. The unspecified address (0.0.0.0, ::) listens on every interface.
func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true
	}
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return false
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
