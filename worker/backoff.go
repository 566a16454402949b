package worker

import (
	"math/rand/v2"
	"time"
)

// backoff is a capped exponential delay: min × 2^attempt, at most max.
//
// It is not cenkalti/backoff/v5's ExponentialBackOff because that one
// jitters around the interval, so a delay can exceed MaxInterval by half,
// while Config.ReconnectMax is documented as a ceiling and Watch counts
// attempts, which it does not expose.
type backoff struct {
	min, max time.Duration
	attempt  int
}

// next returns the delay before the next try, with jitter, and advances.
func (b *backoff) next() time.Duration {
	d := b.min
	for i := 0; i < b.attempt && d < b.max; i++ {
		d *= 2
	}
	d = min(d, b.max)
	b.attempt++
	return jitter(d)
}

// reset starts the schedule over (after a stream that worked).
func (b *backoff) reset() { b.attempt = 0 }

// jitter spreads d over [d/2, d], so a fleet of workers that lost the same
// coordinator does not reconnect in lockstep.
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}
