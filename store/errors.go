package store

import (
	"errors"
	"log/slog"
)

// Sentinel errors. Engines wrap them with context (use errors.Is); driver
// errors never escape an engine package unconverted.
var (
	// ErrNotFound is returned when a job (or queue row, effect key, ...) does
	// not exist for the tenant. Another tenant's row is reported the same way.
	ErrNotFound = errors.New("not found")
	// ErrLeaseLost is returned by a lease-bound call when the job is not
	// LEASED to that worker at that generation with an unexpired lease. The
	// worker must stop publishing for the job.
	ErrLeaseLost = errors.New("lease lost")
	// ErrIdempotencyConflict is returned when a request id was used before
	// with a request whose fingerprint differs.
	ErrIdempotencyConflict = errors.New("idempotency key reused with a different request")
	// ErrInvalid is returned for input that breaks a bound or rule (sizes,
	// names, NUL bytes, durations). Wrapped in an *InvalidError naming the
	// field.
	ErrInvalid = errors.New("invalid argument")
	// ErrAlreadyFinal is returned when a client asks to change a job that is
	// already terminal (e.g. cancel a succeeded job).
	ErrAlreadyFinal = errors.New("job is already final")
	// ErrNotDead is returned by dead-letter operations on a job that exists
	// but is not DEAD.
	ErrNotDead = errors.New("job is not dead")
	// ErrAbandoned is returned when replaying a dead job that was abandoned.
	ErrAbandoned = errors.New("dead job was abandoned")
	// ErrAlreadyReplayed is returned when abandoning a dead job that was
	// already replayed.
	ErrAlreadyReplayed = errors.New("dead job was already replayed")
	// ErrReportMismatch is returned when a lease repeats a terminal report
	// it already made (its answer was lost) but with another result or
	// error: the first report stands, and the second is refused rather
	// than silently ignored.
	ErrReportMismatch = errors.New("the lease already reported a different outcome")
	// ErrAlreadyExists is returned when creating a record that must be
	// unique and already exists: a valid principal with the same
	// certificate subject.
	ErrAlreadyExists = errors.New("already exists")
	// ErrBreakerNotFound is returned when a dependency has no breaker yet
	// (nothing reported on it and no operator acted on it). It matches
	// ErrNotFound.
	ErrBreakerNotFound = &notFound{what: "breaker"}
	// ErrEffectNotFound is returned when RecordEffect names an effect key
	// never reserved for the job. It matches ErrNotFound.
	ErrEffectNotFound = &notFound{what: "effect"}
	// ErrPrincipalNotFound is returned when RevokePrincipal names no
	// principal of the tenant. It matches ErrNotFound.
	ErrPrincipalNotFound = &notFound{what: "principal"}
	// ErrUnavailable is returned when the database cannot be reached or the
	// transaction could not be serialised after retries; the call may be
	// retried.
	ErrUnavailable = errors.New("store unavailable")
	// ErrUnreachable is the ErrUnavailable of a database that cannot be
	// reached at all (refused or dropped connections, a server shutting
	// down), as opposed to one that answered but could not serialise a
	// transaction. It matches ErrUnavailable and reads the same; loops
	// that retry log it at Debug, since the coordinator's readiness probe
	// reports the outage (once when it starts, in a summary while it lasts
	// and once when it ends).
	ErrUnreachable error = unreachable{}
)

// unreachable is ErrUnreachable: its message is ErrUnavailable's, and
// errors.Is matches both.
type unreachable struct{}

func (unreachable) Error() string        { return ErrUnavailable.Error() }
func (unreachable) Is(target error) bool { return target == ErrUnavailable }

// InvalidError says which field of a request is invalid and why. It matches
// ErrInvalid with errors.Is.
type InvalidError struct {
	Field  string // e.g. "spec.queue", "requests[3].spec.payload"
	Reason string // e.g. "must be 1-128 characters of [A-Za-z0-9._:-]"
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Reason }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError.
func Invalid(field, reason string) error { return &InvalidError{Field: field, Reason: reason} }

// notFound is a kind of ErrNotFound that says what was not found.
type notFound struct{ what string }

func (e *notFound) Error() string { return e.what + " not found" }

// Is makes errors.Is(err, ErrNotFound) true.
func (e *notFound) Is(target error) bool { return target == ErrNotFound }

// FailureLevel is the level at which a loop that retries logs a failed
// store call: Warn, but Debug for ErrUnreachable, which the coordinator's
// readiness probe reports instead (one line per outage rather than one per
// attempt of every loop).
func FailureLevel(err error) slog.Level {
	if errors.Is(err, ErrUnreachable) {
		return slog.LevelDebug
	}
	return slog.LevelWarn
}
