package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
)

// BreakerState is the state of a circuit breaker. The strings are stored.
type BreakerState string

// The breaker states.
const (
	// BreakerClosed lets the dependency's jobs be claimed.
	BreakerClosed BreakerState = "closed"
	// BreakerOpen holds the dependency's jobs back: no claim takes them.
	BreakerOpen BreakerState = "open"
	// BreakerHalfOpen lets the policy's probe jobs through and holds the
	// rest back until a probe reports.
	BreakerHalfOpen BreakerState = "half_open"
)

// BreakerEventType is the type of a breaker transition event. The strings
// are stored.
type BreakerEventType string

// The breaker event types.
const (
	// BreakerEventOpened: the failure rate crossed the threshold, or a
	// probe failed (data says which).
	BreakerEventOpened BreakerEventType = "opened"
	// BreakerEventHalfOpened: the open delay ran out; probes may run.
	BreakerEventHalfOpened BreakerEventType = "half_opened"
	// BreakerEventClosed: a probe succeeded.
	BreakerEventClosed BreakerEventType = "closed"
	// BreakerEventReset: an operator closed the breaker.
	BreakerEventReset BreakerEventType = "reset"
	// BreakerEventForcedOpen: an operator opened the breaker.
	BreakerEventForcedOpen BreakerEventType = "forced_open"
	// BreakerEventPolicyUpdated: an operator replaced the breaker's policy.
	BreakerEventPolicyUpdated BreakerEventType = "policy_updated"
)

// Breaker bounds and defaults. A breaker's state is one row that every
// report of its dependency rewrites, so its window and history are kept
// small and bounded.
const (
	// BreakerWindowSizeMax bounds a count window.
	BreakerWindowSizeMax = 1000
	// BreakerWindowDurationMax bounds a time window.
	BreakerWindowDurationMax = 24 * time.Hour
	// BreakerOpenDurationMax bounds the open delay and its cap.
	BreakerOpenDurationMax = 7 * 24 * time.Hour
	// BreakerProbesMax bounds half-open probes.
	BreakerProbesMax = 100
	// BreakerCodesMax bounds the counted error codes.
	BreakerCodesMax = 64
	// BreakerHoldsKept is how many open intervals a breaker remembers to
	// credit its jobs' retry deadlines with (see HeldDuring).
	BreakerHoldsKept = 32

	BreakerWindowSizeDefault    = 20
	BreakerMinimumVolumeDefault = 10
	BreakerThresholdDefault     = 0.5
	BreakerOpenDurationDefault  = 30 * time.Second
	BreakerMaxOpenDefault       = 10 * time.Minute
	BreakerMultiplierDefault    = 2.0
	BreakerProbesDefault        = 1
	BreakerProbeTimeoutDefault  = 5 * time.Minute
)

// timeBuckets is how many buckets a time window is cut into: outcomes
// leave the window a tenth of it at a time.
const timeBuckets = 10

// BreakerPolicy says when the breaker of one dependency opens and how it
// recovers. A dependency with no stored policy has DefaultBreakerPolicy.
type BreakerPolicy struct {
	Dependency string
	// CountedErrorCodes are the Retry error codes that count as the
	// dependency failing; empty means every code counts. A Retry with an
	// uncounted code is the job's own failure and is not in the window.
	CountedErrorCodes []string
	// WindowSize, when set, makes the window the last WindowSize outcomes;
	// otherwise WindowDuration makes it the outcomes of that long ago up
	// to now. Exactly one is set after defaults.
	WindowSize     int32
	WindowDuration time.Duration
	// MinimumVolume is how many outcomes the window needs before the rate
	// is judged at all.
	MinimumVolume int32
	// FailureRateThreshold in (0, 1]: the breaker opens when failures /
	// outcomes reaches it.
	FailureRateThreshold float64
	// The n-th consecutive opening (without a close between) lasts
	// min(MaxOpenDuration, OpenDuration × BackoffMultiplier^(n-1)).
	OpenDuration      time.Duration
	MaxOpenDuration   time.Duration
	BackoffMultiplier float64
	// HalfOpenProbes is how many jobs half-open admits.
	HalfOpenProbes int32
	// ProbeTimeout frees the slot of a probe that has not reported after
	// that long (its worker crashed or released it), so half-open can
	// never be stuck on a probe that will never report.
	ProbeTimeout time.Duration
}

