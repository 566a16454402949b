package coordinator

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

var testValidator = validator{payloadMax: 1024, defaultLease: 30 * time.Second}

// checkInvalid asserts the validator contract: an error is always a
// *store.InvalidError naming a field, or a *store.FilterError saying why,
// so toStatus turns it into a BadRequest field violation.
func checkInvalid(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	var fe *store.FilterError
	if errors.As(err, &fe) && fe.Description != "" {
		return
	}
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field == "" || inv.Reason == "" {
		t.Fatalf("validator error %v (%T) is not an InvalidError with a field", err, err)
	}
}

func FuzzValidateCreateJob(f *testing.F) {
	for _, r := range []*leaseholdv1.CreateJobRequest{
		{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Payload: []byte("x")}, RequestId: "r-1"},
		{Job: &leaseholdv1.JobSpec{Queue: "bad queue", Kind: "k"}},
		{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Metadata: map[string]string{"traceparent": "00-abc"}, Priority: 1001}},
		{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", RunAfter: durationpb.New(-time.Second)}},
		{},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req leaseholdv1.CreateJobRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		cr, err := testValidator.CreateJob(&req)
		checkInvalid(t, err)
		if err != nil {
			return
		}
		// The store checks the values, once: it either accepts what the
		// API decoded or names the field, by its proto path.
		err = store.ValidateCreate(store.CreateJobsParams{Tenant: "t", Requests: []store.CreateRequest{cr}})
		checkInvalid(t, err)
		var inv *store.InvalidError
		if errors.As(err, &inv) && !strings.HasPrefix(inv.Field, "job.") && inv.Field != "request_id" {
			t.Fatalf("the store named field %q, not a CreateJobRequest path", inv.Field)
		}
		if len(cr.Spec.Payload) > testValidator.payloadMax {
			t.Fatalf("accepted a %d-byte payload", len(cr.Spec.Payload))
		}
	})
}

func FuzzValidateClaim(f *testing.F) {
	for _, r := range []*leaseholdv1.ClaimRequest{
		{WorkerId: "w-1", Queues: []string{"q"}, MaxJobs: 10, Wait: durationpb.New(time.Second)},
		{WorkerId: "w", Queues: []string{"q"}, MaxJobs: 1001},
		{WorkerId: "w", Queues: []string{"q"}, LeaseDuration: durationpb.New(2 * time.Hour)},
		{WorkerId: "w", Queues: []string{"q"}, LeaseDuration: durationpb.New(0)},
		{WorkerId: "", Queues: nil},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req leaseholdv1.ClaimRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		cr, err := testValidator.Claim(&req)
		checkInvalid(t, err)
		if err != nil {
			return
		}
		if err := store.ValidateClaim(cr.params); err != nil {
			t.Fatalf("accepted claim fails store validation: %v", err)
		}
		if cr.wait < 0 || cr.wait > ClaimWaitMax || cr.params.Max < 1 || cr.params.Max > 1000 {
			t.Fatalf("accepted out-of-bounds claim: %+v", cr)
		}
	})
}

func FuzzValidateRenew(f *testing.F) {
	// Seeds carry their leases' secrets, so the fuzzer starts from tokens
	// that pass the secret check and reaches the validation behind it.
	signed := func(job string, gen int64, worker string) *leaseholdv1.LeaseToken {
		secret := testValidator.leases.sign(store.LeaseToken{JobID: job, Generation: gen, WorkerID: worker})
		return &leaseholdv1.LeaseToken{JobId: job, LeaseGeneration: gen, WorkerId: worker, Secret: secret}
	}
	for _, r := range []*leaseholdv1.RenewRequest{
		{Tokens: []*leaseholdv1.LeaseToken{signed("j", 1, "w")}},
		{Tokens: []*leaseholdv1.LeaseToken{signed("j", 1, "w"), signed("k", 2, "x")}},
		{Tokens: []*leaseholdv1.LeaseToken{{JobId: "j", LeaseGeneration: 1, WorkerId: "w"}}},
		{},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req leaseholdv1.RenewRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		p, err := testValidator.Renew(&req)
		if errors.Is(err, errLeaseSecret) {
			return // a secret that is not its lease's, refused before any validation (AIP-211)
		}
		checkInvalid(t, err)
		if err != nil {
			return
		}
		if err := store.ValidateRenew(p); err != nil {
			t.Fatalf("accepted renew fails store validation: %v", err)
		}
		for _, tok := range p.Tokens {
			if tok.WorkerID != p.Tokens[0].WorkerID {
				t.Fatal("accepted tokens of two workers")
			}
		}
	})
}

