package worker

import (
	"context"
	"errors"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/backoff"
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
	b := backoff.Exponential{Min: callBackoffFirst, Max: callBackoffMax}
	var err error
	for attempt := 1; ; attempt++ {
		err = fn(ctx)
		if err == nil || !isTransient(err) || attempt == callAttempts {
			return err
		}
		t := time.NewTimer(max(b.Next(), retryInfoDelay(err)))
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// Refusals: the coordinator's overload defences refuse a call before doing
// anything (reasons RATE_LIMITED, OVERLOADED, WATCH_LIMIT), with a
// google.rpc.RetryInfo delay. Such a call is always safe to repeat, even a
// CreateJob without a request_id, so the SDK waits the delay and tries
// again, a bounded number of times.
const (
	// refusalRetries is how many times a refused unary call is repeated
	// before its refusal is returned.
	refusalRetries = 5
	// refusalDelayMax caps the delay honoured from one RetryInfo, so a
	// misconfigured server cannot park a caller for long.
	refusalDelayMax = 30 * time.Second
)

// refusalDelay returns the RetryInfo delay of a coordinator refusal, and
// whether err is one.
func refusalDelay(err error) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if !ok || (st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable) {
		return 0, false
	}
	var (
		refusal bool
		delay   time.Duration
		hasInfo bool
	)
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			switch d.GetReason() {
			case "RATE_LIMITED", "OVERLOADED", "WATCH_LIMIT":
				refusal = d.GetDomain() == errorDomain
			}
		case *errdetails.RetryInfo:
			delay, hasInfo = d.GetRetryDelay().AsDuration(), true
		}
	}
	if !refusal || !hasInfo {
		return 0, false
	}
	return min(max(delay, 0), refusalDelayMax), true
}

// retryInfoDelay returns the RetryInfo delay of any error that has one
// (zero otherwise): the least a client should wait before trying again.
func retryInfoDelay(err error) time.Duration {
	st, ok := status.FromError(err)
	if !ok {
		return 0
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return min(max(ri.GetRetryDelay().AsDuration(), 0), refusalDelayMax)
		}
	}
	return 0
}

// afterRefusal spreads a RetryInfo delay over [d, 1.5d], so refused
// callers do not return in lockstep.
func afterRefusal(d time.Duration) time.Duration {
	return d + backoff.Jitter(d)/2
}

// retryRefusedUnary is a client interceptor that repeats a unary call the
// coordinator refused with a RetryInfo delay, after that delay, up to
// refusalRetries times or until ctx ends.
func retryRefusedUnary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	for attempt := 0; ; attempt++ {
		err := invoker(ctx, method, req, reply, cc, opts...)
		delay, ok := refusalDelay(err)
		if !ok || attempt == refusalRetries {
			return err
		}
		t := time.NewTimer(afterRefusal(delay))
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}
