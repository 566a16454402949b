package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// consoleProofHeader carries the proof that a call comes from a console
// (AdminService.RecordConsoleSignIn): "<unix seconds>:<hex HMAC-SHA256 of
// "leasehold console proof\n<unix seconds>" under the session key>".
const consoleProofHeader = "leasehold-console-proof"

// refusedAuditEvery is how often a client address's rate-limited
// sign-ins are recorded: at most one event per address per interval,
// with how many were refused since the last.
const refusedAuditEvery = time.Minute

// withConsoleProof returns ctx whose calls carry a fresh console proof.
func (c *console) withConsoleProof(ctx context.Context) context.Context {
	unix := strconv.FormatInt(time.Now().Unix(), 10)
	m := hmac.New(sha256.New, c.cfg.SessionKey)
	m.Write([]byte("leasehold console proof\n" + unix))
	return metadata.AppendToOutgoingContext(ctx, consoleProofHeader, unix+":"+hex.EncodeToString(m.Sum(nil)))
}

// auditSignIn records a sign-in attempt in the audit log through the
// API: with key (the signed-in one) when it succeeded, without when it was
// refused for reason. A failure to record is logged, not shown.
func (c *console) auditSignIn(r *http.Request, key, reason string, refused int64) {
	req := &leaseholdv1.RecordConsoleSignInRequest{RemoteAddress: r.RemoteAddr, Reason: reason, Refused: refused,
		Outcome: leaseholdv1.ConsoleSignInOutcome_CONSOLE_SIGN_IN_OUTCOME_REFUSED}
	if key != "" {
		req.Outcome = leaseholdv1.ConsoleSignInOutcome_CONSOLE_SIGN_IN_OUTCOME_SUCCEEDED
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), callTimeout)
	defer cancel()
	if _, err := c.api.admin.RecordConsoleSignIn(c.withConsoleProof(asPrincipal(ctx, key)), req); err != nil {
		c.log.ErrorContext(ctx, "console sign-in not recorded in the audit log", slog.String("remote", r.RemoteAddr),
			slog.String("error", err.Error()))
	}
}

// refusalReason names a failed sign-in's cause for the audit log.
func refusalReason(err error) string {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return "invalid_key"
	case codes.Unavailable, codes.DeadlineExceeded:
		return "unavailable"
	default:
		return "error_" + status.Code(err).String()
	}
}
