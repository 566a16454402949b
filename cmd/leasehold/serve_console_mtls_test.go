package main

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/internal/testkit/testcert"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestServeConsoleMTLS runs the real binary with --auth mtls and
// --http-tls: a browser presenting an admin's client certificate sees the
// overview as that principal (the console reached the coordinator over
// loopback without a certificate of its own and forwarded the browser's);
// one without a certificate gets 403 and no sign-in form, while /metrics
// still answers it.
func TestServeConsoleMTLS(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "clients")
	pair := ca.Server(t, "server")
	admin := ca.Client(t, "admin", "admin.acme")
	db := filepath.Join(t.TempDir(), "leasehold.db")
	if out, err := exec.Command(testserver.Binary(t), "key", "create", "--sqlite-path", db, "--role", "admin",
		"--cert-cn", "admin.acme", "--name", "admin").CombinedOutput(); err != nil {
		t.Fatalf("key create: %v\n%s", err, out)
	}
	p := testserver.StartProcessDial(t, []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(t, &admin)))}, nil,
		"--sqlite-path", db, "--auth", "mtls", "--tls-cert-file", pair.CertFile, "--tls-key-file", pair.KeyFile,
		"--tls-client-ca-file", ca.CertFile, "--http-tls")
	if p.HTTPAddr == "" {
		t.Fatalf("no HTTP address in the log:\n%s", p.Output())
	}
	base := "https://" + p.HTTPAddr + "/ui/"
	get := func(client *testcert.Pair, u string) (int, string) {
		t.Helper()
		c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(t, client)}}
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get(&admin, base); code != http.StatusOK || !strings.Contains(body, "<h1>Overview</h1>") || !strings.Contains(body, "admin") {
		t.Fatalf("the overview with the admin's certificate = %d\n%s\n%s", code, body, p.Output())
	}
	if code, body := get(nil, base); code != http.StatusForbidden || !strings.Contains(body, "client certificate") || strings.Contains(body, "api_key") {
		t.Errorf("the console without a certificate = %d\n%s", code, body)
	}
	if code, _ := get(nil, "https://"+p.HTTPAddr+"/metrics"); code != http.StatusOK {
		t.Errorf("/metrics without a certificate = %d", code)
	}
	if strings.Contains(p.Output(), "the web console is off") {
		t.Errorf("serve turned the console off:\n%s", p.Output())
	}
}