func FuzzValidateHello(f *testing.F) {
	for _, r := range []*leaseholdv1.Hello{
		{WorkerId: "w", Queues: []string{"q"}, Capacity: 4, Labels: map[string]string{"host": "a"}},
		{WorkerId: "w", Queues: []string{"q"}, Capacity: 0},
		{WorkerId: "w w", Queues: []string{"q"}, Capacity: 1, LeaseDuration: durationpb.New(time.Millisecond)},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req leaseholdv1.Hello
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		h, err := testValidator.Hello(&req)
		checkInvalid(t, err)
		if err != nil {
			return
		}
		if h.capacity < 1 || h.capacity > CreditsMax || len(h.queues) == 0 || len(h.labels) > LabelsMax {
			t.Fatalf("accepted out-of-bounds hello: %+v", h)
		}
		if h.lease != 0 && (h.lease < store.LeaseDurationMin || h.lease > store.LeaseDurationMax) {
			t.Fatalf("accepted lease %v", h.lease)
		}
	})
}

func FuzzValidateUpdateQueuePolicy(f *testing.F) {
	for _, r := range []*leaseholdv1.UpdateQueuePolicyRequest{
		{Policy: &leaseholdv1.QueuePolicy{Queue: "q"}},
		{Policy: &leaseholdv1.QueuePolicy{Queue: "q", Retry: &leaseholdv1.RetryPolicy{MaxAttempts: 3, JitterFraction: proto.Float64(0)}}},
		{Policy: &leaseholdv1.QueuePolicy{Queue: "q", Retry: &leaseholdv1.RetryPolicy{Multiplier: 0.5}}},
		{},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req leaseholdv1.UpdateQueuePolicyRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		p, err := testValidator.UpdateQueuePolicy(&req)
		checkInvalid(t, err)
		if err == nil {
			if err := p.Validate(); err != nil {
				t.Fatalf("accepted policy fails store validation: %v", err)
			}
		}
	})
}

func TestPolicyJitterUnsetMeansDefaultAndZeroMeansNone(t *testing.T) {
	unset, err := testValidator.UpdateQueuePolicy(&leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{Queue: "q"}})
	if err != nil || unset.Retry.JitterFraction != store.RetryJitterFractionDefault {
		t.Fatalf("unset jitter = %v, %v; want %v", unset.Retry.JitterFraction, err, store.RetryJitterFractionDefault)
	}
	zero, err := testValidator.UpdateQueuePolicy(&leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
		Queue: "q", Retry: &leaseholdv1.RetryPolicy{JitterFraction: proto.Float64(0)},
	}})
	if err != nil || zero.Retry.JitterFraction != 0 {
		t.Fatalf("zero jitter = %v, %v; want 0", zero.Retry.JitterFraction, err)
	}
	if unset.DefaultLeaseDuration != store.LeaseDurationDefault || unset.Retry.MaxAttempts != store.MaxAttemptsDefault {
		t.Fatalf("defaults not applied: %+v", unset)
	}
}

