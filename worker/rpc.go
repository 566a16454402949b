package worker

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrorInfo reasons the SDK acts on.
const reasonLeaseLost = "LEASE_LOST"

// isLeaseLost reports whether a lease-bound call was refused because the
// caller no longer holds the lease. Any FAILED_PRECONDITION on a
// lease-bound call means the same thing to the holder (LEASE_LOST, or the
// job already final): stop publishing.
func isLeaseLost(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	if st.Code() == codes.FailedPrecondition {
		return true
	}
	return errorReason(st) == reasonLeaseLost
}

// errorReason returns the ErrorInfo reason attached to st, if any.
func errorReason(st *status.Status) string {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// isTransient reports whether a call may succeed when simply repeated:
// the coordinator (or its store) was briefly unreachable.
func isTransient(err error) bool {
	return status.Code(err) == codes.Unavailable
}

// Retry schedule for unary reports. A report is the only record of work
// done, so it is worth ~7s of retries across a coordinator blip; beyond
// that the lease is likely lost anyway and expiry takes over.
const (
	callAttempts     = 8
	callBackoffFirst = 100 * time.Millisecond
	callBackoffMax   = 2 * time.Second
)

// retryTransient calls fn until it succeeds, fails with a non-transient
// error, runs out of attempts, or ctx is done. Every repeated call is safe:
// the coordinator answers a repeated terminal report from the same lease
// generation with the original outcome.
func retryTransient(ctx context.Context, fn func(ctx context.Context) error) error {
	delay := callBackoffFirst
	var err error
	for attempt := 1; ; attempt++ {
		err = fn(ctx)
		if err == nil || !isTransient(err) || attempt == callAttempts {
			return err
		}
		t := time.NewTimer(jitter(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
		delay = min(delay*2, callBackoffMax)
	}
}
