package main

import (
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/internal/testkit/testcert"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// get fetches url, returning the status, the headers and the body.
func get(t *testing.T, url string) (int, http.Header, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(body)
}

// TestServeMountsConsole runs the real binary with --console-prefix and
// --console-frame-ancestors: the console answers under the prefix on the
// HTTP port (with --auth none on loopback, no sign-in), with its CSP, and
// not under the default /ui/.
func TestServeMountsConsole(t *testing.T) {
	t.Parallel()
	p := testserver.StartProcess(t, "--console-prefix", "/ops/console/", "--console-frame-ancestors", "'self'")
	if p.HTTPAddr == "" {
		t.Fatalf("no HTTP address in the log:\n%s", p.Output())
	}
	code, h, body := get(t, "http://"+p.HTTPAddr+"/ops/console/")
	if code != http.StatusOK || !strings.Contains(body, "<h1>Overview</h1>") || !strings.Contains(body, `href="/ops/console/static/console.css"`) {
		t.Fatalf("GET /ops/console/ = %d\n%s", code, body)
	}
	if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'self'") || !strings.Contains(csp, "script-src 'self'") {
		t.Errorf("Content-Security-Policy = %q", csp)
	}
	if code, _, body := get(t, "http://"+p.HTTPAddr+"/ops/console/static/htmx.min.js"); code != http.StatusOK || !strings.Contains(body, "htmx") {
		t.Errorf("the embedded htmx: %d", code)
	}
	if code, _, _ := get(t, "http://"+p.HTTPAddr+"/ui/"); code != http.StatusNotFound {
		t.Errorf("GET /ui/ with another prefix = %d, want 404", code)
	}
	if code, _, _ := get(t, "http://"+p.HTTPAddr+"/metrics"); code != http.StatusOK {
		t.Errorf("GET /metrics beside the console = %d", code)
	}
}

// TestServeConsoleOverTLS runs the real binary with --auth api-key, TLS on
// gRPC and --http-tls: the console answers over HTTPS with a Secure
// session cookie, signs an admin in, and reaches the coordinator's own
// TLS listener for the overview.
func TestServeConsoleOverTLS(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "console-ca")
	pair := ca.Server(t, "server")
	db := filepath.Join(t.TempDir(), "leasehold.db")
	out, err := exec.Command(testserver.Binary(t), "key", "create", "--sqlite-path", db, "--role", "admin", "--name", "ops").CombinedOutput()
	if err != nil {
		t.Fatalf("key create: %v\n%s", err, out)
	}
	_, rest, _ := strings.Cut(string(out), "Key:")
	key := strings.Fields(rest)[0]
	p := testserver.StartProcessDial(t, []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(t, nil)))}, nil,
		"--sqlite-path", db, "--auth", "api-key", "--tls-cert-file", pair.CertFile, "--tls-key-file", pair.KeyFile, "--http-tls")
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Jar: jar, Transport: &http.Transport{TLSClientConfig: ca.ClientTLS(t, nil)}}
	base := "https://" + p.HTTPAddr + "/ui/"
	resp, err := client.Get(base + "signin")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.TLS == nil || resp.StatusCode != http.StatusOK || len(resp.Cookies()) != 1 || !resp.Cookies()[0].Secure || !resp.Cookies()[0].HttpOnly {
		t.Fatalf("sign-in page over TLS: %s, cookies %v", resp.Status, resp.Cookies())
	}
	i := strings.Index(string(page), `name="csrf" value="`)
	if i < 0 {
		t.Fatalf("no CSRF token:\n%s", page)
	}
	token, _, _ := strings.Cut(string(page)[i+len(`name="csrf" value="`):], `"`)
	resp, err = client.PostForm(base+"signin", url.Values{"csrf": {token}, "api_key": {key}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "<h1>Overview</h1>") || !strings.Contains(string(body), "ops") {
		t.Fatalf("after sign-in: %s\n%s", resp.Status, body)
	}
}