func TestPolicyBackoffDecodesAndRoundTrips(t *testing.T) {
	unset, err := testValidator.UpdateQueuePolicy(&leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{Queue: "q"}})
	if err != nil || unset.Retry.Backoff != store.BackoffExponential {
		t.Fatalf("unset backoff = %q, %v; want exponential", unset.Retry.Backoff, err)
	}
	dec, err := testValidator.UpdateQueuePolicy(&leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
		Queue: "q", Retry: &leaseholdv1.RetryPolicy{Backoff: leaseholdv1.RetryBackoff_RETRY_BACKOFF_DECORRELATED},
	}})
	if err != nil || dec.Retry.Backoff != store.BackoffDecorrelated ||
		toQueuePolicy(&dec).GetRetry().GetBackoff() != leaseholdv1.RetryBackoff_RETRY_BACKOFF_DECORRELATED {
		t.Fatalf("decorrelated = %q, %v", dec.Retry.Backoff, err)
	}
	_, err = testValidator.UpdateQueuePolicy(&leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
		Queue: "q", Retry: &leaseholdv1.RetryPolicy{Backoff: 42},
	}})
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field != "policy.retry.backoff" {
		t.Fatalf("unknown backoff: %v, want a violation of policy.retry.backoff", err)
	}
}

func TestPageSizeFollowsAIP158(t *testing.T) {
	for _, tc := range []struct {
		in      int32
		want    int
		invalid bool
	}{{0, 50, false}, {1, 1, false}, {500, 500, false}, {501, 500, false}, {-1, 0, true}} {
		got, err := pageSize("page_size", tc.in, PageSizeDefault, PageSizeMax)
		if (err != nil) != tc.invalid || got != tc.want {
			t.Errorf("pageSize(%d) = %d, %v; want %d (invalid %v)", tc.in, got, err, tc.want, tc.invalid)
		}
	}
}

func TestBatchFieldNamesPointAtTheItem(t *testing.T) {
	_, err := testValidator.BatchCreateJobs(&leaseholdv1.BatchCreateJobsRequest{Requests: []*leaseholdv1.CreateJobRequest{
		{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"}},
		{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Payload: []byte(strings.Repeat("x", 1025))}},
	}})
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field != "requests[1].job.payload" {
		t.Fatalf("err = %v; want requests[1].job.payload", err)
	}
}

func TestExplicitZeroLeaseDurationIsInvalid(t *testing.T) {
	zero := durationpb.New(0)
	_, err := testValidator.Claim(&leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}, LeaseDuration: zero})
	wantInvalidField(t, err, "lease_duration")
	// Renew and Heartbeat decode theirs with the same rule, after the
	// tokens' secrets (which testValidator cannot verify).
	_, err = testValidator.leaseDuration("lease_duration", zero, testValidator.defaultLease)
	wantInvalidField(t, err, "lease_duration")
	_, err = testValidator.Hello(&leaseholdv1.Hello{WorkerId: "w", Queues: []string{"q"}, Capacity: 1, LeaseDuration: zero})
	wantInvalidField(t, err, "hello.lease_duration")

	// Unset still means the default.
	cr, err := testValidator.Claim(&leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}})
	if err != nil || cr.params.LeaseDuration != 0 {
		t.Fatalf("unset claim lease = %v, %v; want 0 (the queue's default)", cr.params.LeaseDuration, err)
	}
}

func TestJobIDsMustBeUUIDs(t *testing.T) {
	for _, id := range []string{"job-1", "not a uuid", "{" + store.NewID() + "}", "urn:uuid:" + store.NewID(), strings.Repeat("a", 36)} {
		_, err := testValidator.GetJob(&leaseholdv1.GetJobRequest{JobId: id})
		wantInvalidField(t, err, "job_id")
		_, err = testValidator.CancelJob(&leaseholdv1.CancelJobRequest{JobId: id})
		wantInvalidField(t, err, "job_id")
		_, err = testValidator.ReplayDeadJob(&leaseholdv1.ReplayDeadJobRequest{JobId: id})
		wantInvalidField(t, err, "job_id")
	}
	if _, err := testValidator.GetJob(&leaseholdv1.GetJobRequest{JobId: store.NewID()}); err != nil {
		t.Fatalf("a generated id is rejected: %v", err)
	}
}

func wantInvalidField(t *testing.T, err error, field string) {
	t.Helper()
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field != field {
		t.Fatalf("err = %v; want an InvalidError for %s", err, field)
	}
}

