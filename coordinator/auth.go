package coordinator

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/leasehold/leasehold/store"
)

// AuthMode says how callers prove who they are.
type AuthMode string

// The auth modes.
const (
	// AuthNone: no credentials; every call runs as an admin of
	// Config.Tenant. The zero-setup default, for loopback.
	AuthNone AuthMode = "none"
	// AuthAPIKey: every call carries "authorization: Bearer <API key>".
	// Client certificates, when verified (Config.TLS), secure the
	// transport but do not identify the caller.
	AuthAPIKey AuthMode = "api-key"
	// AuthMTLS: the verified client certificate's subject common name
	// identifies the caller (a principal created with
	// certificate_common_name). Needs Config.TLS requiring client
	// certificates. API keys are not looked at.
	AuthMTLS AuthMode = "mtls"
)

// Errors of authentication. Unknown and revoked keys get the same
// answer, so a caller cannot tell which keys once existed.
var (
	errNoCredentials = statusError(codes.Unauthenticated, ReasonUnauthenticated,
		"missing credentials: send an API key as \"authorization: Bearer <key>\" (LEASEHOLD_API_KEY for the CLI and SDK)")
	errBadKey = statusError(codes.Unauthenticated, ReasonUnauthenticated,
		"invalid or revoked API key")
	errNoCert = statusError(codes.Unauthenticated, ReasonUnauthenticated,
		"a verified client certificate is required")
	errBadCert = statusError(codes.Unauthenticated, ReasonUnauthenticated,
		"no valid principal for this client certificate's subject")
)

// APIKeyPrefix starts every API key; a bearer token without it is refused
// without a lookup.
const APIKeyPrefix = "lh_"

// apiKeyLen is the length of a key made by NewAPIKey.
const apiKeyLen = len(APIKeyPrefix) + 43

// authenticator resolves the caller of each call and checks the method's
// permission (methodPermissions) against the caller's role.
type authenticator struct {
	mode   AuthMode
	tenant string // the anonymous caller's, with AuthNone
	store  store.Store
	log    *slog.Logger
	cache  *principalCache
	// revalidate is how often a stream re-checks its principal, so that
	// revoking a key also ends the streams it opened.
	revalidate time.Duration
}

// authenticate is the auth interceptors' AuthFunc for unary calls: it
// resolves the caller and checks the method's permission.
func (a *authenticator) authenticate(ctx context.Context) (context.Context, error) {
	cl, _, err := a.authorize(ctx)
	if err != nil {
		return nil, err
	}
	return withCaller(ctx, cl), nil
}

// authenticateStream is authenticate for streams. A stream outlives the
// check (Connect lives for hours), so while it runs its principal is
// re-checked every revalidate, and the stream is cancelled once the
// principal is revoked.
func (a *authenticator) authenticateStream(ctx context.Context) (context.Context, error) {
	cl, p, err := a.authorize(ctx)
	if err != nil {
		return nil, err
	}
	ctx = withCaller(ctx, cl)
	if p == nil {
		return ctx, nil
	}
	ctx, cancel := context.WithCancelCause(ctx)
	go a.watch(ctx, cancel, p)
	return ctx, nil
}

// errRevokedDuringStream is the cancel cause of a stream whose principal
// was revoked while it ran.
var errRevokedDuringStream = errors.New("the stream's principal was revoked")

// watch cancels ctx when the principal stops being valid. It returns when
// ctx ends (the stream ended).
func (a *authenticator) watch(ctx context.Context, cancel context.CancelCauseFunc, p *store.Principal) {
	t := time.NewTicker(a.revalidate)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		var (
			cur *store.Principal
			err error
		)
		if p.CertSubject != "" {
			cur, err = a.lookup(ctx, "c:"+p.CertSubject, func(ctx context.Context) (*store.Principal, error) {
				return a.store.PrincipalByCertSubject(ctx, p.CertSubject)
			})
		} else {
			cur, err = a.lookup(ctx, "k:"+string(p.KeyHash), func(ctx context.Context) (*store.Principal, error) {
				return a.store.PrincipalByKeyHash(ctx, p.KeyHash)
			})
		}
		switch {
		case errors.Is(err, store.ErrNotFound), err == nil && (cur.Revoked() || cur.ID != p.ID):
			a.log.InfoContext(ctx, "ending a stream: its principal was revoked", slog.String("principal", p.Identity()))
			cancel(errRevokedDuringStream)
			return
		case err != nil:
			// The store is briefly unreachable: keep the stream, try
			// again at the next tick.
			a.log.DebugContext(ctx, "re-checking a stream's principal", slog.String("error", err.Error()))
		}
	}
}

