package console

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// formMaxBytes bounds a form's body: the largest is a sign-in or a new
// key's queue list.
const formMaxBytes = 64 << 10

// request is one authenticated request: the signed-in principal, its
// capabilities and a context whose API calls carry its credential.
type request struct {
	w    http.ResponseWriter
	r    *http.Request
	ctx  context.Context
	sess session
	who  *leaseholdv1.Principal
	can  caps
}

// handlerFunc serves a request; an API error it returns is shown as the
// error page with the matching HTTP status.
type handlerFunc func(*request) error

// routes is the console's mux behind the security headers.
func (c *console) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", c.static))
	mux.HandleFunc("GET /signin", c.signInPage)
	mux.HandleFunc("POST /signin", c.signIn)
	mux.HandleFunc("POST /signout", c.signOut)
	get := map[string]handlerFunc{
		"/{$}": c.overview, "/live/overview": c.overviewLive,
		"/jobs": c.jobs, "/jobs/{id}": c.job, "/dead": c.dead,
		"/queues": c.queues, "/queues/policy": c.policyPage, "/breakers": c.breakers, "/breakers/history": c.breakerHistory, "/workers": c.workersPage,
		"/schedules": c.schedulesPage, "/keys": c.keys, "/audit": c.audit,
		"/operations": c.operations, "/operations/{id}": c.operation, "/operations/{id}/live": c.operationLive,
	}
	for p, h := range get {
		mux.Handle("GET "+p, c.authed(h))
	}
	post := map[string]handlerFunc{
		"/jobs/cancel": c.cancelJob, "/dead/replay": c.replayDead, "/dead/abandon": c.abandonDead,
		"/queues/pause": c.pauseQueue, "/queues/resume": c.resumeQueue, "/queues/policy": c.updatePolicy,
		"/breakers/reset": c.resetBreaker, "/breakers/force-open": c.forceOpenBreaker,
		"/schedules/pause": c.pauseSchedule, "/schedules/resume": c.resumeSchedule,
		"/schedules/trigger": c.triggerSchedule,
		"/keys/create":       c.createKey, "/keys/revoke": c.revokeKey,
		"/bulk/preview": c.bulkPreview, "/bulk/start": c.bulkStart, "/operations/cancel": c.cancelOperation,
	}
	for p, h := range post {
		mux.Handle("POST "+p, c.authed(h))
	}
	prefix := strings.TrimSuffix(c.cfg.Prefix, "/")
	return c.headers(http.StripPrefix(prefix, mux))
}

// headers sets the security headers of every answer: a strict
// Content-Security-Policy (no inline script or style, nothing from another
// origin), framing as configured, and no caching of pages that show data.
func (c *console) headers(next http.Handler) http.Handler {
	csp := "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
		"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors " + c.cfg.FrameAncestors
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if c.cfg.FrameAncestors == FrameAncestorsDefault {
			h.Set("X-Frame-Options", "DENY")
		}
		if !strings.Contains(r.URL.Path, "/static/") {
			h.Set("Cache-Control", "no-store")
		}
		next.ServeHTTP(w, r)
	})
}

// authed wraps h: it finds the session (redirecting to sign-in without
// one), checks the CSRF token of every POST, and resolves the principal
// through the API, so a revoked key ends the session at its next request.
func (c *console) authed(h handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if c.cfg.Auth == AuthNone && !loopbackClient(r) {
			c.plainError(w, http.StatusForbidden, "With --auth none the console answers loopback clients only.")
			return
		}
		var chain []byte
		if c.cfg.Auth == AuthMTLS {
			if chain = clientChain(r); chain == nil {
				c.refuseWithoutCert(w, r)
				return
			}
		}
		s, ok := c.readSession(r)
		if c.cfg.Auth == AuthMTLS && s.Cert != certID(chain) {
			ok = false
		}
		if !ok || (c.cfg.Auth == AuthAPIKey && s.Key == "") {
			if c.cfg.Auth == AuthAPIKey {
				c.redirect(w, r, "signin")
				return
			}
			var err error
			if s, err = c.newSession(w, r, session{Cert: certID(chain)}); err != nil {
				c.plainError(w, http.StatusInternalServerError, "cannot start a session")
				return
			}
		}
		if r.Method == http.MethodPost && !c.csrfOK(w, r, s) {
			return
		}
		ctx, cancel := context.WithTimeout(c.asCaller(r.Context(), s, chain), callTimeout)
		defer cancel()
		who, err := c.api.whoami(ctx)
		if status.Code(err) == codes.Unauthenticated && c.cfg.Auth == AuthMTLS {
			c.refuseCert(w, r, err)
			return
		}
		if status.Code(err) == codes.Unauthenticated {
			c.endSession(w, r)
			c.redirect(w, r, "signin?ended=1")
			return
		}
		req := &request{w: w, r: r, ctx: ctx, sess: s, who: who, can: capsOf(who)}
		if err == nil {
			err = h(req)
		}
		if err != nil {
			c.fail(ctx, req, err)
		}
	})
}

