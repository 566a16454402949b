package store_test

import (
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNextRetryDelay(t *testing.T) {
	t.Parallel()
	p := store.RetryPolicy{InitialDelay: 10 * time.Second, MaxDelay: 25 * time.Second, Multiplier: 2, JitterFraction: 0.5}
	cases := []struct {
		name       string
		policy     store.RetryPolicy
		attempt    int32
		retryAfter time.Duration
		rnd        float64
		want       time.Duration
	}{
		{"first failure without jitter is the initial delay", p, 1, 0, 0, 10 * time.Second},
		{"second failure doubles", p, 2, 0, 0, 20 * time.Second},
		{"third failure is capped", p, 3, 0, 0, 25 * time.Second},
		{"a huge attempt stays capped", p, 1000, 0, 0, 25 * time.Second},
		{"attempt zero is treated as the first", p, 0, 0, 0, 10 * time.Second},
		{"jitter adds base × fraction × rnd", p, 1, 0, 0.5, 12500 * time.Millisecond},
		{"jitter applies on top of the cap", p, 3, 0, 0.5, 31250 * time.Millisecond},
		{"jitter just under one stays under base × (1 + fraction)", p, 1, 0, 0.999999, 14999995 * time.Microsecond},
		{"a longer retry-after wins", p, 1, time.Hour, 0.5, time.Hour},
		{"a shorter retry-after loses", p, 2, time.Second, 0, 20 * time.Second},
		{"multiplier one keeps the delay flat", store.RetryPolicy{InitialDelay: time.Second, MaxDelay: time.Hour, Multiplier: 1}, 50, 0, 0, time.Second},
		{"an overflowing power is capped, not wrapped", store.RetryPolicy{InitialDelay: store.RetryDelayMax, MaxDelay: store.RetryDelayMax, Multiplier: 100}, 1000, 0, 0, store.RetryDelayMax},
		{"full jitter on the largest delay does not overflow", store.RetryPolicy{InitialDelay: store.RetryDelayMax, MaxDelay: store.RetryDelayMax, Multiplier: 100, JitterFraction: 1}, 1000, 0, 0.999999, 2*store.RetryDelayMax - store.RetryDelayMax/1000000},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := store.NextRetryDelay(tc.policy, tc.attempt, 0, tc.retryAfter, tc.rnd)
			if d := got - tc.want; d > time.Microsecond || d < -time.Microsecond {
				t.Fatalf("NextRetryDelay(attempt %d, retry-after %s, rnd %v) = %s, want %s", tc.attempt, tc.retryAfter, tc.rnd, got, tc.want)
			}
		})
	}
}

