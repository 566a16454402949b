package worker

// Connecting to a coordinator that serves TLS and authenticates callers:
// DialConfig (or DialConfigFromEnv) turns into grpc.DialOptions for
// grpc.NewClient, and Dial does both.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Environment variables DialConfigFromEnv reads; the leasehold CLI and
// worker exec read the same ones.
const (
	// EnvTLS, when "1" or "true", turns TLS on with the system roots.
	EnvTLS = "LEASEHOLD_TLS"
	// EnvTLSCAFile is a PEM bundle of the CAs to trust for the
	// coordinator's certificate (turns TLS on).
	EnvTLSCAFile = "LEASEHOLD_TLS_CA_FILE"
	// EnvTLSCertFile and EnvTLSKeyFile are the client certificate and key
	// presented for mTLS (turn TLS on).
	EnvTLSCertFile = "LEASEHOLD_TLS_CERT_FILE"
	EnvTLSKeyFile  = "LEASEHOLD_TLS_KEY_FILE"
	// EnvTLSServerName overrides the name the coordinator's certificate is
	// verified against (default: the host of the address dialled).
	EnvTLSServerName = "LEASEHOLD_TLS_SERVER_NAME"
	// EnvAPIKey is the API key sent with every call.
	EnvAPIKey = "LEASEHOLD_API_KEY"
)

// DialConfig says how to reach a coordinator. The zero value is plaintext
// without credentials: what the coordinator's zero-setup default
// (loopback, --auth none) expects.
type DialConfig struct {
	// TLS turns TLS on, verifying the coordinator against the system
	// roots, or CAFile when set. Setting CAFile, CertFile or KeyFile turns
	// it on as well.
	TLS bool
	// CAFile is a PEM bundle of the CAs trusted for the coordinator's
	// certificate, instead of the system roots.
	CAFile string
	// CertFile and KeyFile are the client certificate presented for mTLS
	// (--auth mtls, or a coordinator that verifies client certificates).
	// Both or neither.
	CertFile, KeyFile string
	// ServerName overrides the name the coordinator's certificate is
	// verified against.
	ServerName string
	// APIKey, when set, is sent with every call as
	// "authorization: Bearer <key>". It is refused (the call fails before
	// anything is sent) over a connection without TLS to anything but a
	// loopback address, so a key never crosses a network in clear text.
	APIKey string
}

// DialConfigFromEnv reads the LEASEHOLD_TLS* variables and
// LEASEHOLD_API_KEY through getenv (os.Getenv when nil).
func DialConfigFromEnv(getenv func(string) string) DialConfig {
	if getenv == nil {
		getenv = os.Getenv
	}
	on, _ := strconv.ParseBool(getenv(EnvTLS))
	return DialConfig{
		TLS:        on,
		CAFile:     getenv(EnvTLSCAFile),
		CertFile:   getenv(EnvTLSCertFile),
		KeyFile:    getenv(EnvTLSKeyFile),
		ServerName: getenv(EnvTLSServerName),
		APIKey:     getenv(EnvAPIKey),
	}
}

// UsesTLS reports whether the configuration turns TLS on.
func (c DialConfig) UsesTLS() bool {
	return c.TLS || c.CAFile != "" || c.CertFile != "" || c.KeyFile != ""
}

// TLSConfig returns the client TLS configuration, or nil when TLS is off.
func (c DialConfig) TLSConfig() (*tls.Config, error) {
	if !c.UsesTLS() {
		return nil, nil
	}
	return TLSConfig(c.CAFile, c.CertFile, c.KeyFile, c.ServerName)
}

// TLSConfig builds a client TLS configuration (TLS 1.2 at least) that
// trusts the CAs of caFile (the system roots when empty) and presents the
// certificate of certFile and keyFile when both are set. serverName, when
// set, is the name the coordinator's certificate must carry.
func TLSConfig(caFile, certFile, keyFile, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("leasehold: read TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("leasehold: TLS CA file %s holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("leasehold: a TLS client certificate needs both the certificate file and the key file")
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("leasehold: load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// DialOptions returns the options the SDK recommends for grpc.NewClient on
// a connection to a coordinator: cfg's transport and per-call credentials,
// and OpenTelemetry's gRPC client stats handler, so that every call is a
// client span carrying the caller's trace context to the coordinator (a
// producer's CreateJob joins the producer's trace, a worker's calls made
// inside a handler join the handler's). The handler uses otel's global
// TracerProvider, MeterProvider and propagator and records nothing until
// an application installs them.
func DialOptions(cfg DialConfig) ([]grpc.DialOption, error) {
	tlsCfg, err := cfg.TLSConfig()
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	opts := []grpc.DialOption{
		grpc.WithTransportCredentials(creds), grpc.WithStatsHandler(otelgrpc.NewClientHandler()),
		// Calls the coordinator refused for overload (with a RetryInfo
		// delay) are repeated after the delay: they did nothing.
		grpc.WithChainUnaryInterceptor(retryRefusedUnary),
	}
	if cfg.APIKey != "" {
		opts = append(opts, grpc.WithPerRPCCredentials(APIKey(cfg.APIKey)))
	}
	return opts, nil
}

// Dial is grpc.NewClient(addr) with cfg's credentials and opts. Like
// grpc.NewClient it does not connect until the first call.
func Dial(addr string, cfg DialConfig, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	base, err := DialOptions(cfg)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(addr, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("leasehold: dial %s: %w", addr, err)
	}
	return conn, nil
}

// APIKey returns per-call credentials that send key as
// "authorization: Bearer <key>". They insist on transport security except
// towards a loopback address (127.0.0.0/8, ::1, localhost), where the
// coordinator's plaintext default lives: elsewhere a call without TLS
// fails before the key is sent.
func APIKey(key string) credentials.PerRPCCredentials {
	return apiKeyCredentials{header: "Bearer " + key}
}

type apiKeyCredentials struct{ header string }

// errKeyInClear: an API key would cross a network unencrypted.
var errKeyInClear = errors.New("leasehold: refusing to send an API key without TLS to a non-loopback address " +
	"(connect with TLS: DialConfig.CAFile or TLS, or LEASEHOLD_TLS_CA_FILE / --tls-ca-file)")

func (k apiKeyCredentials) GetRequestMetadata(ctx context.Context, uri ...string) (map[string]string, error) {
	ri, _ := credentials.RequestInfoFromContext(ctx)
	if ri.AuthInfo == nil || credentials.CheckSecurityLevel(ri.AuthInfo, credentials.PrivacyAndIntegrity) != nil {
		if len(uri) == 0 || !loopbackURI(uri[0]) {
			return nil, errKeyInClear
		}
	}
	return map[string]string{"authorization": k.header}, nil
}

// RequireTransportSecurity is false so that the plaintext loopback default
// works; GetRequestMetadata enforces security everywhere else.
func (apiKeyCredentials) RequireTransportSecurity() bool { return false }

// loopbackURI reports whether the audience URI gRPC passes (the dialled
// authority) names a loopback host.
func loopbackURI(uri string) bool {
	u, err := url.Parse(uri)
	if err != nil {
		return false
	}
	host := u.Hostname()
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
