package coordinator

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/peer"
)

// rateLimiter is a set of token buckets, one per caller: the principal
// when calls authenticate, the peer address (one client connection) with
// --auth none, where there is no principal to tell callers apart. It is a
// go-grpc-middleware ratelimit.Limiter; the interceptor chain runs it after
// auth, so the caller is known.
//
// Buckets are created on a caller's first call and dropped once they are
// full again (a full bucket is the same as a new one), so the map holds
// the callers of the last moments only; at most rateKeysMax of them, and a
// caller beyond that shares one overflow bucket.
type rateLimiter struct {
	limit rate.Limit
	burst int
	// kind names what it limits in refusals: "calls" or "stream opens".
	kind string
	now  func() time.Time

	// mu guards buckets and swept.
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
	swept   time.Time
}

// rateKeysMax bounds how many callers have a bucket of their own at once:
// each costs ~100 bytes, so the map stays within a few megabytes however
// many peers come and go.
const rateKeysMax = 50_000

// rateSweepEvery is how often full buckets are dropped from the map.
const rateSweepEvery = 10 * time.Second

// overflowKey is the bucket callers share when rateKeysMax is reached.
const overflowKey = "\x00overflow"

func newRateLimiter(perSecond float64, burst int, kind string) *rateLimiter {
	l := rate.Limit(perSecond)
	if perSecond < 0 {
		l = rate.Inf // disabled
	}
	return &rateLimiter{limit: l, burst: burst, kind: kind, now: time.Now, buckets: make(map[string]*rate.Limiter)}
}

// errRateLimited is what Limit returns to the ratelimit interceptor; the
// details of the refusal travel in the call's note (refusals.go).
var errRateLimited = errors.New("rate limited")

// Limit implements ratelimit.Limiter: nil when the caller has a token,
// otherwise errRateLimited, with the wait until its next token noted for
// the refusal's RetryInfo.
func (r *rateLimiter) Limit(ctx context.Context) error {
	return r.limitKey(ctx, rateKey(ctx))
}

// limitKey is Limit for the bucket of key.
func (r *rateLimiter) limitKey(ctx context.Context, key string) error {
	if r.limit == rate.Inf {
		return nil
	}
	now := r.now()
	b := r.bucket(key, now)
	res := b.ReserveN(now, 1)
	if !res.OK() {
		noteRefusal(ctx, refusalRateLimited, time.Second)
		return errRateLimited
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		noteRefusal(ctx, refusalRateLimited, d)
		return errRateLimited
	}
	return nil
}

func (r *rateLimiter) bucket(key string, now time.Time) *rate.Limiter {
	r.mu.Lock()
	defer r.mu.Unlock()
	if now.Sub(r.swept) >= rateSweepEvery {
		r.swept = now
		for k, b := range r.buckets {
			if b.TokensAt(now) >= float64(r.burst) {
				delete(r.buckets, k)
			}
		}
	}
	b, ok := r.buckets[key]
	if !ok {
		if len(r.buckets) >= rateKeysMax {
			key = overflowKey
			if b, ok = r.buckets[key]; ok {
				return b
			}
		}
		b = rate.NewLimiter(r.limit, r.burst)
		r.buckets[key] = b
	}
	return b
}

// rateKey is whom a call counts against: its principal, or with --auth none
// its peer's address (ip:port, so each client connection has its own
// bucket; MaxConnections bounds how many one host can open).
func rateKey(ctx context.Context) string {
	if cl := callerFrom(ctx); cl.id != "" {
		return "principal:" + cl.id
	}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return "peer:" + p.Addr.String()
	}
	return "peer:unknown"
}
