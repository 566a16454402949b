package console

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// The bulk forms AND the page's fields with its filter string, quoting
// the values they add, so the dry run and the operation see one filter.
func TestJoinFilter(t *testing.T) {
	for _, c := range []struct {
		queue, kind, state, filter, want string
	}{
		{"", "", "", "", ""},
		{"mailer", "", "", "", `queue = "mailer"`},
		{" mailer ", "send", "dead", `error_code = "SMTP_DOWN"`, `queue = "mailer" AND kind = "send" AND state = DEAD AND error_code = "SMTP_DOWN"`},
		{"", `a"b\c`, "", "", `kind = "a\"b\\c"`},
		{"", "", "sleeping", "  ", ""},
		{"", "", "", `metadata.batch = "7"`, `metadata.batch = "7"`},
	} {
		if got := joinFilter(c.queue, c.kind, c.state, c.filter); got != c.want {
			t.Errorf("joinFilter(%q, %q, %q, %q) = %q, want %q", c.queue, c.kind, c.state, c.filter, got, c.want)
		}
	}
}

// A bulk POST without the session's CSRF token is refused before any
// call, whatever its action.
func TestBulkWithoutCSRF(t *testing.T) {
	h := newTestConsole(t, AuthNone)
	for _, p := range []string{"/ui/bulk/preview", "/ui/bulk/start", "/ui/operations/cancel"} {
		form := url.Values{"action": {"replay"}, "filter": {`queue = "mailer"`}, "id": {"x"}}
		r := httptest.NewRequest(http.MethodPost, p, strings.NewReader(form.Encode()))
		r.RemoteAddr = "127.0.0.1:5000"
		r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if w := serve(h, r); w.Code != http.StatusForbidden || !strings.Contains(w.Body.String(), "CSRF") {
			t.Errorf("POST %s without a CSRF token = %d %q; want 403", p, w.Code, w.Body)
		}
	}
}