// authorize resolves the caller and checks that its role holds the
// method's permission. p is the principal (nil for the anonymous caller).
func (a *authenticator) authorize(ctx context.Context) (cl *caller, p *store.Principal, err error) {
	method, _ := grpc.Method(ctx)
	perm, ok := methodPermissions[method]
	if !ok {
		// Fail closed: a method nobody gave a permission is nobody's.
		return nil, nil, statusError(codes.PermissionDenied, ReasonPermissionDenied,
			fmt.Sprintf("%s has no permission defined", method))
	}
	switch a.mode {
	case AuthAPIKey:
		p, err = a.fromAPIKey(ctx)
	case AuthMTLS:
		p, err = a.fromCertificate(ctx)
	default:
		cl = anonymous(a.tenant)
	}
	if err != nil {
		return nil, nil, err
	}
	if p != nil {
		cl = callerFor(p)
	}
	if !allows(cl.role, perm) {
		return nil, nil, statusError(codes.PermissionDenied, ReasonPermissionDenied,
			fmt.Sprintf("the %s role may not call %s (it needs %s)", cl.role, method, perm))
	}
	return cl, p, nil
}

// fromAPIKey finds the valid principal of the call's bearer key.
func (a *authenticator) fromAPIKey(ctx context.Context) (*store.Principal, error) {
	key, err := bearer(ctx)
	if err != nil {
		return nil, err
	}
	if len(key) != apiKeyLen || !strings.HasPrefix(key, APIKeyPrefix) {
		return nil, errBadKey
	}
	hash := store.KeyHash(key)
	p, err := a.lookup(ctx, "k:"+string(hash), func(ctx context.Context) (*store.Principal, error) {
		return a.store.PrincipalByKeyHash(ctx, hash)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadKey
	}
	if err != nil {
		return nil, err
	}
	// The lookup found the row by this hash already; comparing again in
	// constant time costs nothing and keeps the check independent of how
	// the store (or the cache's map) matched it.
	if p.Revoked() || subtle.ConstantTimeCompare(p.KeyHash, hash) != 1 {
		return nil, errBadKey
	}
	return p, nil
}

// bearer returns the call's bearer token, from exactly one
// "authorization: Bearer <token>" header.
func bearer(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", errNoCredentials
	}
	if len(vals) > 1 {
		return "", statusError(codes.Unauthenticated, ReasonUnauthenticated, "send one authorization header, not several")
	}
	scheme, token, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") || strings.TrimSpace(token) == "" {
		return "", statusError(codes.Unauthenticated, ReasonUnauthenticated,
			"the authorization header must be \"Bearer <API key>\"")
	}
	return strings.TrimSpace(token), nil
}

// fromCertificate finds the valid principal of the call's verified client
// certificate.
func (a *authenticator) fromCertificate(ctx context.Context) (*store.Principal, error) {
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return nil, errNoCert
	}
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return nil, errNoCert
	}
	cn := info.State.VerifiedChains[0][0].Subject.CommonName
	if cn == "" {
		return nil, errBadCert
	}
	subject := store.CertSubjectFor(cn)
	p, err := a.lookup(ctx, "c:"+subject, func(ctx context.Context) (*store.Principal, error) {
		return a.store.PrincipalByCertSubject(ctx, subject)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadCert
	}
	if err != nil {
		return nil, err
	}
	if p.Revoked() {
		return nil, errBadCert
	}
	return p, nil
}

// lookup returns the cached principal for key, or loads it (and refreshes
// its last-used time). Store failures become statuses (UNAVAILABLE when
// the store is briefly unreachable); ErrNotFound is returned as is.
func (a *authenticator) lookup(ctx context.Context, key string, load func(context.Context) (*store.Principal, error)) (*store.Principal, error) {
	if p, ok := a.cache.get(key); ok {
		return p, nil
	}
	p, err := load(ctx)
	if errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err != nil {
		return nil, toStatus(ctx, a.log, err)
	}
	a.cache.put(key, p)
	if !p.Revoked() && time.Since(p.LastUsedAt) > store.PrincipalTouchInterval {
		// At most once per cache fill, and only when stale: a write per
		// principal per minute or so, not per call. Failing to record it
		// does not fail the call.
		if err := a.store.TouchPrincipal(ctx, p.Tenant, p.ID, time.Time{}); err != nil {
			a.log.DebugContext(ctx, "recording a principal's last use", slog.String("error", err.Error()))
		}
	}
	return p, nil
}

// principalCacheMax bounds the cache; when full it starts over (keys are
// few in practice; the bound only stops a flood of distinct valid keys
// from growing memory).
const principalCacheMax = 10_000

// principalCache remembers looked-up principals for a short TTL, so that
// authentication costs a map lookup instead of a query per call. The TTL
// bounds how long a revocation made through another coordinator goes
// unnoticed here; a revocation made here invalidates at once.
type principalCache struct {
	ttl time.Duration

	mu      sync.Mutex // guards entries
	entries map[string]cachedPrincipal
}

type cachedPrincipal struct {
	p     *store.Principal
	until time.Time
}

func newPrincipalCache(ttl time.Duration) *principalCache {
	return &principalCache{ttl: ttl, entries: make(map[string]cachedPrincipal)}
}

func (c *principalCache) get(key string) (*store.Principal, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || time.Now().After(e.until) {
		return nil, false
	}
	return e.p, true
}

func (c *principalCache) put(key string, p *store.Principal) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= principalCacheMax {
		clear(c.entries)
	}
	c.entries[key] = cachedPrincipal{p: p, until: time.Now().Add(c.ttl)}
}

// forget drops every entry of the principal id.
func (c *principalCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for k, e := range c.entries {
		if e.p.ID == id {
			delete(c.entries, k)
		}
	}
}