func FuzzValidateJobID(f *testing.F) {
	for _, s := range []string{store.NewID(), "job-1", "", "00000000-0000-0000-0000-000000000000", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		err := jobID("job_id", id)
		checkInvalid(t, err)
		if err != nil {
			return
		}
		if len(id) != uuidLen || store.ValidateText("job_id", id, store.NameMaxLen, true) != nil {
			t.Fatalf("accepted job id %q", id)
		}
	})
}

func FuzzValidateListJobs(f *testing.F) {
	for _, r := range []*leaseholdv1.ListJobsRequest{
		{},
		{Queue: "q", PageSize: 501, View: leaseholdv1.JobView_JOB_VIEW_FULL},
		{View: leaseholdv1.JobView(7)},
		{States: []leaseholdv1.JobState{leaseholdv1.JobState_JOB_STATE_DEAD}, PageSize: -1},
		{Filter: `queue = "emails" AND state:(QUEUED, LEASED) AND metadata.customer = "42"`},
		{Filter: `state = SLEEPING`},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	v := testValidator
	v.pageBytes = 1 << 20
	f.Fuzz(func(t *testing.T, b []byte) {
		var req leaseholdv1.ListJobsRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		p, err := v.ListJobs(&req)
		checkInvalid(t, err)
		if err != nil {
			return
		}
		if p.Limit < 1 || p.Limit > PageSizeMax || p.MaxBytes != v.pageBytes {
			t.Fatalf("accepted a page of %d jobs, budget %d", p.Limit, p.MaxBytes)
		}
		want := store.JobViewBasic
		if req.GetView() == leaseholdv1.JobView_JOB_VIEW_FULL {
			want = store.JobViewFull
		}
		if p.View != want {
			t.Fatalf("view %v became %v", req.GetView(), p.View)
		}
	})
}

func TestValidateListFilters(t *testing.T) {
	v := testValidator
	good := `queue:("a", "b") AND state = DEAD AND metadata.customer = "42" AND created >= "2026-12-01T00:00:00Z"`
	p, err := v.ListJobs(&leaseholdv1.ListJobsRequest{Queue: "a", Filter: good})
	if err != nil {
		t.Fatalf("ListJobs with filter %q: %v", good, err)
	}
	if !slices.Equal(p.Filter.Queues, []string{"a", "b"}) || p.Queue != "a" || p.Filter.Metadata["customer"] != "42" ||
		!slices.Equal(p.Filter.States, []store.JobState{store.JobStateDead}) || p.Filter.CreatedAfter.IsZero() {
		t.Errorf("ListJobs filter parsed as %+v", p.Filter)
	}
	d, err := v.ListDeadJobs(&leaseholdv1.ListDeadJobsRequest{Filter: `error_code = TIMEOUT`})
	if err != nil || !slices.Equal(d.Filter.ErrorCodes, []string{"TIMEOUT"}) {
		t.Errorf("ListDeadJobs filter: %+v, %v", d.Filter, err)
	}
	if p, err := v.ListJobs(&leaseholdv1.ListJobsRequest{}); err != nil || !p.Filter.IsZero() {
		t.Errorf("no filter: %+v, %v", p.Filter, err)
	}
	for _, bad := range []string{`state = SLEEPING`, `queue = a OR queue = b`, `colour = red`, `created >= soon`, strings.Repeat("x", store.FilterMaxLen+1)} {
		for name, err := range map[string]error{
			"ListJobs":     second(v.ListJobs(&leaseholdv1.ListJobsRequest{Filter: bad})),
			"ListDeadJobs": second(v.ListDeadJobs(&leaseholdv1.ListDeadJobsRequest{Filter: bad})),
		} {
			var fe *store.FilterError
			if !errors.As(err, &fe) || !errors.Is(err, store.ErrInvalid) {
				t.Errorf("%s with filter %.40q: %v, want a *store.FilterError", name, bad, err)
			}
		}
	}
}

func second[T any](_ T, err error) error { return err }
