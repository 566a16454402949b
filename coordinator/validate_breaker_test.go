package coordinator

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// TestValidateBreakerRequests checks that every bad breaker request is an
// InvalidError naming the request's own field (a BadRequest field
// violation on the wire), and that good ones pass with defaults filled.
func TestValidateBreakerRequests(t *testing.T) {
	t.Parallel()
	pol := func(f func(p *leaseholdv1.BreakerPolicy)) *leaseholdv1.UpdateBreakerPolicyRequest {
		p := &leaseholdv1.BreakerPolicy{Dependency: "payments-api"}
		f(p)
		return &leaseholdv1.UpdateBreakerPolicyRequest{Policy: p}
	}
	for _, c := range []struct {
		name, field string
		check       func() error
	}{
		{"no policy", "policy", func() error {
			_, err := testValidator.UpdateBreakerPolicy(&leaseholdv1.UpdateBreakerPolicyRequest{})
			return err
		}},
		{"no dependency", "policy.dependency", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.Dependency = "" }))
			return err
		}},
		{"both windows", "policy.window_size", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) {
				p.WindowSize, p.WindowDuration = 10, durationpb.New(time.Minute)
			}))
			return err
		}},
		{"negative window", "policy.window_size", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.WindowSize = -1 }))
			return err
		}},
		{"window too long", "policy.window_duration", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.WindowDuration = durationpb.New(48 * time.Hour) }))
			return err
		}},
		{"threshold above 1", "policy.failure_rate_threshold", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.FailureRateThreshold = 1.01 }))
			return err
		}},
		{"threshold NaN", "policy.failure_rate_threshold", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.FailureRateThreshold = math.NaN() }))
			return err
		}},
		{"negative open duration", "policy.open_duration", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.OpenDuration = durationpb.New(-time.Second) }))
			return err
		}},
		{"cap below the open duration", "policy.max_open_duration", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) {
				p.OpenDuration, p.MaxOpenDuration = durationpb.New(time.Hour), durationpb.New(time.Minute)
			}))
			return err
		}},
		{"too many probes", "policy.half_open_probes", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.HalfOpenProbes = 101 }))
			return err
		}},
		{"too many codes", "policy.counted_error_codes", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.CountedErrorCodes = make([]string, 65) }))
			return err
		}},
		{"an empty code", "policy.counted_error_codes[0]", func() error {
			_, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) { p.CountedErrorCodes = []string{""} }))
			return err
		}},
		{"reset without dependency", "dependency", func() error { _, err := testValidator.ResetBreaker(&leaseholdv1.ResetBreakerRequest{}); return err }},
		{"reset with a long reason", "reason", func() error {
			_, err := testValidator.ResetBreaker(&leaseholdv1.ResetBreakerRequest{Dependency: "d", Reason: strings.Repeat("x", 2000)})
			return err
		}},
		{"get with a bad name", "dependency", func() error {
			_, err := testValidator.GetBreaker(&leaseholdv1.GetBreakerRequest{Dependency: "a b"})
			return err
		}},
		{"force-open for 8 days", "duration", func() error {
			_, err := testValidator.ForceOpenBreaker(&leaseholdv1.ForceOpenBreakerRequest{Dependency: "d", Duration: durationpb.New(8 * 24 * time.Hour)})
			return err
		}},
		{"force-open for a negative time", "duration", func() error {
			_, err := testValidator.ForceOpenBreaker(&leaseholdv1.ForceOpenBreakerRequest{Dependency: "d", Duration: durationpb.New(-time.Second)})
			return err
		}},
		{"events after a negative sequence", "after_sequence", func() error {
			_, err := testValidator.ListBreakerEvents(&leaseholdv1.ListBreakerEventsRequest{Dependency: "d", AfterSequence: -1})
			return err
		}},
		{"events with a negative page size", "page_size", func() error {
			_, err := testValidator.ListBreakerEvents(&leaseholdv1.ListBreakerEventsRequest{Dependency: "d", PageSize: -1})
			return err
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.check()
			var inv *store.InvalidError
			if !errors.As(err, &inv) || inv.Field != c.field {
				t.Fatalf("got %v, want an InvalidError on %q", err, c.field)
			}
		})
	}

	p, err := testValidator.UpdateBreakerPolicy(pol(func(p *leaseholdv1.BreakerPolicy) {
		p.CountedErrorCodes, p.WindowDuration = []string{"HTTP_503"}, durationpb.New(time.Minute)
	}))
	if err != nil {
		t.Fatalf("a valid policy was refused: %v", err)
	}
	if p.WindowSize != 0 || p.WindowDuration != time.Minute || p.MinimumVolume != store.BreakerMinimumVolumeDefault ||
		p.OpenDuration != store.BreakerOpenDurationDefault || p.HalfOpenProbes != store.BreakerProbesDefault {
		t.Fatalf("defaults not filled in: %+v", p)
	}
	// AIP-158: a page size above the maximum is cut to it.
	if ev, err := testValidator.ListBreakerEvents(&leaseholdv1.ListBreakerEventsRequest{Dependency: "d", PageSize: 5000}); err != nil || ev.Limit != EventPageSizeMax {
		t.Fatalf("page size 5000: %+v, %v; want the maximum", ev, err)
	}
	fo, err := testValidator.ForceOpenBreaker(&leaseholdv1.ForceOpenBreakerRequest{Dependency: "d"})
	if err != nil || fo.Duration != 0 || fo.Tenant != "" {
		t.Fatalf("force-open until reset: %+v, %v", fo, err)
	}
}

