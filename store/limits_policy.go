package store

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"
)

// ClaimFetchMax bounds the candidates a claim walks in one queue with a
// per-key limit: it walks past jobs of keys at their limit to find others,
// but not without end. When more than that many jobs at the head of the
// queue belong to keys at their limit, the round finds nothing further
// down; the next round, after those keys' leases end, does.
const ClaimFetchMax = 5000

// Limited reports whether claims on the queue must count what is leased
// or started (under a lock shared by every coordinator) before they take
// any job: it has a concurrency, per-key or rate limit.
func (p QueuePolicy) Limited() bool {
	return !p.Paused && (p.ConcurrencyLimit > 0 || p.KeyConcurrencyLimit > 0 || p.RateLimit.Starts > 0)
}

// KeyLimited reports whether the queue limits each concurrency key.
func (p QueuePolicy) KeyLimited() bool {
	return p.KeyConcurrencyLimit > 0 || (p.RateLimit.Starts > 0 && p.RateLimit.PerKey)
}

// RateWindowStart is the start of the queue's rate window holding now
// (zero without a rate limit): windows are Interval long, aligned on the
// Unix epoch, so every coordinator cuts them the same.
func RateWindowStart(p QueuePolicy, now time.Time) time.Time {
	if p.RateLimit.Starts == 0 {
		return time.Time{}
	}
	iv := p.RateLimit.Interval.Microseconds()
	us := now.UnixMicro()
	return time.UnixMicro(us - us%iv).UTC()
}

// QueueUsage is what a claim counted of one queue, under its lock: the
// unexpired leases, by concurrency key too, and the starts in the current
// rate window (by key when the rate is per key; key "" for the queue).
type QueueUsage struct {
	Active       int64
	ActiveByKey  map[string]int64
	StartedByKey map[string]int64
}

// QueueRoom is what a claim may take of one queue (DecideQueueRoom).
type QueueRoom struct {
	// Cap is the most jobs of the queue the claim may lease.
	Cap int
	// Fetch is how many candidates to walk: Cap, or more when keys are
	// limited, so that jobs of keys at their limit do not hide the rest.
	Fetch int
	// KeyRoom is the room of a concurrency key not in Keys; -1 when keys
	// are not limited.
	KeyRoom int
	// Keys is the room left to the keys that have leases or starts.
	Keys map[string]int
}

// DecideQueueRoom is how many of the queue's jobs a claim for slots jobs
// may lease given usage: the queue's concurrency limit less its active
// leases, its rate less the window's starts, and for each concurrency key
// its limit less the key's leases and its rate less the key's starts.
func DecideQueueRoom(p QueuePolicy, slots int, u QueueUsage) QueueRoom {
	r := QueueRoom{Cap: slots, KeyRoom: -1}
	if p.ConcurrencyLimit > 0 {
		r.Cap = min(r.Cap, int(int64(p.ConcurrencyLimit)-u.Active))
	}
	rate := p.RateLimit
	if rate.Starts > 0 && !rate.PerKey {
		r.Cap = min(r.Cap, int(int64(rate.Starts)-u.StartedByKey[""]))
	}
	r.Cap = max(r.Cap, 0)
	r.Fetch = r.Cap
	if !p.KeyLimited() {
		return r
	}
	keyRoom := func(active, started int64) int {
		room := int64(slots)
		if p.KeyConcurrencyLimit > 0 {
			room = min(room, int64(p.KeyConcurrencyLimit)-active)
		}
		if rate.Starts > 0 && rate.PerKey {
			room = min(room, int64(rate.Starts)-started)
		}
		return int(max(room, 0))
	}
	r.KeyRoom = keyRoom(0, 0)
	r.Keys = map[string]int{}
	for k, n := range u.ActiveByKey {
		r.Keys[k] = keyRoom(n, u.StartedByKey[k])
	}
	if rate.PerKey {
		for k, n := range u.StartedByKey {
			r.Keys[k] = keyRoom(u.ActiveByKey[k], n)
		}
	}
	delete(r.Keys, "") // jobs with no key are never limited per key
	if r.Cap > 0 {
		r.Fetch = min(max(4*r.Cap, r.Cap+100), ClaimFetchMax)
	}
	return r
}

// RateStarts is what a claim adds to the queue's rate window for the
// concurrency keys of the jobs it leased: one count per job, by key when
// the rate is per key (jobs with no key are not counted), else under "".
// Nil without a rate limit.
func RateStarts(p QueuePolicy, keys []string) map[string]int64 {
	if p.RateLimit.Starts == 0 || len(keys) == 0 {
		return nil
	}
	out := map[string]int64{}
	for _, k := range keys {
		switch {
		case !p.RateLimit.PerKey:
			out[""]++
		case k != "":
			out[k]++
		}
	}
	return out
}

// queueLimitsJSON is the stored form of a policy's per-key and rate
// limits and default dependency: one column, so both engines store the
// same text.
type queueLimitsJSON struct {
	KeyConcurrencyLimit int32   `json:"key_concurrency_limit,omitempty"`
	RateStarts          int32   `json:"rate_starts,omitempty"`
	RateIntervalMicros  int64   `json:"rate_interval_us,omitempty"`
	RatePerKey          bool    `json:"rate_per_key,omitempty"`
	DefaultDependency   string  `json:"default_dependency,omitempty"`
	RetryBackoff        Backoff `json:"retry_backoff,omitempty"`
}

// EncodeQueueLimits is the stored form of p's per-key and rate limits.
func EncodeQueueLimits(p QueuePolicy) string {
	b, err := json.Marshal(queueLimitsJSON{
		KeyConcurrencyLimit: p.KeyConcurrencyLimit, RateStarts: p.RateLimit.Starts,
		RateIntervalMicros: p.RateLimit.Interval.Microseconds(), RatePerKey: p.RateLimit.PerKey,
		DefaultDependency: p.DefaultDependency, RetryBackoff: p.Retry.Backoff,
	})
	if err != nil {
		panic("store: unencodable queue limits: " + err.Error())
	}
	return string(b)
}

// DecodeQueueLimits sets p's per-key and rate limits from their stored
// form.
func DecodeQueueLimits(s string, p *QueuePolicy) error {
	var l queueLimitsJSON
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		return fmt.Errorf("queue %s: stored limits: %w", p.Queue, err)
	}
	p.KeyConcurrencyLimit = l.KeyConcurrencyLimit
	p.RateLimit = RateLimit{Starts: l.RateStarts, Interval: time.Duration(l.RateIntervalMicros) * time.Microsecond, PerKey: l.RatePerKey}
	p.DefaultDependency = l.DefaultDependency
	p.Retry.Backoff = cmp.Or(l.RetryBackoff, BackoffExponential)
	return nil
}
