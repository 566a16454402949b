package console

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Sign-in limits: per client address, a burst of signInBurst attempts,
// then one every signInEvery; at most signInClients addresses are tracked
// (the table is cleared when full, which only forgives).
const (
	signInBurst   = 5
	signInEvery   = 6 * time.Second
	signInClients = 10000
	// apiKeyMaxLen bounds what a sign-in form may submit as a key.
	apiKeyMaxLen = 256
)

// signInLimiter rate-limits sign-in attempts per client address, and
// says when a refused attempt is to be recorded (at most one per address
// per refusedAuditEvery, with the count refused since).
type signInLimiter struct {
	mu      sync.Mutex
	clients map[string]*signInClient
}

// signInClient is one address's limiter and refusals not yet recorded.
type signInClient struct {
	lim       *rate.Limiter
	refused   int64
	auditedAt time.Time
}

func newSignInLimiter() *signInLimiter {
	return &signInLimiter{clients: map[string]*signInClient{}}
}

// allow reports whether the attempt may go on; when it may not, audit
// says whether to record it now, with refused attempts since the last.
func (l *signInLimiter) allow(r *http.Request) (ok, audit bool, refused int64) {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cl, found := l.clients[host]
	if !found {
		if len(l.clients) >= signInClients {
			clear(l.clients)
		}
		cl = &signInClient{lim: rate.NewLimiter(rate.Every(signInEvery), signInBurst)}
		l.clients[host] = cl
	}
	if cl.lim.Allow() {
		return true, false, 0
	}
	cl.refused++
	if now := time.Now(); now.Sub(cl.auditedAt) >= refusedAuditEvery {
		refused, cl.refused, cl.auditedAt = cl.refused, 0, now
		return false, true, refused
	}
	return false, false, 0
}

// keyAllowedHere reports whether the console may ask this request for an
// API key: only over TLS or from loopback, so a key never crosses a
// network in clear text.
func keyAllowedHere(r *http.Request) bool {
	return r.TLS != nil || loopbackClient(r)
}

// signInView is the sign-in page's data.
type signInView struct {
	Refused bool
	Error   string
	Ended   bool
}

// signInPage shows the form, with a pre-session whose id the form's CSRF
// token is bound to.
func (c *console) signInPage(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Auth != AuthAPIKey {
		c.redirect(w, r, "")
		return
	}
	c.showSignIn(w, r, http.StatusOK, signInView{Ended: r.URL.Query().Get("ended") != ""})
}

func (c *console) showSignIn(w http.ResponseWriter, r *http.Request, code int, v signInView) {
	if !keyAllowedHere(r) {
		code, v = http.StatusForbidden, signInView{Refused: true}
	}
	s, ok := c.readSession(r)
	if !ok || s.Key != "" {
		var err error
		if s, err = c.startSession(w, r, ""); err != nil {
			c.plainError(w, http.StatusInternalServerError, "cannot start a session")
			return
		}
	}
	c.renderTemplate(w, code, "signin.html", "layout", view{
		P: c.cfg.Prefix, Title: "Sign in", CSRF: c.sessions.csrfToken(s.ID), Can: caps{}, Data: v,
	})
}

// signIn checks the key through the API (GetVersion as that key) and, when
// it is valid, starts a new session holding it. Every attempt is
// rate-limited and logged with its outcome and the principal's identity.
func (c *console) signIn(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Auth != AuthAPIKey {
		c.redirect(w, r, "")
		return
	}
	if !keyAllowedHere(r) {
		c.plainError(w, http.StatusForbidden, "Refused: the console takes an API key only over HTTPS or from loopback.")
		return
	}
	pre, ok := c.readSession(r)
	if !ok || !c.csrfOK(w, r, pre) {
		if !ok {
			c.plainError(w, http.StatusForbidden, "Refused: no sign-in session; reload the sign-in page.")
		}
		return
	}
	remote := slog.String("remote", r.RemoteAddr)
	if ok, audit, refused := c.limiter.allow(r); !ok {
		c.log.WarnContext(r.Context(), "console sign-in refused: too many attempts", remote)
		if audit {
			c.auditSignIn(r, "", "rate_limited", refused)
		}
		c.showSignIn(w, r, http.StatusTooManyRequests, signInView{Error: "Too many sign-in attempts; wait a minute."})
		return
	}
	key := strings.TrimSpace(r.PostFormValue("api_key"))
	if key == "" || len(key) > apiKeyMaxLen {
		c.auditSignIn(r, "", "missing_key", 0)
		c.showSignIn(w, r, http.StatusBadRequest, signInView{Error: "Enter an API key."})
		return
	}
	ctx, cancel := context.WithTimeout(asPrincipal(r.Context(), key), callTimeout)
	defer cancel()
	who, err := c.api.whoami(ctx)
	if err != nil {
		c.log.WarnContext(r.Context(), "console sign-in failed", remote, slog.String("error", err.Error()))
		c.auditSignIn(r, "", refusalReason(err), 0)
		c.showSignIn(w, r, httpStatus(err), signInView{Error: "Sign-in failed: " + errorText(err)})
		return
	}
	if _, err := c.startSession(w, r, key); err != nil {
		c.plainError(w, http.StatusInternalServerError, "cannot start a session")
		return
	}
	c.auditSignIn(r, key, "", 0)
	c.log.InfoContext(r.Context(), "console sign-in", remote, slog.String("identity", who.GetIdentity()),
		slog.String("tenant", who.GetTenant()), slog.String("role", roleName(who.GetRole())))
	c.redirect(w, r, "")
}

// signOut ends the session (CSRF-checked, so no other site can sign a
// person out).
func (c *console) signOut(w http.ResponseWriter, r *http.Request) {
	s, ok := c.readSession(r)
	if ok && !c.csrfOK(w, r, s) {
		return
	}
	c.endSession(w, r)
	if c.cfg.Auth != AuthAPIKey {
		c.redirect(w, r, "")
		return
	}
	c.redirect(w, r, "signin")
}