func TestNextRetryDelayIsMonotonicAndBounded(t *testing.T) {
	t.Parallel()
	p := store.RetryPolicy{InitialDelay: 300 * time.Millisecond, MaxDelay: 7 * time.Minute, Multiplier: 1.7, JitterFraction: 0.3}
	prev := time.Duration(0)
	for attempt := int32(1); attempt <= store.MaxAttemptsMax; attempt++ {
		lo := store.NextRetryDelay(p, attempt, 0, 0, 0)
		hi := store.NextRetryDelay(p, attempt, 0, 0, math.Nextafter(1, 0))
		if lo < prev {
			t.Fatalf("attempt %d: delay %s shrank from %s", attempt, lo, prev)
		}
		if lo > p.MaxDelay || hi < lo || float64(hi) > float64(lo)*(1+p.JitterFraction)+2 /* ns of truncation */ {
			t.Fatalf("attempt %d: delay range [%s, %s] breaks the cap %s or the jitter bound", attempt, lo, hi, p.MaxDelay)
		}
		prev = lo
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	p := store.RetryPolicy{RetryableErrorCodes: []string{"rate_limited", "both"}, NonRetryableErrorCodes: []string{"forbidden", "both"}}
	cases := []struct {
		err  store.JobError
		want bool
	}{
		{store.JobError{Code: "other", Retryable: true}, true},
		{store.JobError{Code: "other", Retryable: false}, false},
		{store.JobError{Code: "forbidden", Retryable: true}, false},
		{store.JobError{Code: "rate_limited", Retryable: false}, true},
		{store.JobError{Code: "both", Retryable: true}, false},
		{store.JobError{Code: "", Retryable: true}, true},
	}
	for _, tc := range cases {
		if got := p.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%+v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

func TestDecideRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := store.RetryPolicy{InitialDelay: 10 * time.Second, MaxDelay: time.Minute, Multiplier: 2, NonRetryableErrorCodes: []string{"fatal"}}
	transient := store.JobError{Code: "busy", Retryable: true}
	cases := []struct {
		name        string
		err         store.JobError
		attempts    int32
		maxAttempts int32
		deadline    time.Time
		retryAfter  time.Duration
		want        store.RetryDecision
	}{
		{"retryable with budget left is queued after the backoff", transient, 1, 3, time.Time{}, 0,
			store.RetryDecision{State: store.JobStateQueued, AvailableAt: now.Add(10 * time.Second)}},
		{"the backoff grows with the attempt", transient, 2, 3, time.Time{}, 0,
			store.RetryDecision{State: store.JobStateQueued, AvailableAt: now.Add(20 * time.Second)}},
		{"the last attempt is dead", transient, 3, 3, time.Time{}, 0, store.RetryDecision{State: store.JobStateDead}},
		{"beyond the budget is dead", transient, 4, 3, time.Time{}, 0, store.RetryDecision{State: store.JobStateDead}},
		{"non-retryable is failed even with budget left", store.JobError{Code: "x"}, 1, 3, time.Time{}, 0, store.RetryDecision{State: store.JobStateFailed}},
		{"non-retryable on the last attempt is failed, not dead", store.JobError{Code: "x"}, 3, 3, time.Time{}, 0, store.RetryDecision{State: store.JobStateFailed}},
		{"a listed non-retryable code is failed", store.JobError{Code: "fatal", Retryable: true}, 1, 3, time.Time{}, 0, store.RetryDecision{State: store.JobStateFailed}},
		{"a next attempt within the deadline is queued", transient, 1, 3, now.Add(10 * time.Second), 0,
			store.RetryDecision{State: store.JobStateQueued, AvailableAt: now.Add(10 * time.Second)}},
		{"a next attempt past the deadline is dead", transient, 1, 3, now.Add(9 * time.Second), 0, store.RetryDecision{State: store.JobStateDead}},
		{"a retry-after past the deadline is dead", transient, 1, 3, now.Add(time.Minute), time.Hour, store.RetryDecision{State: store.JobStateDead}},
		{"a retry-after is honoured", transient, 1, 3, time.Time{}, time.Hour,
			store.RetryDecision{State: store.JobStateQueued, AvailableAt: now.Add(time.Hour)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := store.DecideRetry(p, tc.err, tc.attempts, tc.maxAttempts, tc.deadline, now, 0, tc.retryAfter, 0)
			if got.State != tc.want.State || !got.AvailableAt.Equal(tc.want.AvailableAt) {
				t.Fatalf("DecideRetry = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestQueuePolicyDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	d := store.DefaultQueuePolicy("emails")
	if err := d.Validate(); err != nil {
		t.Fatalf("the default policy is invalid: %v", err)
	}
	if d.Retry.MaxAttempts != store.MaxAttemptsDefault || d.Retry.InitialDelay != store.RetryInitialDelayDefault ||
		d.Retry.MaxDelay != store.RetryMaxDelayDefault || d.Retry.Multiplier != store.RetryMultiplierDefault ||
		d.Retry.JitterFraction != store.RetryJitterFractionDefault || d.DefaultLeaseDuration != store.LeaseDurationDefault || d.Paused {
		t.Fatalf("default policy %+v", d)
	}
	// WithDefaults keeps a chosen zero jitter and copies the code lists.
	codes := []string{"a"}
	p := store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{NonRetryableErrorCodes: codes}}.WithDefaults()
	if p.Retry.JitterFraction != 0 {
		t.Fatalf("WithDefaults changed a zero jitter to %v", p.Retry.JitterFraction)
	}
	codes[0] = "mutated"
	if p.Retry.NonRetryableErrorCodes[0] != "a" {
		t.Fatal("WithDefaults aliases the caller's code list")
	}
	bad := map[string]func(*store.QueuePolicy){
		"queue name":        func(p *store.QueuePolicy) { p.Queue = "no spaces" },
		"max attempts":      func(p *store.QueuePolicy) { p.Retry.MaxAttempts = store.MaxAttemptsMax + 1 },
		"initial delay":     func(p *store.QueuePolicy) { p.Retry.InitialDelay = -1 },
		"max below initial": func(p *store.QueuePolicy) { p.Retry.MaxDelay = p.Retry.InitialDelay - 1 },
		"max delay":         func(p *store.QueuePolicy) { p.Retry.MaxDelay = store.RetryDelayMax + 1 },
		"multiplier":        func(p *store.QueuePolicy) { p.Retry.Multiplier = 0.99 },
		"NaN multiplier":    func(p *store.QueuePolicy) { p.Retry.Multiplier = math.NaN() },
		"infinite mult":     func(p *store.QueuePolicy) { p.Retry.Multiplier = math.Inf(1) },
		"jitter":            func(p *store.QueuePolicy) { p.Retry.JitterFraction = 1.01 },
		"NaN jitter":        func(p *store.QueuePolicy) { p.Retry.JitterFraction = math.NaN() },
		"deadline":          func(p *store.QueuePolicy) { p.Retry.TotalRetryDeadline = -1 },
		"too many codes":    func(p *store.QueuePolicy) { p.Retry.RetryableErrorCodes = make([]string, 65) },
		"empty code":        func(p *store.QueuePolicy) { p.Retry.NonRetryableErrorCodes = []string{""} },
		"NUL code":          func(p *store.QueuePolicy) { p.Retry.RetryableErrorCodes = []string{"a\x00"} },
		"lease":             func(p *store.QueuePolicy) { p.DefaultLeaseDuration = store.LeaseDurationMax + 1 },
		"concurrency":       func(p *store.QueuePolicy) { p.ConcurrencyLimit = -1 },
	}
	for name, change := range bad {
		p := store.DefaultQueuePolicy("q")
		change(&p)
		if err := p.Validate(); !isInvalid(err) {
			t.Errorf("policy with a bad %s: Validate() = %v, want ErrInvalid", name, err)
		}
	}
}

func TestNextRetryDelayDecorrelated(t *testing.T) {
	t.Parallel()
	p := store.RetryPolicy{InitialDelay: time.Second, MaxDelay: time.Minute, Backoff: store.BackoffDecorrelated, Multiplier: 7, JitterFraction: 1}
	for _, tc := range []struct {
		prev, retryAfter time.Duration
		rnd              float64
		want             time.Duration
	}{
		{0, 0, 0, time.Second},                               // first failure: the floor
		{0, 0, 0.5, 2 * time.Second},                         // 1 + 0.5 × (3 − 1)
		{10 * time.Second, 0, 0.5, 15500 * time.Millisecond}, // 1 + 0.5 × (30 − 1)
		{50 * time.Second, 0, 0.9, time.Minute},              // capped
		{0, 5 * time.Second, 0, 5 * time.Second},             // retry-after wins when longer
	} {
		if got := store.NextRetryDelay(p, 3, tc.prev, tc.retryAfter, tc.rnd); got != tc.want {
			t.Errorf("prev %s, retry-after %s, rnd %v: %s, want %s", tc.prev, tc.retryAfter, tc.rnd, got, tc.want)
		}
	}
	// The total retry deadline still holds.
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	d := store.DecideRetry(p.WithDefaults(), store.JobError{Code: "x", Retryable: true}, 2, 10, now.Add(5*time.Second), now, 10*time.Second, 0, 0.5)
	if d.State != store.JobStateDead {
		t.Errorf("a decorrelated delay past the deadline: %+v, want dead", d)
	}
	if err := (store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{Backoff: "linear"}}).WithDefaults().Validate(); err == nil {
		t.Error("an unknown backoff was accepted")
	}
}
