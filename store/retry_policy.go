package store

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultQueuePolicy is the policy of a queue that has none stored.
func DefaultQueuePolicy(queue string) QueuePolicy {
	p := QueuePolicy{Queue: queue}.WithDefaults()
	p.Retry.JitterFraction = RetryJitterFractionDefault
	return p
}

// WithDefaults returns a copy with zero values replaced by the defaults.
func (p QueuePolicy) WithDefaults() QueuePolicy {
	p.Retry = p.Retry.WithDefaults()
	p.DefaultLeaseDuration = cmp.Or(p.DefaultLeaseDuration, LeaseDurationDefault)
	p.MaxLeaseDuration = cmp.Or(p.MaxLeaseDuration, MaxLeaseDurationDefault)
	return p
}

// WithDefaults returns a copy with zero values replaced by the defaults.
// JitterFraction is left alone: zero jitter is a legitimate choice, so the API
// layer decides when an unset jitter means RetryJitterFractionDefault.
func (r RetryPolicy) WithDefaults() RetryPolicy {
	r.MaxAttempts = cmp.Or(r.MaxAttempts, MaxAttemptsDefault)
	r.InitialDelay = cmp.Or(r.InitialDelay, RetryInitialDelayDefault)
	r.MaxDelay = cmp.Or(r.MaxDelay, RetryMaxDelayDefault)
	r.Multiplier = cmp.Or(r.Multiplier, RetryMultiplierDefault)
	r.Backoff = cmp.Or(r.Backoff, BackoffExponential)
	r.RetryableErrorCodes = slices.Clone(r.RetryableErrorCodes)
	r.NonRetryableErrorCodes = slices.Clone(r.NonRetryableErrorCodes)
	return r
}

// Validate checks a policy after defaults.
func (p QueuePolicy) Validate() error {
	if !ValidName(p.Queue) {
		return Invalid("policy.queue", nameRule)
	}
	r := p.Retry
	switch {
	case r.MaxAttempts < 1 || r.MaxAttempts > MaxAttemptsMax:
		return Invalid("policy.retry.max_attempts", fmt.Sprintf("must be in [1, %d]", MaxAttemptsMax))
	case r.InitialDelay <= 0 || r.InitialDelay > RetryDelayMax:
		return Invalid("policy.retry.initial_delay", "must be positive and at most 30 days")
	case r.MaxDelay < r.InitialDelay || r.MaxDelay > RetryDelayMax:
		return Invalid("policy.retry.max_delay", "must be at least initial_delay and at most 30 days")
	case math.IsNaN(r.Multiplier) || r.Multiplier < 1 || r.Multiplier > 100:
		return Invalid("policy.retry.multiplier", "must be in [1, 100]")
	case math.IsNaN(r.JitterFraction) || r.JitterFraction < 0 || r.JitterFraction > 1:
		return Invalid("policy.retry.jitter_fraction", "must be in [0, 1]")
	case r.TotalRetryDeadline < 0 || r.TotalRetryDeadline > RetryDelayMax:
		return Invalid("policy.retry.total_retry_deadline", "must be between 0 and 30 days")
	case r.Backoff != BackoffExponential && r.Backoff != BackoffDecorrelated:
		return Invalid("policy.retry.backoff", "must be exponential or decorrelated")
	case len(r.RetryableErrorCodes) > 64 || len(r.NonRetryableErrorCodes) > 64:
		return Invalid("policy.retry", "at most 64 error codes per list")
	}
	for _, c := range append(slices.Clone(r.RetryableErrorCodes), r.NonRetryableErrorCodes...) {
		if err := checkText("policy.retry error code", c, ErrorCodeMaxLen, true); err != nil {
			return err
		}
	}
	if err := ValidateLeaseDuration("policy.default_lease_duration", p.DefaultLeaseDuration, false); err != nil {
		return err
	}
	if err := ValidateLeaseDuration("policy.max_lease_duration", p.MaxLeaseDuration, false); err != nil {
		return err
	}
	if p.DefaultLeaseDuration > p.MaxLeaseDuration {
		return Invalid("policy.default_lease_duration", "must not be longer than max_lease_duration")
	}
	if p.ConcurrencyLimit < 0 || p.ConcurrencyLimit > 1_000_000 {
		return Invalid("policy.concurrency_limit", "must be in [0, 1000000]")
	}
	if p.DefaultDependency != "" && !ValidName(p.DefaultDependency) {
		return Invalid("policy.default_dependency", nameRule)
	}
	if p.KeyConcurrencyLimit < 0 || p.KeyConcurrencyLimit > 1_000_000 {
		return Invalid("policy.key_concurrency_limit", "must be in [0, 1000000]")
	}
	switch r := p.RateLimit; {
	case r.Starts < 0 || r.Starts > 1_000_000:
		return Invalid("policy.rate_limit.starts", "must be in [0, 1000000]")
	case r.Starts == 0 && (r.Interval != 0 || r.PerKey):
		return Invalid("policy.rate_limit.starts", "must be set with interval and per_key")
	case r.Starts > 0 && (r.Interval < time.Second || r.Interval > 24*time.Hour):
		return Invalid("policy.rate_limit.interval", "must be between 1s and 24h")
	}
	return nil
}