// TestValidateQueueLimits checks the per-key and rate fields of a queue
// policy and a job's concurrency key: each bad value names its field.
func TestValidateQueueLimits(t *testing.T) {
	t.Parallel()
	qp := func(f func(p *leaseholdv1.QueuePolicy)) *leaseholdv1.UpdateQueuePolicyRequest {
		p := &leaseholdv1.QueuePolicy{Queue: "q"}
		f(p)
		return &leaseholdv1.UpdateQueuePolicyRequest{Policy: p}
	}
	for _, c := range []struct {
		field string
		req   *leaseholdv1.UpdateQueuePolicyRequest
	}{
		{"policy.key_concurrency_limit", qp(func(p *leaseholdv1.QueuePolicy) { p.KeyConcurrencyLimit = -1 })},
		{"policy.rate_limit.interval", qp(func(p *leaseholdv1.QueuePolicy) {
			p.RateLimit = &leaseholdv1.RateLimit{Starts: 5, Interval: durationpb.New(10 * time.Millisecond)}
		})},
		{"policy.rate_limit.interval", qp(func(p *leaseholdv1.QueuePolicy) {
			p.RateLimit = &leaseholdv1.RateLimit{Starts: 5, Interval: durationpb.New(-time.Second)}
		})},
		{"policy.rate_limit.starts", qp(func(p *leaseholdv1.QueuePolicy) {
			p.RateLimit = &leaseholdv1.RateLimit{Starts: 2_000_000, Interval: durationpb.New(time.Second)}
		})},
		{"policy.default_dependency", qp(func(p *leaseholdv1.QueuePolicy) { p.DefaultDependency = "not a name" })},
	} {
		_, err := testValidator.UpdateQueuePolicy(c.req)
		var inv *store.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field {
			t.Errorf("%v: got %v, want an InvalidError on %q", c.req, err, c.field)
		}
	}
	cr, err := testValidator.CreateJob(&leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{
		Queue: "q", Kind: "k", ConcurrencyKey: strings.Repeat("x", store.NameMaxLen+1)}})
	if err == nil {
		err = store.ValidateCreate(store.CreateJobsParams{Tenant: "t", Requests: []store.CreateRequest{cr}})
	}
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field != "job.concurrency_key" {
		t.Errorf("a 129-character concurrency key: %v, want an InvalidError on job.concurrency_key", err)
	}
}
