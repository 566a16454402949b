// Package backoff is the delay before repeating a transport call that
// failed for a passing reason: a coordinator that was briefly unreachable,
// a stream that broke, a database transaction that lost a deadlock. The
// Go SDK and the server share it; it imports nothing of Leasehold.
//
// It is not the job retry policy: how long a failed job waits before its
// next attempt is a domain decision of package store (a queue's policy,
// persisted with the job).
//
// Delays grow exponentially from Min to a cap of Max, and each is jittered
// over [d/2, d], so a fleet that lost the same peer does not return in
// lockstep and a delay never exceeds Max (cenkalti/backoff/v5 jitters
// around the interval, so its delays can exceed the cap by half).
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Exponential is a capped exponential schedule: the n-th delay (from 0) is
// Min × 2^n, at most Max, jittered by Jitter. The zero value is not useful;
// set Min and Max. It is not safe for concurrent use.
type Exponential struct {
	// Min is the first delay's ceiling; Max caps every delay.
	Min, Max time.Duration

	attempt int
}

// Next returns the delay before the next try and advances the schedule.
func (b *Exponential) Next() time.Duration {
	d := b.Min
	for i := 0; i < b.attempt && d < b.Max; i++ {
		d *= 2
	}
	d = min(d, b.Max)
	b.attempt++
	return Jitter(d)
}

// Attempts returns how many delays Next has handed out since the last
// Reset.
func (b *Exponential) Attempts() int { return b.attempt }

// Reset starts the schedule over, after a try that worked.
func (b *Exponential) Reset() { b.attempt = 0 }

// Jitter spreads d over [d/2, d] at random.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// Sleep waits d, or until ctx is done; then it returns ctx's cause.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
