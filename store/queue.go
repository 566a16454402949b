package store

import (
	"cmp"
	"time"
)

// RetryPolicy says how failed attempts are retried. See NextRetryDelay.
type RetryPolicy struct {
	MaxAttempts            int32
	InitialDelay           time.Duration
	MaxDelay               time.Duration
	Multiplier             float64
	JitterFraction         float64
	RetryableErrorCodes    []string
	NonRetryableErrorCodes []string
	// TotalRetryDeadline is the time budget from creation; 0 means none.
	TotalRetryDeadline time.Duration
	// Backoff chooses the delay formula (NextRetryDelay): "" or
	// BackoffExponential, or BackoffDecorrelated.
	Backoff Backoff
}

// Backoff names a retry delay formula.
type Backoff string

// The backoff formulas.
const (
	// BackoffExponential: min(MaxDelay, InitialDelay × Multiplier^(n-1)),
	// plus JitterFraction of it at random.
	BackoffExponential Backoff = "exponential"
	// BackoffDecorrelated: min(MaxDelay, random between InitialDelay and
	// 3 × the previous delay) ("decorrelated jitter").
	BackoffDecorrelated Backoff = "decorrelated"
)

// QueuePolicy is the configuration of one queue.
type QueuePolicy struct {
	Queue                string
	Retry                RetryPolicy
	DefaultLeaseDuration time.Duration
	// MaxLeaseDuration bounds every lease of the queue: what a claim, a
	// worker stream or a renewal asks for is cut to it. Zero means
	// MaxLeaseDurationDefault.
	MaxLeaseDuration time.Duration
	// ConcurrencyLimit caps leased jobs of the queue fleet-wide; 0 = none.
	ConcurrencyLimit int32
	// KeyConcurrencyLimit caps leased jobs of each concurrency key of the
	// queue fleet-wide; 0 = none. Jobs with no key are not limited by it.
	KeyConcurrencyLimit int32
	// RateLimit caps how many of the queue's jobs start (are leased) per
	// interval, fleet-wide.
	RateLimit RateLimit
	// DefaultDependency is the dependency of jobs created without one.
	DefaultDependency string
	Paused            bool
}

// RateLimit is at most Starts leases per Interval, counted in fixed
// windows of Interval: over any span T at most Starts × (T/Interval + 1)
// start. Starts = 0 means no limit.
type RateLimit struct {
	Starts   int32
	Interval time.Duration
	// PerKey counts each concurrency key on its own (jobs with no key are
	// not limited); otherwise the queue as a whole.
	PerKey bool
}

// LeaseFor is the lease a claim or renewal asking for d gets in the queue:
// the queue's default when d is zero, never more than its maximum.
func (p QueuePolicy) LeaseFor(d time.Duration) time.Duration {
	if d == 0 {
		d = cmp.Or(p.DefaultLeaseDuration, LeaseDurationDefault)
	}
	return min(d, cmp.Or(p.MaxLeaseDuration, MaxLeaseDurationDefault))
}

// QueueStats counts a queue's jobs by state.
type QueueStats struct {
	Queue     string
	Queued    int64
	Available int64
	Leased    int64
	Succeeded int64
	Failed    int64
	Cancelled int64
	Dead      int64
	Paused    bool
	// Lag is how long the oldest available job has been due (Now -
	// available_at): zero when none is available.
	Lag time.Duration
}

// AddLag folds one row's lag (the age of its oldest available job) into
// the queue's: the largest wins.
func (st *QueueStats) AddLag(lag time.Duration) {
	if lag > st.Lag {
		st.Lag = lag
	}
}

// Add counts n jobs of a queue in state (available of them claimable now,
// for queued jobs). Engines use it to fold a GROUP BY state result.
func (st *QueueStats) Add(state JobState, n, available int64) {
	switch state {
	case JobStateQueued:
		st.Queued += n
		st.Available += available
	case JobStateLeased:
		st.Leased += n
	case JobStateSucceeded:
		st.Succeeded += n
	case JobStateFailed:
		st.Failed += n
	case JobStateCancelled:
		st.Cancelled += n
	case JobStateDead:
		st.Dead += n
	}
}

// QueueSummary is a queue's effective policy and its stats.
type QueueSummary struct {
	Policy QueuePolicy
	Stats  QueueStats
}

// QueueRef names a queue of a tenant.
type QueueRef struct {
	Tenant string
	Queue  string
}
