package coordinator

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// ConsoleProofHeader is the metadata a web console proves itself with
// (AdminService.RecordConsoleSignIn): "<unix seconds>:<hex HMAC-SHA256 of
// ConsoleProofMessage(unix seconds) under ConsoleSessionKey>".
const ConsoleProofHeader = "leasehold-console-proof"

// consoleProofSkew is how far a proof's time may be from the
// coordinator's clock.
const consoleProofSkew = time.Minute

// consoleIdentity is the actor of what a console records without a key.
const consoleIdentity = "console"

// Bounds of RecordConsoleSignInRequest.
const (
	consoleRemoteMaxLen = 256
	consoleReasonMaxLen = 64
)

// ConsoleProofMessage is what a console proof signs.
func ConsoleProofMessage(unix int64) string {
	return "leasehold console proof\n" + strconv.FormatInt(unix, 10)
}

var errBadConsoleProof = statusError(codes.Unauthenticated, ReasonUnauthenticated,
	"this method is for the web console: send a valid "+ConsoleProofHeader+" header")

// consoleProofOK checks the call's console proof against key at now.
func consoleProofOK(ctx context.Context, key []byte, now time.Time) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(ConsoleProofHeader)
	if len(vals) != 1 {
		return false
	}
	return proofOK(vals[0], key, now, ConsoleProofMessage)
}

// proofOK checks proof ("<unix>:<hex HMAC-SHA256 of message(unix)>")
// under key: the time within consoleProofSkew of now, the HMAC equal.
func proofOK(proof string, key []byte, now time.Time, message func(unix int64) string) bool {
	at, sum, ok := strings.Cut(proof, ":")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return false
	}
	if d := now.Sub(time.Unix(unix, 0)); d > consoleProofSkew || d < -consoleProofSkew {
		return false
	}
	got, err := hex.DecodeString(sum)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte(message(unix)))
	return hmac.Equal(got, m.Sum(nil))
}

// authorizeConsole resolves the caller of a permConsole method: the
// proof is required; with --auth api-key and a key sent too, the key's
// principal is the caller, otherwise the console itself (in the
// coordinator's tenant).
func (a *authenticator) authorizeConsole(ctx context.Context) (*caller, *store.Principal, error) {
	if !consoleProofOK(ctx, a.consoleKey, time.Now()) {
		return nil, nil, errBadConsoleProof
	}
	if md, _ := metadata.FromIncomingContext(ctx); a.mode == AuthAPIKey && len(md.Get("authorization")) > 0 {
		p, err := a.fromAPIKey(ctx)
		if err != nil {
			return nil, nil, err
		}
		return callerFor(p), p, nil
	}
	return &caller{tenant: a.tenant, identity: consoleIdentity, name: consoleIdentity}, nil, nil
}

func (a *adminService) RecordConsoleSignIn(ctx context.Context, req *leaseholdv1.RecordConsoleSignInRequest) (*leaseholdv1.RecordConsoleSignInResponse, error) {
	c := a.c
	remote, reason := req.GetRemoteAddress(), req.GetReason()
	switch {
	case len(remote) > consoleRemoteMaxLen:
		return nil, invalidArgument("remote_address", "must be at most 256 bytes")
	case len(reason) > consoleReasonMaxLen || strings.ContainsFunc(reason, func(r rune) bool { return r < 0x20 || r > 0x7e }):
		return nil, invalidArgument("reason", "must be at most 64 printable ASCII bytes")
	case req.GetRefused() < 0:
		return nil, invalidArgument("refused", "must not be negative")
	}
	cl := callerFrom(ctx)
	switch req.GetOutcome() {
	case leaseholdv1.ConsoleSignInOutcome_CONSOLE_SIGN_IN_OUTCOME_SUCCEEDED:
		if cl.id == "" {
			return nil, invalidArgument("outcome", "a succeeded sign-in is recorded with the signed-in key as the credential")
		}
		c.audit(ctx, store.AuditConsoleSignIn, cl.id, map[string]any{"remote_address": remote})
	case leaseholdv1.ConsoleSignInOutcome_CONSOLE_SIGN_IN_OUTCOME_REFUSED:
		if reason == "" {
			return nil, invalidArgument("reason", "a refused sign-in needs a reason")
		}
		data := map[string]any{"remote_address": remote, "reason": reason}
		if req.GetRefused() > 0 {
			data["refused"] = req.GetRefused()
		}
		c.audit(ctx, store.AuditConsoleSignInRefused, consoleIdentity, data)
	default:
		return nil, invalidArgument("outcome", "must be CONSOLE_SIGN_IN_OUTCOME_SUCCEEDED or CONSOLE_SIGN_IN_OUTCOME_REFUSED")
	}
	return &leaseholdv1.RecordConsoleSignInResponse{}, nil
}
