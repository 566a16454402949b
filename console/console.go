// Package console is Leasehold's web console: server-rendered pages over
// the public gRPC API, called as the signed-in principal. It never touches
// the store; it is one more client, so the coordinator decides what each
// principal may see and do, and a forged form is refused there as any
// other call would be.
//
// leasehold serve mounts it on its HTTP listener under /ui/. Others mount
// it in their own server with Handler:
//
//	h, err := console.Handler(console.Config{Conn: conn, Auth: console.AuthAPIKey, SessionKey: key, Prefix: "/ops/"})
//	mux.Handle("/ops/", h)
//
// Templates, the stylesheet and the vendored htmx are embedded: nothing is
// fetched at run time.
package console

import (
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
)

// Auth modes the console supports: the coordinator's --auth.
const (
	// AuthNone: every call is the coordinator's anonymous admin; the
	// console asks for nothing and answers only loopback clients.
	AuthNone = "none"
	// AuthAPIKey: a person signs in with an API key; the console calls the
	// API with it.
	AuthAPIKey = "api-key"
	// AuthMTLS: the browser's verified client certificate is the identity
	// (no sign-in); the console forwards it to the coordinator with a
	// proof made with SessionKey (docs/security.md).
	AuthMTLS = "mtls"
)

// Defaults of Config.
const (
	// PrefixDefault is where leasehold serve mounts the console.
	PrefixDefault = "/ui/"
	// SessionTTLDefault is how long a sign-in lasts.
	SessionTTLDefault = 8 * time.Hour
	// FrameAncestorsDefault forbids framing the console (CSP
	// frame-ancestors).
	FrameAncestorsDefault = "'none'"
	// callTimeout bounds every API call a page makes.
	callTimeout = 10 * time.Second
)

// SessionKeyLen is the length of Config.SessionKey.
const SessionKeyLen = 32

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures the console.
type Config struct {
	// Conn reaches the coordinator's gRPC API. The console adds the
	// signed-in principal's API key to each call; Conn itself carries no
	// credential of its own (TLS, when the listener needs it).
	Conn grpc.ClientConnInterface
	// Auth is the coordinator's auth mode: AuthNone, AuthAPIKey or
	// AuthMTLS. With AuthMTLS the server the console is mounted in must
	// verify client certificates (http.Request.TLS.VerifiedChains) against
	// the coordinator's client CAs, and SessionKey must be the
	// coordinator's ConsoleSessionKey.
	Auth string
	// SessionKey seals session cookies (AES-256-GCM) and signs CSRF
	// tokens. Every replica behind one address must use the same key:
	// leasehold serve derives it from the database's lease key
	// (coordinator.Coordinator.ConsoleSessionKey).
	SessionKey []byte
	// Prefix is the path the console is mounted under, with a leading and
	// trailing slash. Default PrefixDefault.
	Prefix string
	// FrameAncestors is the Content-Security-Policy frame-ancestors value,
	// e.g. "'self' https://ops.example.com". Default FrameAncestorsDefault.
	FrameAncestors string
	// SessionTTL is how long a sign-in lasts. Default SessionTTLDefault.
	SessionTTL time.Duration
	// Logger receives sign-in attempts and refused requests. Default: a
	// logger that discards.
	Logger *slog.Logger
}

// console serves the pages.
type console struct {
	cfg      Config
	api      api
	sessions sealer
	limiter  *signInLimiter
	pages    map[string]*template.Template
	log      *slog.Logger
	static   http.Handler
}

// Handler returns the console, to be mounted at cfg.Prefix.
func Handler(cfg Config) (http.Handler, error) {
	c, err := newConsole(cfg)
	if err != nil {
		return nil, err
	}
	return c.routes(), nil
}

func newConsole(cfg Config) (*console, error) {
	if cfg.Conn == nil {
		return nil, errors.New("console: Conn is required")
	}
	switch cfg.Auth {
	case AuthNone, AuthAPIKey, AuthMTLS:
	default:
		return nil, fmt.Errorf("console: auth %q is not supported (use %q, %q or %q)", cfg.Auth, AuthNone, AuthAPIKey, AuthMTLS)
	}
	if len(cfg.SessionKey) != SessionKeyLen {
		return nil, fmt.Errorf("console: SessionKey must be %d bytes, not %d", SessionKeyLen, len(cfg.SessionKey))
	}
	if cfg.Prefix == "" {
		cfg.Prefix = PrefixDefault
	}
	if !strings.HasPrefix(cfg.Prefix, "/") || !strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("console: prefix %q must start and end with /", cfg.Prefix)
	}
	if cfg.FrameAncestors == "" {
		cfg.FrameAncestors = FrameAncestorsDefault
	}
	if strings.ContainsAny(cfg.FrameAncestors, ";,\r\n") {
		return nil, fmt.Errorf("console: frame-ancestors %q must not contain ; , or line breaks", cfg.FrameAncestors)
	}
	if cfg.SessionTTL <= 0 {
		cfg.SessionTTL = SessionTTLDefault
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s, err := newSealer(cfg.SessionKey)
	if err != nil {
		return nil, err
	}
	pages, err := parsePages()
	if err != nil {
		return nil, err
	}
	sub, err := fs.Sub(staticFS, "static")
	if err != nil {
		return nil, err
	}
	return &console{
		cfg: cfg, api: newAPI(cfg.Conn), sessions: s, limiter: newSignInLimiter(),
		pages: pages, log: cfg.Logger, static: http.FileServerFS(sub),
	}, nil
}