// DefaultBreakerPolicy is the policy of a dependency that has none stored.
func DefaultBreakerPolicy(dependency string) BreakerPolicy {
	return BreakerPolicy{Dependency: dependency}.WithDefaults()
}

// WithDefaults returns a copy with zero values replaced by the defaults.
func (p BreakerPolicy) WithDefaults() BreakerPolicy {
	if p.WindowSize == 0 && p.WindowDuration == 0 {
		p.WindowSize = BreakerWindowSizeDefault
	}
	p.CountedErrorCodes = slices.Clone(p.CountedErrorCodes)
	if p.MinimumVolume == 0 {
		// A count window smaller than the default volume could never
		// reach it: the whole window is the volume then.
		p.MinimumVolume = BreakerMinimumVolumeDefault
		if p.WindowSize > 0 {
			p.MinimumVolume = min(p.MinimumVolume, p.WindowSize)
		}
	}
	p.FailureRateThreshold = cmp.Or(p.FailureRateThreshold, BreakerThresholdDefault)
	p.OpenDuration = cmp.Or(p.OpenDuration, BreakerOpenDurationDefault)
	p.MaxOpenDuration = cmp.Or(p.MaxOpenDuration, max(BreakerMaxOpenDefault, p.OpenDuration))
	p.BackoffMultiplier = cmp.Or(p.BackoffMultiplier, BreakerMultiplierDefault)
	p.HalfOpenProbes = cmp.Or(p.HalfOpenProbes, BreakerProbesDefault)
	p.ProbeTimeout = cmp.Or(p.ProbeTimeout, BreakerProbeTimeoutDefault)
	return p
}

// Validate checks a policy after defaults.
func (p BreakerPolicy) Validate() error {
	switch {
	case !ValidName(p.Dependency):
		return Invalid("policy.dependency", nameRule)
	case p.WindowSize != 0 && p.WindowDuration != 0:
		return Invalid("policy.window_size", "set window_size or window_duration, not both")
	case p.WindowSize < 0 || p.WindowSize > BreakerWindowSizeMax:
		return Invalid("policy.window_size", fmt.Sprintf("must be in [1, %d]", BreakerWindowSizeMax))
	case p.WindowDuration < 0 || (p.WindowDuration != 0 && p.WindowDuration < time.Second) || p.WindowDuration > BreakerWindowDurationMax:
		return Invalid("policy.window_duration", "must be between 1s and 24h")
	case p.MinimumVolume < 1 || p.MinimumVolume > 10_000:
		return Invalid("policy.minimum_volume", "must be in [1, 10000]")
	case p.WindowSize > 0 && p.MinimumVolume > p.WindowSize:
		return Invalid("policy.minimum_volume", "must not exceed window_size, or the breaker could never open")
	case math.IsNaN(p.FailureRateThreshold) || p.FailureRateThreshold <= 0 || p.FailureRateThreshold > 1:
		return Invalid("policy.failure_rate_threshold", "must be in (0, 1]")
	case p.OpenDuration < time.Second || p.OpenDuration > BreakerOpenDurationMax:
		return Invalid("policy.open_duration", "must be between 1s and 7 days")
	case p.MaxOpenDuration < p.OpenDuration || p.MaxOpenDuration > BreakerOpenDurationMax:
		return Invalid("policy.max_open_duration", "must be at least open_duration and at most 7 days")
	case math.IsNaN(p.BackoffMultiplier) || p.BackoffMultiplier < 1 || p.BackoffMultiplier > 100:
		return Invalid("policy.backoff_multiplier", "must be in [1, 100]")
	case p.HalfOpenProbes < 1 || p.HalfOpenProbes > BreakerProbesMax:
		return Invalid("policy.half_open_probes", fmt.Sprintf("must be in [1, %d]", BreakerProbesMax))
	case p.ProbeTimeout < time.Second || p.ProbeTimeout > 24*time.Hour:
		return Invalid("policy.probe_timeout", "must be between 1s and 24h")
	case len(p.CountedErrorCodes) > BreakerCodesMax:
		return Invalid("policy.counted_error_codes", fmt.Sprintf("must have at most %d codes", BreakerCodesMax))
	}
	for i, c := range p.CountedErrorCodes {
		if err := checkText(fmt.Sprintf("policy.counted_error_codes[%d]", i), c, ErrorCodeMaxLen, true); err != nil {
			return err
		}
	}
	return nil
}

