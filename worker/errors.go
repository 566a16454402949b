package worker

import (
	"errors"
	"fmt"
	"time"
)

// Causes of a handler context's cancellation (read them with
// context.Cause), also returned by Job methods once publishing is over.
var (
	// ErrLeaseLost means the worker no longer holds the job's lease: it
	// expired (heartbeats did not get through in time), was taken over, or
	// the job was finished elsewhere. Nothing more is published for the job;
	// whatever the handler returns is dropped.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrCancelRequested means a client asked to cancel the job. The handler
	// should stop; when it returns an error the worker acknowledges the
	// cancellation and the job becomes CANCELLED.
	ErrCancelRequested = errors.New("worker: job cancel requested")
	// ErrShutdown means the worker is shutting down and ShutdownGrace has
	// passed. The job's lease is released (given back without spending the
	// attempt), so the handler's outcome is dropped.
	ErrShutdown = errors.New("worker: shutting down")
	// ErrEffectUnknown is wrapped by an effect call's error when the
	// outcome of the external call cannot be known (e.g. a timeout after the
	// request was sent). The effect is recorded UNKNOWN, and later attempts
	// get an *UnknownEffectError for it until it is reconciled.
	ErrEffectUnknown = errors.New("worker: effect outcome unknown")
)

// UnknownEffectError is returned by Job.Effect when an earlier attempt
// reserved the effect but never recorded a definite outcome (it crashed or
// lost its lease mid-call), or recorded it UNKNOWN. The external call may or
// may not have happened: reconcile with the provider (Effect.
// ProviderOperationID helps) instead of calling again.
type UnknownEffectError struct {
	Effect Effect
}

func (e *UnknownEffectError) Error() string {
	msg := fmt.Sprintf("worker: effect %q is %s since lease generation %d: reconcile with the provider before calling again",
		e.Effect.Key, e.Effect.Status, e.Effect.Generation)
	if e.Effect.ProviderOperationID != "" {
		msg += fmt.Sprintf(" (provider operation %q)", e.Effect.ProviderOperationID)
	}
	return msg
}

// classifiedError carries an explicit retry decision. The outermost one in
// an error chain wins, so Retryable(NonRetryable(err)) is retryable.
type classifiedError struct {
	err        error
	retryable  bool
	retryAfter time.Duration
}

func (e *classifiedError) Error() string {
	if e.err == nil {
		return "<nil>"
	}
	return e.err.Error()
}
func (e *classifiedError) Unwrap() error { return e.err }

// codedError attaches a machine-readable code.
type codedError struct {
	code string
	err  error
}

func (e *codedError) Error() string {
	if e.err == nil {
		return e.code
	}
	return e.err.Error()
}
func (e *codedError) Unwrap() error { return e.err }

// Retryable marks err as retryable: the job is rescheduled with backoff
// while its attempt budget lasts. A plain handler error is retryable
// already; use this to override an inner NonRetryable.
func Retryable(err error) error {
	return &classifiedError{err: err, retryable: true}
}

// RetryAfter marks err as retryable no sooner than d from now (e.g. a
// rate limit's Retry-After). The coordinator waits for the longer of d and
// its computed backoff; d is capped at 7 days.
func RetryAfter(err error, d time.Duration) error {
	return &classifiedError{err: err, retryable: true, retryAfter: d}
}

// NonRetryable marks err as permanent: the job ends FAILED, whatever its
// remaining attempts (a queue policy's error code lists may still override).
func NonRetryable(err error) error {
	return &classifiedError{err: err, retryable: false}
}

// WithCode attaches a short machine-readable code (e.g. "HTTP_503") to err.
// Queue policies classify retries by code, and operators filter by it.
//
// It is also how a handler tells the coordinator that a job's dependency
// (JobSpec.dependency) is failing: a retry whose code is among the
// dependency's breaker policy's counted_error_codes (every code, when the
// policy lists none) counts as a failure of that dependency, and enough of
// them across the fleet open its circuit breaker, holding the
// dependency's other jobs back instead of burning their attempts:
//
//	if resp.StatusCode == http.StatusServiceUnavailable {
//		return nil, worker.WithCode("HTTP_503", fmt.Errorf("payment provider: %s", resp.Status))
//	}
//
// Use a code the policy does not count for failures that are the job's
// own (a declined card, bad input), so that they never open the breaker.
func WithCode(code string, err error) error {
	return &codedError{code: code, err: err}
}

// codeDefault is reported for errors without a code.
const (
	codeDefault   = "ERROR"
	codePanic     = "PANIC"
	codeNoHandler = "NO_HANDLER"
)

// Bounds of a reported JobError (store.ErrorCodeMaxLen and
// store.ErrorMessageMaxLen): longer values would make the whole report
// invalid, losing the outcome, so they are truncated instead.
const (
	errorCodeMaxLen    = 128
	errorMessageMaxLen = 8192
	retryAfterMax      = 7 * 24 * time.Hour
)

// failure is how a handler error is reported.
type failure struct {
	code       string
	message    string
	retryable  bool
	retryAfter time.Duration
}

// classify turns a handler error into a report: plain errors are
// retryable, the outermost classification wins, the outermost code wins.
func classify(err error) failure {
	f := failure{code: codeDefault, message: err.Error(), retryable: true}
	var ce *classifiedError
	if errors.As(err, &ce) {
		f.retryable = ce.retryable
		f.retryAfter = min(max(ce.retryAfter, 0), retryAfterMax)
	}
	var coded *codedError
	if errors.As(err, &coded) && coded.code != "" {
		f.code = coded.code
	}
	f.code = truncate(f.code, errorCodeMaxLen)
	f.message = truncate(f.message, errorMessageMaxLen)
	return f
}

// truncate cuts s to at most n bytes without splitting a UTF-8 sequence.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
