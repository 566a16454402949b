package main

import (
	"io"
	"net/http"
	"strings"
	"testing"

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