// Counts reports whether a Retry with error e is a failure of the
// dependency.
func (p BreakerPolicy) Counts(e JobError) bool {
	return len(p.CountedErrorCodes) == 0 || slices.Contains(p.CountedErrorCodes, e.Code)
}

// openFor is how long the trips-th consecutive opening lasts.
func (p BreakerPolicy) openFor(trips int32) time.Duration {
	d := float64(p.OpenDuration) * math.Pow(p.BackoffMultiplier, float64(max(trips-1, 0)))
	if d > float64(p.MaxOpenDuration) || math.IsInf(d, 0) || math.IsNaN(d) {
		return p.MaxOpenDuration
	}
	return time.Duration(d)
}

// BreakerKey names the breaker of a tenant's dependency.
type BreakerKey struct {
	Tenant     string
	Dependency string
}

// Breaker is the fleet-wide circuit breaker of one (tenant, dependency):
// one row, locked by whoever changes it, decided by the functions below.
type Breaker struct {
	Tenant     string
	Dependency string
	Policy     BreakerPolicy
	// PolicyStored is false while the breaker runs on DefaultBreakerPolicy.
	PolicyStored bool
	State        BreakerState
	// OpenedAt is when it last opened; zero when closed.
	OpenedAt time.Time
	// NextProbeAt is when an open breaker goes half-open; zero when closed,
	// half-open, or forced open until reset.
	NextProbeAt time.Time
	// Trips counts openings since the breaker last closed: the back-off
	// exponent.
	Trips int32
	// Forced is set by ForceOpen and cleared by any close.
	Forced bool
	Window BreakerWindow
	// Probes are the jobs half-open admitted that have not reported.
	Probes []BreakerProbe
	// Holds are the latest open intervals, newest last (see HeldDuring).
	Holds []BreakerHold
	// EventSeq is the newest event's sequence; events are gapless per
	// breaker from 1.
	EventSeq  int64
	UpdatedAt time.Time
}

// BreakerWindow is the rolling window of outcomes.
type BreakerWindow struct {
	// Recent is a count window's outcomes, oldest first: 'f' a failure,
	// 's' a success.
	Recent string `json:"recent,omitempty"`
	// Buckets is a time window's outcomes, oldest first.
	Buckets []BreakerBucket `json:"buckets,omitempty"`
}

// BreakerBucket counts the outcomes of one slice of a time window.
type BreakerBucket struct {
	Start    time.Time `json:"start"`
	Failures int32     `json:"failures"`
	Total    int32     `json:"total"`
}

// BreakerProbe is a job half-open let through.
type BreakerProbe struct {
	JobID      string    `json:"job_id"`
	Generation int64     `json:"generation"`
	AdmittedAt time.Time `json:"admitted_at"`
}

// BreakerHold is one interval the breaker was not closed; To is zero
// while it lasts.
type BreakerHold struct {
	From time.Time `json:"from"`
	To   time.Time `json:"to,omitzero"`
}

// breakerDetail is what engines store of a breaker besides its key, state,
// policy and event sequence: one JSON column, so both engines store the
// same text and neither interprets it.
type breakerDetail struct {
	OpenedAt    time.Time      `json:"opened_at,omitzero"`
	NextProbeAt time.Time      `json:"next_probe_at,omitzero"`
	Trips       int32          `json:"trips,omitempty"`
	Forced      bool           `json:"forced,omitempty"`
	Window      BreakerWindow  `json:"window"`
	Probes      []BreakerProbe `json:"probes,omitempty"`
	Holds       []BreakerHold  `json:"holds,omitempty"`
}

