// Package certreload serves TLS from certificate files that are replaced
// while the process runs, as cert-manager (or any renewal job) does: each
// handshake uses the files' current contents, re-read when their
// modification time, size or inode changes, checked at most once per
// CheckInterval. A replacement that cannot be loaded (say the certificate
// was written and the key not yet) leaves the previous certificate in use
// and is retried at the next check.
package certreload

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// CheckIntervalDefault is how often, at most, the files are looked at.
const CheckIntervalDefault = time.Second

// Config names the files.
type Config struct {
	// CertFile and KeyFile are the server's PEM certificate (chain) and
	// private key. Required.
	CertFile, KeyFile string
	// ClientCAFile, when set, is a PEM bundle of the CAs whose client
	// certificates are verified. Empty: client certificates are not
	// asked for.
	ClientCAFile string
	// ClientAuth is the policy when ClientCAFile is set: typically
	// tls.VerifyClientCertIfGiven or tls.RequireAndVerifyClientCert.
	ClientAuth tls.ClientAuthType
	// LoopbackMayOmitCert: with ClientAuth RequireAndVerifyClientCert, a
	// connection from a loopback address may come without a client
	// certificate (one it presents is still verified). For a process's
	// own clients on the same host that prove themselves otherwise (the
	// web console's delegation under --auth mtls).
	LoopbackMayOmitCert bool
	// CheckInterval bounds how often the files are stat'ed. Zero means
	// CheckIntervalDefault; negative means at every handshake (tests).
	CheckInterval time.Duration
	// Logger receives reload notices and failures. Nil discards them.
	Logger *slog.Logger
	// Now is the clock of CheckInterval. Nil: time.Now.
	Now func() time.Time
}

// stamp identifies one version of a file: its modification time and size,
// and where the system has one its inode, which tells apart two versions
// written within the file system's timestamp granularity when the new one
// was renamed into place (as renewals and Kubernetes secret volumes do).
type stamp struct {
	mod  time.Time
	size int64
	ino  uint64
}

func stampOf(path string) (stamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return stamp{}, err
	}
	return stamp{mod: fi.ModTime(), size: fi.Size(), ino: inode(fi)}, nil
}

// Reloader holds the current certificate and client CA pool.
type Reloader struct {
	cfg Config
	log *slog.Logger

	mu        sync.Mutex // guards everything below
	lastCheck time.Time
	cert      *tls.Certificate
	pool      *x509.CertPool
	// loaded are the stamps of the files behind cert and pool; failed
	// the stamps of the last version that failed to load (logged once).
	loaded, failed [3]stamp
}

// New loads the files once; it fails when they cannot be loaded.
func New(cfg Config) (*Reloader, error) {
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("a TLS certificate file and key file are both required")
	}
	if cfg.CheckInterval == 0 {
		cfg.CheckInterval = CheckIntervalDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reloader{cfg: cfg, log: cfg.Logger}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	stamps, err := r.stamps()
	if err != nil {
		return nil, err
	}
	if err := r.load(stamps); err != nil {
		return nil, err
	}
	r.lastCheck = cfg.Now()
	return r, nil
}

// ServerConfig returns the tls.Config to serve with: every handshake gets
// the current certificate and client CAs. TLS 1.2 at least.
func (r *Reloader) ServerConfig() *tls.Config {
	base := r.config()
	base.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
		r.maybeReload()
		c := r.config()
		if r.cfg.LoopbackMayOmitCert && c.ClientAuth == tls.RequireAndVerifyClientCert && h != nil && h.Conn != nil && loopback(h.Conn.RemoteAddr()) {
			c.ClientAuth = tls.VerifyClientCertIfGiven
		}
		return c, nil
	}
	return base
}

// config is a fresh config with the current certificate and pool.
func (r *Reloader) config() *tls.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{*r.cert},
		// gRPC needs HTTP/2 negotiated by ALPN; the config returned per
		// handshake replaces the one grpc's credentials added "h2" to.
		NextProtos: []string{"h2"},
	}
	if r.pool != nil {
		c.ClientCAs, c.ClientAuth = r.pool, r.cfg.ClientAuth
	}
	return c
}

// Certificate returns the certificate in use (tests, diagnostics).
func (r *Reloader) Certificate() *tls.Certificate {
	r.maybeReload()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cert
}

func (r *Reloader) files() [3]string {
	return [3]string{r.cfg.CertFile, r.cfg.KeyFile, r.cfg.ClientCAFile}
}

func (r *Reloader) stamps() ([3]stamp, error) {
	var out [3]stamp
	for i, f := range r.files() {
		if f == "" {
			continue
		}
		s, err := stampOf(f)
		if err != nil {
			return out, fmt.Errorf("TLS file: %w", err)
		}
		out[i] = s
	}
	return out, nil
}

// maybeReload reloads the files when CheckInterval has passed and they
// changed.
func (r *Reloader) maybeReload() {
	now := r.cfg.Now()
	r.mu.Lock()
	if r.cfg.CheckInterval > 0 && now.Sub(r.lastCheck) < r.cfg.CheckInterval {
		r.mu.Unlock()
		return
	}
	r.lastCheck = now
	loaded, failed := r.loaded, r.failed
	r.mu.Unlock()

	stamps, err := r.stamps()
	if err != nil {
		if stamps != failed {
			r.log.Warn("TLS files unreadable; keeping the current certificate", slog.String("error", err.Error()))
			r.setFailed(stamps)
		}
		return
	}
	if stamps == loaded || stamps == failed {
		return
	}
	if err := r.load(stamps); err != nil {
		r.log.Warn("TLS files changed but cannot be loaded; keeping the current certificate until they can",
			slog.String("error", err.Error()))
		r.setFailed(stamps)
		return
	}
	r.log.Info("TLS certificate reloaded", slog.String("cert_file", r.cfg.CertFile))
}

func (r *Reloader) setFailed(s [3]stamp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = s
}

// load reads the files and, when they are valid, makes them current.
func (r *Reloader) load(stamps [3]stamp) error {
	cert, err := tls.LoadX509KeyPair(r.cfg.CertFile, r.cfg.KeyFile)
	if err != nil {
		return fmt.Errorf("load TLS certificate %s and key %s: %w", r.cfg.CertFile, r.cfg.KeyFile, err)
	}
	var pool *x509.CertPool
	if r.cfg.ClientCAFile != "" {
		pem, err := os.ReadFile(r.cfg.ClientCAFile)
		if err != nil {
			return fmt.Errorf("read client CA file: %w", err)
		}
		pool = x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("client CA file %s holds no PEM certificate", r.cfg.ClientCAFile)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cert, r.pool, r.loaded = &cert, pool, stamps
	return nil
}

// loopback reports whether addr is a TCP peer on a loopback address.
func loopback(addr net.Addr) bool {
	a, ok := addr.(*net.TCPAddr)
	return ok && a.IP.IsLoopback()
}
