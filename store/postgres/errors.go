package postgres

import (
	"errors"
	"fmt"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
)

// PostgreSQL error codes the engine reacts to.
const (
	codeUniqueViolation          = "23505"
	codeSerializationFailure     = "40001"
	codeDeadlockDetected         = "40P01"
	codeCharacterNotInRepertoire = "22021"
	codeUntranslatableCharacter  = "22P05"
	codeQueryCanceled            = "57014"
	codeAdminShutdown            = "57P01"
	codeCrashShutdown            = "57P02"
	codeCannotConnectNow         = "57P03"
)

// idempotencyKeyConstraint is the primary key of idempotency_keys; a unique
// violation on it means a concurrent create won the key, and the
// transaction is retried to replay that create.
const idempotencyKeyConstraint = "idempotency_keys_pkey"

// engineError is an error the engine composed itself (no driver text in it),
// returned to the caller as is.
type engineError struct{ msg string }

func (e *engineError) Error() string { return e.msg }

func engineErrorf(format string, args ...any) error {
	return &engineError{msg: fmt.Sprintf(format, args...)}
}

// retryable reports whether a transaction failed only because it lost a race
// with another one, so that running it again can succeed.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case codeSerializationFailure, codeDeadlockDetected:
		return true
	case codeUniqueViolation:
		return pgErr.ConstraintName == idempotencyKeyConstraint
	}
	return false
}

// interpretError converts a driver error into the store's vocabulary. It is
// the only place driver errors are translated: pgx.ErrNoRows never leaves
// the package, connection failures and lost races become ErrUnavailable,
// and no SQL text (or URL) reaches the returned message.
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if isDomainError(err) {
		var he *hookError
		if errors.As(err, &he) {
			return fmt.Errorf("%s aborted before commit: %w", he.op, he.err)
		}
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ErrNotFound
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == codeSerializationFailure || pgErr.Code == codeDeadlockDetected:
			return fmt.Errorf("%w: transaction kept conflicting with concurrent ones (SQLSTATE %s); retry the call", store.ErrUnavailable, pgErr.Code)
		case pgErr.Code == codeCharacterNotInRepertoire || pgErr.Code == codeUntranslatableCharacter:
			// Validation rejects NUL bytes and invalid UTF-8 before any
			// SQL runs; this is the backstop.
			return store.Invalid("text", "must be valid UTF-8 without NUL bytes")
		case pgErr.Code == codeQueryCanceled:
			return fmt.Errorf("%w: query cancelled by the server (SQLSTATE %s)", store.ErrUnavailable, pgErr.Code)
		case pgErr.Code == codeAdminShutdown || pgErr.Code == codeCrashShutdown || pgErr.Code == codeCannotConnectNow,
			strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "53"):
			return fmt.Errorf("%w: database is not accepting work (SQLSTATE %s); retry the call", store.ErrUnreachable, pgErr.Code)
		case pgErr.Code == codeUniqueViolation:
			return fmt.Errorf("row already exists (constraint %s, SQLSTATE %s)", pgErr.ConstraintName, pgErr.Code)
		}
		// The message of other errors can quote SQL; the code and the
		// constraint are enough for the caller, the log has the rest.
		return fmt.Errorf("database error (SQLSTATE %s)", pgErr.Code)
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &connErr):
		return fmt.Errorf("%w: cannot connect to PostgreSQL; check that it is running and reachable", store.ErrUnreachable)
	case errors.As(err, &netErr), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		pgconn.SafeToRetry(err), pgconn.Timeout(err), strings.Contains(err.Error(), "closed pool"),
		strings.Contains(err.Error(), "conn closed"):
		return fmt.Errorf("%w: connection to PostgreSQL failed; retry the call", store.ErrUnreachable)
	}
	return fmt.Errorf("database error: %s", redact(err.Error()))
}

// redact keeps the first line of an unknown driver error, which names the
// failure without quoting statements.
func redact(msg string) string {
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		msg = msg[:i]
	}
	if len(msg) > 200 {
		msg = msg[:200]
	}
	return msg
}