// csrfOK checks a POST's token (form field csrf, or header X-CSRF-Token
// for htmx) against the session, answering 403 when it is missing or
// wrong.
func (c *console) csrfOK(w http.ResponseWriter, r *http.Request, s session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, formMaxBytes)
	token := r.Header.Get("X-Csrf-Token")
	if token == "" {
		token = r.PostFormValue("csrf")
	}
	if c.sessions.checkCSRF(s.ID, token) {
		return true
	}
	c.log.WarnContext(r.Context(), "console request refused: missing or invalid CSRF token",
		slog.String("path", r.URL.Path), slog.String("remote", r.RemoteAddr))
	c.plainError(w, http.StatusForbidden, "Refused: the form's CSRF token is missing or invalid. Reload the page and try again.")
	return false
}

// fail shows an API error.
func (c *console) fail(ctx context.Context, req *request, err error) {
	code := httpStatus(err)
	if code >= http.StatusInternalServerError {
		c.log.ErrorContext(ctx, "console page failed", slog.String("path", req.r.URL.Path), slog.String("error", err.Error()))
	}
	c.render(req, code, "error.html", "Error", "", map[string]string{"Error": errorText(err)})
}

// redirect sends the browser to path under the prefix (303, so a POST
// becomes a GET); for htmx requests it asks htmx to navigate.
func (c *console) redirect(w http.ResponseWriter, r *http.Request, path string) {
	to := c.cfg.Prefix + path
	if r.Header.Get("Hx-Request") == "true" {
		w.Header().Set("Hx-Redirect", to)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	http.Redirect(w, r, to, http.StatusSeeOther)
}

// done redirects to path after an action, with msg shown there.
func (c *console) done(req *request, path, msg string) error {
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	c.redirect(req.w, req.r, path+sep+"msg="+url.QueryEscape(msg))
	return nil
}

// plainError answers without a template: for refusals before a session.
func (c *console) plainError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write([]byte(msg + "\n"))
}

// view is what every page's template gets.
type view struct {
	P     string // the prefix
	Title string
	Nav   string
	Who   *leaseholdv1.Principal
	Can   caps
	CSRF  string
	// SignOut: there is a session to end (with AuthAPIKey only).
	SignOut bool
	// ByCert: the client certificate is the identity (AuthMTLS).
	ByCert bool
	Msg    string
	Data   any
}

// render executes page's template (its "layout", or only fragment when
// not empty) into a buffer first, so a template error never sends half a
// page.
func (c *console) render(req *request, code int, page, title, nav string, data any) {
	c.renderTemplate(req.w, code, page, "layout", view{
		P: c.cfg.Prefix, Title: title, Nav: nav, Who: req.who, Can: req.can,
		CSRF: c.sessions.csrfToken(req.sess.ID), SignOut: c.cfg.Auth == AuthAPIKey, ByCert: c.cfg.Auth == AuthMTLS, Msg: req.r.URL.Query().Get("msg"), Data: data,
	})
}

func (c *console) renderTemplate(w http.ResponseWriter, code int, page, name string, v view) {
	t, ok := c.pages[page]
	if !ok {
		c.plainError(w, http.StatusInternalServerError, "no template "+page)
		return
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		c.log.Error("console template failed", slog.String("page", page), slog.String("error", err.Error()))
		c.plainError(w, http.StatusInternalServerError, "the page could not be rendered")
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = buf.WriteTo(w)
}

// loopbackClient reports whether the request came from a loopback address.
func loopbackClient(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
