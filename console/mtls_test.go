package console_test

// The console with --auth mtls, over real TLS with real certificates: Go's
// http.Client stands in for the browser, since headless chromium cannot
// be handed a client certificate without a platform certificate store.

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/console"
	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/certreload"
	"github.com/leasehold/leasehold/internal/testkit/testcert"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/store"
)

// mtlsConsole is a coordinator with --auth mtls, its console on an HTTPS
// server that verifies client certificates against the same CA, and the
// CA to issue browsers' certificates.
type mtlsConsole struct {
	t    *testing.T
	base string
	ca   *testcert.CA
	st   store.Store
	addr string
}

func newMTLSConsole(t *testing.T) *mtlsConsole {
	t.Helper()
	ca := testcert.NewCA(t, "clients")
	pair := ca.Server(t, "server")
	r, err := certreload.New(certreload.Config{
		CertFile: pair.CertFile, KeyFile: pair.KeyFile, ClientCAFile: ca.CertFile,
		ClientAuth: tls.RequireAndVerifyClientCert, LoopbackMayOmitCert: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := testserver.Start(t, testserver.Options{Postgres: true, Configure: func(cfg *coordinator.Config) {
		cfg.Auth, cfg.TLS = coordinator.AuthMTLS, r.ServerConfig()
	}})
	// The console's own connection presents no certificate: it dials over
	// loopback and forwards each browser's.
	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(t, nil))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h, err := console.Handler(console.Config{
		Conn: conn, Auth: console.AuthMTLS, SessionKey: srv.Coordinator.ConsoleSessionKey(), Prefix: "/ui/",
	})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/ui/", h)
	web := httptest.NewUnstartedServer(mux)
	cert, err := tls.LoadX509KeyPair(pair.CertFile, pair.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	web.TLS = &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
		ClientCAs: ca.Pool, ClientAuth: tls.VerifyClientCertIfGiven}
	web.StartTLS()
	t.Cleanup(web.Close)
	return &mtlsConsole{t: t, base: "https://" + web.Listener.Addr().String() + "/ui/", ca: ca, st: srv.Store, addr: srv.Addr}
}

// principal makes the principal of certificates with common name cn and
// issues such a certificate.
func (m *mtlsConsole) principal(cn string, role store.Role) *testcert.Pair {
	m.t.Helper()
	if _, err := m.st.CreatePrincipal(context.Background(), store.CreatePrincipalParams{
		Tenant: coordinator.TenantDefault, Name: cn, Role: role, CertSubject: store.CertSubjectFor(cn), Actor: "test",
	}); err != nil {
		m.t.Fatal(err)
	}
	p := m.ca.Client(m.t, cn, cn)
	return &p
}

// browser is an HTTPS client presenting cert (none when nil), with jar.
func (m *mtlsConsole) browser(cert *testcert.Pair, jar http.CookieJar) *http.Client {
	m.t.Helper()
	if jar == nil {
		var err error
		if jar, err = cookiejar.New(nil); err != nil {
			m.t.Fatal(err)
		}
	}
	return &http.Client{Jar: jar, Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: m.ca.ClientTLS(m.t, cert)}}
}