// breakerPolicyJSON is the stored form of a policy.
type breakerPolicyJSON struct {
	CountedErrorCodes    []string `json:"counted_error_codes,omitempty"`
	WindowSize           int32    `json:"window_size,omitempty"`
	WindowDurationMicros int64    `json:"window_duration_us,omitempty"`
	MinimumVolume        int32    `json:"minimum_volume"`
	FailureRateThreshold float64  `json:"failure_rate_threshold"`
	OpenDurationMicros   int64    `json:"open_duration_us"`
	MaxOpenMicros        int64    `json:"max_open_duration_us"`
	BackoffMultiplier    float64  `json:"backoff_multiplier"`
	HalfOpenProbes       int32    `json:"half_open_probes"`
	ProbeTimeoutMicros   int64    `json:"probe_timeout_us"`
}

// EncodeBreaker is the stored form of b: its detail and, when stored, its
// policy (empty: the default). Engines store these strings as they are.
func EncodeBreaker(b Breaker) (detail, policy string) {
	d, err := json.Marshal(breakerDetail{
		OpenedAt: b.OpenedAt, NextProbeAt: b.NextProbeAt, Trips: b.Trips, Forced: b.Forced,
		Window: b.Window, Probes: b.Probes, Holds: b.Holds,
	})
	if err != nil {
		panic("store: unencodable breaker: " + err.Error())
	}
	if !b.PolicyStored {
		return string(d), ""
	}
	p := b.Policy
	pj, err := json.Marshal(breakerPolicyJSON{
		CountedErrorCodes: p.CountedErrorCodes, WindowSize: p.WindowSize,
		WindowDurationMicros: p.WindowDuration.Microseconds(), MinimumVolume: p.MinimumVolume,
		FailureRateThreshold: p.FailureRateThreshold, OpenDurationMicros: p.OpenDuration.Microseconds(),
		MaxOpenMicros: p.MaxOpenDuration.Microseconds(), BackoffMultiplier: p.BackoffMultiplier,
		HalfOpenProbes: p.HalfOpenProbes, ProbeTimeoutMicros: p.ProbeTimeout.Microseconds(),
	})
	if err != nil {
		panic("store: unencodable breaker policy: " + err.Error())
	}
	return string(d), string(pj)
}

// DecodeBreaker rebuilds a breaker from its stored columns (see
// EncodeBreaker).
func DecodeBreaker(tenant, dependency string, state BreakerState, detail, policy string, eventSeq int64, updatedAt time.Time) (Breaker, error) {
	b := Breaker{Tenant: tenant, Dependency: dependency, State: state, EventSeq: eventSeq, UpdatedAt: updatedAt}
	var d breakerDetail
	if err := json.Unmarshal([]byte(detail), &d); err != nil {
		return Breaker{}, fmt.Errorf("breaker %s/%s: stored detail: %w", tenant, dependency, err)
	}
	b.OpenedAt, b.NextProbeAt, b.Trips, b.Forced = d.OpenedAt, d.NextProbeAt, d.Trips, d.Forced
	b.Window, b.Probes, b.Holds = d.Window, d.Probes, d.Holds
	b.Policy = DefaultBreakerPolicy(dependency)
	if policy != "" {
		var pj breakerPolicyJSON
		if err := json.Unmarshal([]byte(policy), &pj); err != nil {
			return Breaker{}, fmt.Errorf("breaker %s/%s: stored policy: %w", tenant, dependency, err)
		}
		b.PolicyStored = true
		b.Policy = BreakerPolicy{
			Dependency: dependency, CountedErrorCodes: pj.CountedErrorCodes, WindowSize: pj.WindowSize,
			WindowDuration: time.Duration(pj.WindowDurationMicros) * time.Microsecond, MinimumVolume: pj.MinimumVolume,
			FailureRateThreshold: pj.FailureRateThreshold, OpenDuration: time.Duration(pj.OpenDurationMicros) * time.Microsecond,
			MaxOpenDuration: time.Duration(pj.MaxOpenMicros) * time.Microsecond, BackoffMultiplier: pj.BackoffMultiplier,
			HalfOpenProbes: pj.HalfOpenProbes, ProbeTimeout: time.Duration(pj.ProbeTimeoutMicros) * time.Microsecond,
		}
	}
	return b, nil
}

