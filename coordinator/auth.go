package coordinator

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
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
	"google.golang.org/grpc/status"

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
	// dir holds every valid principal (principal_directory.go).
	dir *principalDirectory
	// failures summarises refused authentications (auth_failures.go).
	failures *authFailures
	// consoleKey checks console proofs (console_proof.go): the console's
	// session key.
	consoleKey []byte
	// tls is the listener's TLS config: its client CAs verify the
	// certificates a console forwards (console_delegation.go).
	tls *tls.Config
	// touchMu guards touched: when this coordinator last recorded each
	// principal's use, so that LastUsedAt costs a write per principal per
	// PrincipalTouchInterval, not per call.
	touchMu sync.Mutex
	touched map[string]time.Time
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

// errStreamRevoked is how such a stream ends: its credential is no longer
// valid (UNAUTHENTICATED), not a call the client cancelled.
var errStreamRevoked = statusError(codes.Unauthenticated, ReasonUnauthenticated,
	"the API key or certificate of this stream was revoked")

// streamInterceptor is the stream auth interceptor: authenticateStream,
// then the handler on the authenticated context; a stream ended because
// its principal was revoked answers errStreamRevoked.
func (a *authenticator) streamInterceptor(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	ctx, err := a.authenticateStream(ss.Context())
	if err != nil {
		return err
	}
	err = h(srv, &contextStream{ServerStream: ss, ctx: ctx})
	if err != nil && errors.Is(context.Cause(ctx), errRevokedDuringStream) {
		return errStreamRevoked
	}
	return err
}

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
			cur, err = a.dir.byCertSubject(ctx, p.CertSubject)
		} else {
			cur, err = a.dir.byKeyHash(ctx, p.KeyHash)
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
	if perm == permConsole {
		cl, p, err = a.authorizeConsole(ctx)
		if status.Code(err) == codes.Unauthenticated {
			a.failures.record(ctx, failureReason(err))
			noteRefusal(ctx, refusalUnauthenticated, 0)
		}
		return cl, p, err
	}
	switch a.mode {
	case AuthAPIKey:
		p, err = a.fromAPIKey(ctx)
	case AuthMTLS:
		p, err = a.fromCertificateOrDelegation(ctx)
	default:
		cl = anonymous(a.tenant)
	}
	if err != nil {
		if status.Code(err) == codes.Unauthenticated {
			a.failures.record(ctx, failureReason(err))
			// Summarised by authFailures; the call's own line drops to
			// Debug.
			noteRefusal(ctx, refusalUnauthenticated, 0)
		}
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

// failureReason names a failed authentication in the summary.
func failureReason(err error) string {
	switch {
	case errors.Is(err, errNoCredentials):
		return "missing_credentials"
	case errors.Is(err, errBadKey):
		return "invalid_key"
	case errors.Is(err, errNoCert):
		return "missing_certificate"
	case errors.Is(err, errBadCert):
		return "invalid_certificate"
	case errors.Is(err, errBadDelegation):
		return "invalid_delegation"
	default:
		return "malformed_credentials"
	}
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
	p, err := a.dir.byKeyHash(ctx, hash)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadKey
	}
	if err != nil {
		return nil, toStatus(ctx, a.log, err)
	}
	a.touch(ctx, p)
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
	return a.principalOfCert(ctx, info.State.VerifiedChains[0][0])
}

// principalOfCert finds the valid principal of a verified certificate:
// its subject common name's.
func (a *authenticator) principalOfCert(ctx context.Context, cert *x509.Certificate) (*store.Principal, error) {
	cn := cert.Subject.CommonName
	if cn == "" {
		return nil, errBadCert
	}
	subject := store.CertSubjectFor(cn)
	p, err := a.dir.byCertSubject(ctx, subject)
	if errors.Is(err, store.ErrNotFound) {
		return nil, errBadCert
	}
	if err != nil {
		return nil, toStatus(ctx, a.log, err)
	}
	a.touch(ctx, p)
	if p.Revoked() {
		return nil, errBadCert
	}
	return p, nil
}

// touch records the principal's use (LastUsedAt) when the stored value
// is stale and this coordinator has not recorded it lately. Failing to
// record it does not fail the call.
func (a *authenticator) touch(ctx context.Context, p *store.Principal) {
	now := time.Now()
	if now.Sub(p.LastUsedAt) <= store.PrincipalTouchInterval {
		return
	}
	a.touchMu.Lock()
	if now.Sub(a.touched[p.ID]) <= store.PrincipalTouchInterval {
		a.touchMu.Unlock()
		return
	}
	if a.touched == nil || len(a.touched) >= principalsMax {
		a.touched = make(map[string]time.Time)
	}
	a.touched[p.ID] = now
	a.touchMu.Unlock()
	if err := a.store.TouchPrincipal(ctx, p.Tenant, p.ID, time.Time{}); err != nil {
		a.log.DebugContext(ctx, "recording a principal's last use", slog.String("error", err.Error()))
	}
}