// do sends a request and returns the status and the body.
func do(t *testing.T, c *http.Client, method, u string, form url.Values) (int, string) {
	t.Helper()
	var (
		resp *http.Response
		err  error
	)
	if method == http.MethodPost {
		resp, err = c.PostForm(u, form)
	} else {
		resp, err = c.Get(u)
	}
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// csrfOf is the first CSRF token in page.
func csrfOf(t *testing.T, page string) string {
	t.Helper()
	const attr = `name="csrf" value="`
	i := strings.Index(page, attr)
	if i < 0 {
		t.Fatalf("no CSRF token in:\n%s", page)
	}
	token, _, _ := strings.Cut(page[i+len(attr):], `"`)
	return token
}

// TestConsoleMTLS: with --auth mtls the browser's certificate is the
// identity. An operator's certificate sees the pages with their actions
// and no sign-out, and its pause is done and audited as it; a reader's
// sees no action buttons and its forged POST (with a valid CSRF token) is
// refused by the coordinator; a POST without a token, or with another
// certificate's, is refused; a browser without a certificate gets a 403
// page and no sign-in form; a certificate of the right CA without a
// principal gets a 403 naming why; one of another CA is never accepted.
func TestConsoleMTLS(t *testing.T) {
	t.Parallel()
	m := newMTLSConsole(t)
	ops := m.principal("ops.acme", store.RoleOperator)
	reader := m.principal("reader.acme", store.RoleReader)
	admin := m.principal("admin.acme", store.RoleAdmin)

	// A job, so that the queue exists, created over a direct mTLS
	// connection.
	conn, err := grpc.NewClient(m.addr, grpc.WithTransportCredentials(credentials.NewTLS(m.ca.ClientTLS(t, admin))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := leaseholdv1.NewJobServiceClient(conn).CreateJob(ctx, &leaseholdv1.CreateJobRequest{
		Job: &leaseholdv1.JobSpec{Queue: "emails", Kind: "send"},
	}); err != nil {
		t.Fatal(err)
	}

	// No certificate: refused, with no sign-in form to fall back to.
	none := m.browser(nil, nil)
	for _, path := range []string{"", "queues", "signin"} {
		code, body := do(t, none, http.MethodGet, m.base+path, nil)
		if code != http.StatusForbidden || !strings.Contains(body, "client certificate") || strings.Contains(body, "api_key") {
			t.Errorf("GET /ui/%s without a certificate = %d\n%s", path, code, body)
		}
	}

	// The operator.
	opsB := m.browser(ops, nil)
	code, page := do(t, opsB, http.MethodGet, m.base+"queues", nil)
	if code != http.StatusOK || !strings.Contains(page, "ops.acme") || !strings.Contains(page, `action="/ui/queues/pause"`) {
		t.Fatalf("the operator's queues page = %d\n%s", code, page)
	}
	if strings.Contains(page, "Sign out") || !strings.Contains(page, "client certificate") {
		t.Errorf("the operator's page offers sign-out or does not say the certificate signs in:\n%s", page)
	}
	opsToken := csrfOf(t, page)
	if code, body := do(t, opsB, http.MethodPost, m.base+"queues/pause", url.Values{"queue": {"emails"}}); code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("the operator's POST without a CSRF token = %d\n%s", code, body)
	}
	code, body := do(t, opsB, http.MethodPost, m.base+"queues/pause", url.Values{"csrf": {opsToken}, "queue": {"emails"}})
	if code != http.StatusOK || !strings.Contains(body, "Paused emails.") {
		t.Fatalf("the operator pauses emails = %d\n%s", code, body)
	}
	admins := leaseholdv1.NewAdminServiceClient(conn)
	q, err := admins.GetQueue(ctx, &leaseholdv1.GetQueueRequest{Queue: "emails"})
	if err != nil || !q.GetQueue().GetPolicy().GetPaused() {
		t.Fatalf("emails after the console's pause: %v, %v", q.GetQueue(), err)
	}
	events, err := admins.ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var audited bool
	for _, ev := range events.GetEvents() {
		if ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_QUEUE_PAUSED && ev.GetTarget() == "emails" {
			audited = ev.GetActor() == "cert:CN=ops.acme"
		}
	}
	if !audited {
		t.Errorf("the console's pause is not audited as cert:CN=ops.acme: %v", events.GetEvents())
	}

	// The reader: no action, and a forged POST the coordinator refuses.
	readerJar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	readerB := m.browser(reader, readerJar)
	code, page = do(t, readerB, http.MethodGet, m.base+"queues", nil)
	if code != http.StatusOK || !strings.Contains(page, "reader.acme") || strings.Contains(page, `action="/ui/queues/`) {
		t.Fatalf("the reader's queues page = %d (want no action form)\n%s", code, page)
	}
	// The read-only policy form holds the reader's own valid token.
	code, policy := do(t, readerB, http.MethodGet, m.base+"queues/policy?queue=emails", nil)
	if code != http.StatusOK {
		t.Fatalf("the reader's policy page = %d\n%s", code, policy)
	}
	readerToken := csrfOf(t, policy)
	code, body = do(t, readerB, http.MethodPost, m.base+"queues/resume", url.Values{"csrf": {readerToken}, "queue": {"emails"}})
	if code != http.StatusForbidden || !strings.Contains(body, "PermissionDenied") {
		t.Errorf("the reader's forged resume = %d, want 403 from the coordinator\n%s", code, body)
	}
	// The reader's cookie with the operator's certificate is another
	// session: the reader's token is worth nothing there.
	code, body = do(t, m.browser(ops, readerJar), http.MethodPost, m.base+"queues/resume", url.Values{"csrf": {readerToken}, "queue": {"emails"}})
	if code != http.StatusForbidden || !strings.Contains(body, "CSRF") {
		t.Errorf("another certificate's session and token = %d\n%s", code, body)
	}

	// A certificate of the right CA whose subject has no principal.
	stranger := m.ca.Client(t, "stranger", "stranger.acme")
	code, body = do(t, m.browser(&stranger, nil), http.MethodGet, m.base, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "Unauthenticated") || strings.Contains(body, "api_key") {
		t.Errorf("a certificate without a principal = %d\n%s", code, body)
	}

	// A certificate of another CA: a client offers only certificates of
	// the CAs the server names, so it comes without one and is refused;
	// one that presents it anyway fails the handshake.
	other := testcert.NewCA(t, "elsewhere")
	foreign := other.Client(t, "foreign", "ops.acme")
	code, body = do(t, m.browser(&foreign, nil), http.MethodGet, m.base, nil)
	if code != http.StatusForbidden || !strings.Contains(body, "client certificate") {
		t.Errorf("a browser holding only a certificate of another CA = %d\n%s", code, body)
	}
	cfg := m.ca.ClientTLS(t, &foreign)
	forced := cfg.Certificates[0]
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &forced, nil }
	if resp, err := (&http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}).Get(m.base); err == nil {
		resp.Body.Close()
		t.Errorf("a certificate of another CA, presented anyway, reached the console: %s", resp.Status)
	}
}
