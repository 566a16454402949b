package certreload_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/certreload"
	"github.com/leasehold/leasehold/internal/testkit/testcert"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// serve accepts TLS connections with cfg until the test ends and completes
// each handshake.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	lis, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { lis.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	return lis.Addr().String()
}

// served returns the leaf certificate the server at addr presents.
func served(t *testing.T, addr string, ca *testcert.CA) *x509.Certificate {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool, ServerName: "localhost", NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0]
}

// wantServed fails unless the next handshake presents want (the files are
// checked at every handshake in these tests).
func wantServed(t *testing.T, addr string, ca *testcert.CA, want *x509.Certificate) {
	t.Helper()
	if got := served(t, addr, ca); got.SerialNumber.Cmp(want.SerialNumber) != 0 {
		t.Fatalf("serving serial %v, want %v", got.SerialNumber, want.SerialNumber)
	}
}

func TestRotationIsPickedUpWithoutRestart(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "rotate")
	first := ca.Server(t, "server")
	r, err := certreload.New(certreload.Config{CertFile: first.CertFile, KeyFile: first.KeyFile, CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.ServerConfig())
	if got := served(t, addr, ca); got.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("serving %v, want the first certificate %v", got.SerialNumber, first.Cert.SerialNumber)
	}

	// A renewal writes new files over the old ones.
	second := ca.Server(t, "server")
	wantServed(t, addr, ca, second.Cert)
}

func TestHalfWrittenRenewalKeepsTheWorkingCertificate(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "half")
	first := ca.Server(t, "server")
	r, err := certreload.New(certreload.Config{CertFile: first.CertFile, KeyFile: first.KeyFile, CheckInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.ServerConfig())

	// The new certificate lands before its key.
	next := ca.Server(t, "next")
	copyFile(t, next.CertFile, first.CertFile)
	if got := served(t, addr, ca); got.SerialNumber.Cmp(first.Cert.SerialNumber) != 0 {
		t.Fatalf("with a mismatched key on disk, serving %v; want the old certificate kept", got.SerialNumber)
	}
	copyFile(t, next.KeyFile, first.KeyFile)
	wantServed(t, addr, ca, next.Cert)
}

func TestChecksAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "interval")
	first := ca.Server(t, "server")
	var mu sync.Mutex
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r, err := certreload.New(certreload.Config{CertFile: first.CertFile, KeyFile: first.KeyFile, CheckInterval: time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	second := ca.Server(t, "server")
	if got := r.Certificate().Leaf; got != nil && got.SerialNumber.Cmp(second.Cert.SerialNumber) == 0 {
		t.Fatal("reloaded before the interval passed")
	}
	mu.Lock()
	now = now.Add(time.Minute)
	mu.Unlock()
	if got := r.Certificate().Leaf; got.SerialNumber.Cmp(second.Cert.SerialNumber) != 0 {
		t.Fatalf("after the interval, serving %v; want %v", got.SerialNumber, second.Cert.SerialNumber)
	}
}

func TestClientCAsAreVerified(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "clients")
	other := testcert.NewCA(t, "stranger")
	srv := ca.Server(t, "server")
	r, err := certreload.New(certreload.Config{
		CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile,
		ClientAuth: tls.RequireAndVerifyClientCert, CheckInterval: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, r.ServerConfig())
	handshake := func(client *testcert.Pair) error {
		cfg := ca.ClientTLS(t, client)
		cfg.ServerName, cfg.NextProtos = "localhost", []string{"h2"}
		c, err := tls.Dial("tcp", addr, cfg)
		if err != nil {
			return err
		}
		defer c.Close()
		// TLS 1.3: the server's verdict on the client certificate comes
		// with the first read.
		if err := c.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
			return err
		}
		_, err = c.Read(make([]byte, 1))
		if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		if err != nil && err.Error() == "EOF" {
			return nil
		}
		return err
	}
	good := ca.Client(t, "good", "worker-1")
	if err := handshake(&good); err != nil {
		t.Errorf("a client certificate of the CA: %v", err)
	}
	bad := other.Client(t, "bad", "worker-1")
	if err := handshake(&bad); err == nil {
		t.Error("a client certificate of another CA was accepted")
	}
	if err := handshake(nil); err == nil {
		t.Error("no client certificate was accepted")
	}
}

func TestNewFailsOnUnusableFiles(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "bad")
	p := ca.Server(t, "server")
	if _, err := certreload.New(certreload.Config{CertFile: p.CertFile}); err == nil {
		t.Error("no key file accepted")
	}
	if _, err := certreload.New(certreload.Config{CertFile: p.CertFile, KeyFile: p.CertFile}); err == nil {
		t.Error("a certificate as the key accepted")
	}
	if _, err := certreload.New(certreload.Config{CertFile: p.CertFile, KeyFile: p.KeyFile, ClientCAFile: p.KeyFile}); err == nil {
		t.Error("a key as the client CA bundle accepted")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}