// NewBreaker is the breaker of a dependency nobody has reported on yet:
// closed, on the default policy.
func NewBreaker(k BreakerKey) Breaker {
	return Breaker{Tenant: k.Tenant, Dependency: k.Dependency, State: BreakerClosed, Policy: DefaultBreakerPolicy(k.Dependency)}
}

// Key is b's key.
func (b Breaker) Key() BreakerKey { return BreakerKey{b.Tenant, b.Dependency} }

// Counts returns the failures and outcomes in b's window at now.
func (b Breaker) Counts(now time.Time) (failures, total int64) {
	if b.Policy.WindowSize > 0 {
		for _, c := range b.Window.Recent {
			total++
			if c == 'f' {
				failures++
			}
		}
		return failures, total
	}
	from := now.Add(-b.Policy.WindowDuration)
	for _, k := range b.Window.Buckets {
		if !k.Start.Before(from.Truncate(bucketWidth(b.Policy))) {
			failures += int64(k.Failures)
			total += int64(k.Total)
		}
	}
	return failures, total
}

// FailureRate is failures / outcomes in the window at now (0 when empty).
func (b Breaker) FailureRate(now time.Time) float64 {
	f, n := b.Counts(now)
	if n == 0 {
		return 0
	}
	return float64(f) / float64(n)
}

// HeldDuring is how long, within [from, to], the breaker was open or
// half-open, as far as its remembered holds tell. A job's retry deadline
// is credited with it when the job fails: the time it waited behind the
// breaker does not spend its time budget. Only the latest
// BreakerHoldsKept intervals are remembered.
func (b Breaker) HeldDuring(from, to time.Time) time.Duration {
	var d time.Duration
	for _, h := range b.Holds {
		end := h.To
		if end.IsZero() {
			end = to
		}
		lo, hi := h.From, end
		if from.After(lo) {
			lo = from
		}
		if to.Before(hi) {
			hi = to
		}
		if hi.After(lo) {
			d += hi.Sub(lo)
		}
	}
	return d
}

func bucketWidth(p BreakerPolicy) time.Duration {
	return max(p.WindowDuration/timeBuckets, time.Microsecond)
}

// NewBreakerEvent is a breaker transition to record, with its data.
type NewBreakerEvent struct {
	Type BreakerEventType
	At   time.Time
	Data string
}

// BreakerEvent is one recorded breaker transition. Sequence is gapless per
// breaker and starts at 1.
type BreakerEvent struct {
	Dependency string
	Sequence   int64
	Type       BreakerEventType
	Time       time.Time
	// Data is a JSON object with details (failure rate, counts, next
	// probe, the operator who acted).
	Data string
}

// BreakerChange is a breaker's new state and the events that say how it
// got there, to be written together; the events take the sequences after
// the breaker's EventSeq before the change.
type BreakerChange struct {
	Breaker Breaker
	// FirstSeq is the sequence of the first of Events.
	FirstSeq int64
	Events   []NewBreakerEvent
	// Now is the instant of the change (the breaker's updated_at).
	Now time.Time
}

// open is b opened at now after its trips-th consecutive trip.
func (b Breaker) open(now time.Time) Breaker {
	b.Trips++
	b.State = BreakerOpen
	b.OpenedAt = now
	b.NextProbeAt = now.Add(b.Policy.openFor(b.Trips))
	b.Window = BreakerWindow{}
	b.Probes = nil
	if len(b.Holds) == 0 || !b.Holds[len(b.Holds)-1].To.IsZero() {
		b.Holds = append(b.Holds, BreakerHold{From: now})
	}
	if len(b.Holds) > BreakerHoldsKept {
		b.Holds = slices.Clone(b.Holds[len(b.Holds)-BreakerHoldsKept:])
	}
	return b
}

// closed is b closed at now: a fresh window, no trips, the hold ended.
func (b Breaker) closed(now time.Time) Breaker {
	b.State = BreakerClosed
	b.OpenedAt, b.NextProbeAt = time.Time{}, time.Time{}
	b.Trips, b.Forced = 0, false
	b.Window = BreakerWindow{}
	b.Probes = nil
	if n := len(b.Holds); n > 0 && b.Holds[n-1].To.IsZero() {
		b.Holds = slices.Clone(b.Holds)
		b.Holds[n-1].To = now
	}
	return b
}

