package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// newTestConsole is a console whose API is unreachable: enough for what
// is decided before any call.
func newTestConsole(t *testing.T, auth string) http.Handler {
	t.Helper()
	conn, err := grpc.NewClient("127.0.0.1:1", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	h, err := Handler(Config{Conn: conn, Auth: auth, SessionKey: testKey(7)})
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// The console asks for an API key only over TLS or from loopback; with
// --auth none it answers loopback clients only.
func TestKeyOnlyOverTLSOrLoopback(t *testing.T) {
	h := newTestConsole(t, AuthAPIKey)
	remote := httptest.NewRequest(http.MethodGet, "/ui/signin", nil) // from 192.0.2.1
	if w := serve(h, remote); w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), `name="api_key"`) {
		t.Fatalf("sign-in page over plain HTTP from afar = %d; want 403 without a key field:\n%s", w.Code, w.Body)
	}
	local := httptest.NewRequest(http.MethodGet, "/ui/signin", nil)
	local.RemoteAddr = "127.0.0.1:5000"
	w := serve(h, local)
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `name="api_key"`) {
		t.Fatalf("sign-in page from loopback = %d", w.Code)
	}
	if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("CSP = %q", csp)
	}
	post := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader("api_key=lh_x"))
	post.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if w := serve(h, post); w.Code != http.StatusForbidden {
		t.Fatalf("a key posted over plain HTTP from afar = %d, want 403", w.Code)
	}
	none := newTestConsole(t, AuthNone)
	if w := serve(none, httptest.NewRequest(http.MethodGet, "/ui/", nil)); w.Code != http.StatusForbidden {
		t.Fatalf("--auth none from afar = %d, want 403", w.Code)
	}
}

// Sign-in attempts are limited per client address: a burst, then 429.
// A POST without the pre-session's CSRF token is refused before that.
func TestSignInRateLimited(t *testing.T) {
	h := newTestConsole(t, AuthAPIKey)
	page := httptest.NewRequest(http.MethodGet, "/ui/signin", nil)
	page.RemoteAddr = "127.0.0.1:5000"
	w := serve(h, page)
	cookies := w.Result().Cookies()
	body := w.Body.String()
	i := strings.Index(body, `name="csrf" value="`)
	if i < 0 || len(cookies) != 1 {
		t.Fatalf("no CSRF token or cookie on the sign-in page")
	}
	token, _, _ := strings.Cut(body[i+len(`name="csrf" value="`):], `"`)
	attempt := func(form url.Values) int {
		r := httptest.NewRequest(http.MethodPost, "/ui/signin", strings.NewReader(form.Encode()))
		r.RemoteAddr = "127.0.0.1:5001"
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		r.AddCookie(cookies[0])
		return serve(h, r).Code
	}
	if code := attempt(url.Values{"api_key": {"lh_guess"}}); code != http.StatusForbidden {
		t.Fatalf("sign-in without a CSRF token = %d, want 403", code)
	}
	for n := 1; n <= signInBurst; n++ {
		if code := attempt(url.Values{"api_key": {"lh_guess"}, "csrf": {token}}); code == http.StatusTooManyRequests {
			t.Fatalf("attempt %d was limited; the burst is %d", n, signInBurst)
		}
	}
	if code := attempt(url.Values{"api_key": {"lh_guess"}, "csrf": {token}}); code != http.StatusTooManyRequests {
		t.Fatalf("attempt %d = %d, want 429", signInBurst+1, code)
	}
}