// Retryable classifies a reported error under the policy:
// NonRetryableErrorCodes wins, then RetryableErrorCodes, then the worker's
// own flag.
func (r RetryPolicy) Retryable(e JobError) bool {
	if slices.Contains(r.NonRetryableErrorCodes, e.Code) {
		return false
	}
	if slices.Contains(r.RetryableErrorCodes, e.Code) {
		return true
	}
	return e.Retryable
}

// NextRetryDelay is the delay before the next attempt after attempt number
// `attempt` (1-based) failed. With BackoffExponential (the default):
//
//	base  = min(MaxDelay, InitialDelay × Multiplier^(attempt-1))
//	delay = base + base × JitterFraction × rnd   (rnd in [0, 1))
//
// With BackoffDecorrelated ("decorrelated jitter"), growing from prev, the
// delay the previous failed attempt was retried after (0 for none):
//
//	delay = min(MaxDelay, InitialDelay + rnd × (3 × max(prev, InitialDelay) − InitialDelay))
//
// and retryAfter instead when it is longer. rnd comes from the store's
// injectable random source so tests can pin it.
func NextRetryDelay(r RetryPolicy, attempt int32, prev, retryAfter time.Duration, rnd float64) time.Duration {
	if r.Backoff == BackoffDecorrelated {
		lo := float64(r.InitialDelay)
		hi := 3 * math.Max(float64(prev), lo)
		d := lo + rnd*(hi-lo)
		if d > float64(r.MaxDelay) || math.IsInf(d, 0) || math.IsNaN(d) {
			d = float64(r.MaxDelay)
		}
		return max(time.Duration(d), retryAfter)
	}
	exp := float64(max(attempt-1, 0))
	base := float64(r.InitialDelay) * math.Pow(r.Multiplier, exp)
	if base > float64(r.MaxDelay) || math.IsInf(base, 0) || math.IsNaN(base) {
		base = float64(r.MaxDelay)
	}
	delay := time.Duration(base + base*r.JitterFraction*rnd)
	return max(delay, retryAfter)
}

// RetryDecision is what a failed attempt leads to.
type RetryDecision struct {
	State       JobState // queued, failed or dead
	AvailableAt time.Time
	// Delay is the backoff chosen when State is queued.
	Delay time.Duration
}

// DecideRetry applies the policy to a failed attempt. attempts is the job's
// attempts count including the failed one; maxAttempts the job's budget;
// deadline the job's RetryDeadline (zero for none); prev the delay the
// previous failed attempt was retried after (decorrelated backoff).
func DecideRetry(r RetryPolicy, e JobError, attempts, maxAttempts int32, deadline, now time.Time, prev, retryAfter time.Duration, rnd float64) RetryDecision {
	if !r.Retryable(e) {
		return RetryDecision{State: JobStateFailed}
	}
	if attempts >= maxAttempts {
		return RetryDecision{State: JobStateDead}
	}
	delay := NextRetryDelay(r, attempts, prev, retryAfter, rnd)
	next := now.Add(delay)
	if !deadline.IsZero() && next.After(deadline) {
		return RetryDecision{State: JobStateDead}
	}
	return RetryDecision{State: JobStateQueued, AvailableAt: next, Delay: delay}
}