// record adds one outcome to a closed breaker's window.
func (b Breaker) record(failed bool, now time.Time) Breaker {
	p := b.Policy
	if p.WindowSize > 0 {
		c := "s"
		if failed {
			c = "f"
		}
		r := b.Window.Recent + c
		if len(r) > int(p.WindowSize) {
			r = r[len(r)-int(p.WindowSize):]
		}
		b.Window = BreakerWindow{Recent: r}
		return b
	}
	w := bucketWidth(p)
	start := now.Truncate(w)
	from := now.Add(-p.WindowDuration).Truncate(w)
	kept := make([]BreakerBucket, 0, len(b.Window.Buckets)+1)
	for _, k := range b.Window.Buckets {
		if !k.Start.Before(from) {
			kept = append(kept, k)
		}
	}
	if n := len(kept); n == 0 || !kept[n-1].Start.Equal(start) {
		kept = append(kept, BreakerBucket{Start: start})
	}
	last := &kept[len(kept)-1]
	last.Total++
	if failed {
		last.Failures++
	}
	b.Window = BreakerWindow{Buckets: kept}
	return b
}

// DecideBreakerOutcome folds one report of a job of b's dependency into
// b at now: failed is a Retry with a counted code, otherwise it is a
// Complete. Uncounted Retries are not outcomes and never get here.
//
//   - The report of a probe: a success closes the breaker, a failure
//     opens it again for longer (the next back-off step).
//   - Closed: the outcome joins the window; once the window holds the
//     minimum volume and the failure rate reaches the threshold, the
//     breaker opens.
//   - Open or half-open, not a probe: a job leased before the breaker
//     opened is reporting late; it says nothing about recovery and
//     changes nothing.
func DecideBreakerOutcome(b Breaker, tok LeaseToken, failed bool, now time.Time) (Breaker, []NewBreakerEvent) {
	probe := slices.IndexFunc(b.Probes, func(p BreakerProbe) bool {
		return p.JobID == tok.JobID && p.Generation == tok.Generation
	})
	switch {
	case probe >= 0 && b.State == BreakerHalfOpen && failed:
		next := b.open(now)
		return next, []NewBreakerEvent{{Type: BreakerEventOpened, At: now, Data: eventJSON(
			"reason", "probe failed", "job_id", tok.JobID, "trips", next.Trips, "next_probe_at", next.NextProbeAt)}}
	case probe >= 0 && b.State == BreakerHalfOpen:
		return b.closed(now), []NewBreakerEvent{{Type: BreakerEventClosed, At: now, Data: eventJSON(
			"reason", "probe succeeded", "job_id", tok.JobID)}}
	case b.State != BreakerClosed:
		return b, nil
	}
	b = b.record(failed, now)
	f, n := b.Counts(now)
	if n < int64(b.Policy.MinimumVolume) || float64(f) < b.Policy.FailureRateThreshold*float64(n) {
		return b, nil
	}
	next := b.open(now)
	return next, []NewBreakerEvent{{Type: BreakerEventOpened, At: now, Data: eventJSON(
		"reason", "failure rate", "failure_rate", float64(f)/float64(n), "failures", f, "outcomes", n,
		"trips", next.Trips, "next_probe_at", next.NextProbeAt)}}
}

// DecideProbes is what a claim at now may take of b's dependency, which
// claims otherwise skip while b is not closed: admit jobs as probes, and
// b as it is once the claim starts probing (with events when that changes
// its state).
//
//   - Open until NextProbeAt (forever when forced open with no end): none.
//   - Open and due: it goes half-open and admits HalfOpenProbes.
//   - Half-open: what is left of HalfOpenProbes after the probes still
//     out; a probe out longer than ProbeTimeout is given up (its worker
//     crashed, or it was released) and frees its slot.
func DecideProbes(b Breaker, now time.Time) (admit int, next Breaker, events []NewBreakerEvent) {
	switch b.State {
	case BreakerOpen:
		if b.NextProbeAt.IsZero() || now.Before(b.NextProbeAt) {
			return 0, b, nil
		}
		b.State = BreakerHalfOpen
		b.NextProbeAt = time.Time{}
		b.Probes = nil
		events = []NewBreakerEvent{{Type: BreakerEventHalfOpened, At: now, Data: eventJSON("probes", b.Policy.HalfOpenProbes)}}
	case BreakerHalfOpen:
		live := slices.DeleteFunc(slices.Clone(b.Probes), func(p BreakerProbe) bool {
			return !now.Before(p.AdmittedAt.Add(b.Policy.ProbeTimeout))
		})
		if len(live) == 0 {
			live = nil
		}
		b.Probes = live
	default:
		return 0, b, nil
	}
	return max(int(b.Policy.HalfOpenProbes)-len(b.Probes), 0), b, events
}

// ForgetProbe frees the slot of a probe that ended without an outcome
// (released, cancelled by its holder, its lease expired, or a failure
// with a code the policy does not count): half-open may admit another at
// once. It reports whether tok was a probe of b.
func ForgetProbe(b Breaker, tok LeaseToken) (Breaker, bool) {
	i := slices.IndexFunc(b.Probes, func(p BreakerProbe) bool {
		return p.JobID == tok.JobID && p.Generation == tok.Generation
	})
	if i < 0 {
		return b, false
	}
	b.Probes = slices.Delete(slices.Clone(b.Probes), i, i+1)
	if len(b.Probes) == 0 {
		b.Probes = nil
	}
	return b, true
}

// AdmitProbes records the jobs a claim took as probes of b at now.
func AdmitProbes(b Breaker, claimed []LeaseToken, now time.Time) Breaker {
	b.Probes = slices.Clone(b.Probes)
	for _, t := range claimed {
		b.Probes = append(b.Probes, BreakerProbe{JobID: t.JobID, Generation: t.Generation, AdmittedAt: now})
	}
	return b
}

// DecideReset is an operator closing b at now.
func DecideReset(b Breaker, actor, reason string, now time.Time) (Breaker, []NewBreakerEvent) {
	from := b.State
	return b.closed(now), []NewBreakerEvent{{Type: BreakerEventReset, At: now, Data: eventJSON(
		withActor(actor, "from", string(from), "reason", reason)...)}}
}

// DecideForceOpen is an operator opening b at now for d (zero: until
// reset). It does not count as a trip: the back-off is for failures.
func DecideForceOpen(b Breaker, d time.Duration, actor, reason string, now time.Time) (Breaker, []NewBreakerEvent) {
	trips := b.Trips
	b = b.open(now)
	b.Trips, b.Forced = trips, true
	b.NextProbeAt = time.Time{}
	if d > 0 {
		b.NextProbeAt = now.Add(d)
	}
	kv := []any{"reason", reason}
	if d > 0 {
		kv = append(kv, "next_probe_at", b.NextProbeAt)
	}
	return b, []NewBreakerEvent{{Type: BreakerEventForcedOpen, At: now, Data: eventJSON(withActor(actor, kv...)...)}}
}

// DecideBreakerPolicy replaces b's policy. The window is kept only when
// its kind (count or time) stays the same, trimmed to the new size.
func DecideBreakerPolicy(b Breaker, p BreakerPolicy, actor string, now time.Time) (Breaker, []NewBreakerEvent) {
	old := b.Policy
	b.Policy, b.PolicyStored = p, true
	switch {
	case (old.WindowSize > 0) != (p.WindowSize > 0):
		b.Window = BreakerWindow{}
	case p.WindowSize > 0 && len(b.Window.Recent) > int(p.WindowSize):
		b.Window.Recent = b.Window.Recent[len(b.Window.Recent)-int(p.WindowSize):]
	}
	return b, []NewBreakerEvent{{Type: BreakerEventPolicyUpdated, At: now, Data: eventJSON(withActor(actor)...)}}
}

// withActor prepends the acting principal to event data when there is one.
func withActor(actor string, kv ...any) []any {
	if actor == "" {
		return kv
	}
	return append([]any{"actor", actor}, kv...)
}

// ValidateBreakerRef checks a (tenant, dependency) pair.
func ValidateBreakerRef(tenant, dependency string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	if !ValidName(dependency) {
		return Invalid("dependency", nameRule)
	}
	return nil
}

// ResetBreakerParams closes a breaker by hand.
type ResetBreakerParams struct {
	Tenant     string
	Dependency string
	Reason     string
	// Actor is the principal that asked; recorded in the event.
	Actor string
	Now   time.Time
}

// ForceOpenBreakerParams opens a breaker by hand.
type ForceOpenBreakerParams struct {
	Tenant     string
	Dependency string
	// Duration is how long it stays open before half-open probes; zero
	// means until reset.
	Duration time.Duration
	Reason   string
	Actor    string
	Now      time.Time
}

// UpdateBreakerPolicyParams replaces a dependency's breaker policy.
type UpdateBreakerPolicyParams struct {
	Tenant string
	Policy BreakerPolicy
	Actor  string
	Now    time.Time
}

// ListBreakerEventsParams pages a breaker's events.
type ListBreakerEventsParams struct {
	Tenant        string
	Dependency    string
	AfterSequence int64
	Limit         int
}

// ValidateReset checks a ResetBreakerParams.
func ValidateReset(p ResetBreakerParams) error {
	if err := ValidateBreakerRef(p.Tenant, p.Dependency); err != nil {
		return err
	}
	return ValidateReason(p.Reason)
}

// ValidateForceOpen checks a ForceOpenBreakerParams.
func ValidateForceOpen(p ForceOpenBreakerParams) error {
	if err := ValidateTenant(p.Tenant); err != nil {
		return err
	}
	return ValidateForceOpenRequest(p.Dependency, p.Duration, p.Reason)
}

// ValidateForceOpenRequest checks what a caller asks of ForceOpenBreaker,
// before the tenant is known.
func ValidateForceOpenRequest(dependency string, d time.Duration, reason string) error {
	if !ValidName(dependency) {
		return Invalid("dependency", nameRule)
	}
	if d < 0 || d > BreakerOpenDurationMax {
		return Invalid("duration", "must be between 0 (until reset) and 7 days")
	}
	return ValidateReason(reason)
}

// ValidateListBreakerEvents checks a ListBreakerEventsParams.
func ValidateListBreakerEvents(p ListBreakerEventsParams) error {
	if err := ValidateBreakerRef(p.Tenant, p.Dependency); err != nil {
		return err
	}
	if p.AfterSequence < 0 {
		return Invalid("after_sequence", "must not be negative")
	}
	if p.Limit < 0 || p.Limit > ListLimitMax {
		return Invalid("page_size", fmt.Sprintf("must be in [0, %d]", ListLimitMax))
	}
	return nil
}

// Breakers is the part of Store that keeps circuit breakers. A breaker row
// appears when its dependency first reports or an operator acts on it.
type Breakers interface {
	// ListBreakers returns the tenant's breakers by dependency, at most
	// ListLimitMax of them.
	ListBreakers(ctx context.Context, tenant string) ([]Breaker, error)
	// GetBreaker returns one breaker; ErrNotFound when its dependency has
	// no breaker yet.
	GetBreaker(ctx context.Context, tenant, dependency string) (*Breaker, error)
	// ResetBreaker closes a breaker (RESET event); ErrNotFound when there is
	// none.
	ResetBreaker(ctx context.Context, p ResetBreakerParams) (*Breaker, error)
	// ForceOpenBreaker opens a breaker, creating it when needed
	// (FORCED_OPEN event).
	ForceOpenBreaker(ctx context.Context, p ForceOpenBreakerParams) (*Breaker, error)
	// UpdateBreakerPolicy validates and stores a dependency's policy,
	// creating the breaker when needed (POLICY_UPDATED event).
	UpdateBreakerPolicy(ctx context.Context, p UpdateBreakerPolicyParams) (*Breaker, error)
	// ListBreakerEvents returns a breaker's events with sequence >
	// AfterSequence, in order; ErrNotFound when there is no breaker.
	ListBreakerEvents(ctx context.Context, p ListBreakerEventsParams) ([]BreakerEvent, error)
}
