package store_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func isInvalid(err error) bool {
	var inv *store.InvalidError
	return errors.Is(err, store.ErrInvalid) && errors.As(err, &inv) && inv.Field != "" && inv.Reason != ""
}

func validSpec() store.JobSpec {
	return store.JobSpec{Queue: "emails", Kind: "email.send", Payload: []byte(`{}`), Metadata: map[string]string{"k": "v"}}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	good := []string{"a", "Z", "0", "emails", "billing.v2", "a_b-c:d", strings.Repeat("x", store.NameMaxLen)}
	bad := []string{"", " ", "-a", ".a", "_a", ":a", "a b", "a/b", "a\x00", "é", "a\n", strings.Repeat("x", store.NameMaxLen+1)}
	for _, s := range good {
		if !store.ValidName(s) {
			t.Errorf("ValidName(%q) = false, want true", s)
		}
	}
	for _, s := range bad {
		if store.ValidName(s) {
			t.Errorf("ValidName(%q) = true, want false", s)
		}
	}
}

func TestValidWorkerID(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"w", "host-1/pid@42", "a.b_c:d", "/leading-slash"} {
		if !store.ValidWorkerID(s) {
			t.Errorf("ValidWorkerID(%q) = false", s)
		}
	}
	for _, s := range []string{"", "a b", "w\x00", "ü", strings.Repeat("w", store.NameMaxLen+1)} {
		if store.ValidWorkerID(s) {
			t.Errorf("ValidWorkerID(%q) = true", s)
		}
	}
}

func TestValidateSpec(t *testing.T) {
	t.Parallel()
	if err := store.ValidateSpec("spec", validSpec()); err != nil {
		t.Fatalf("a valid spec: %v", err)
	}
	edge := validSpec()
	edge.Payload = make([]byte, store.PayloadMaxBytes)
	edge.Priority = store.PriorityMax
	edge.RunAfter = store.RunAfterMax
	edge.MaxAttempts = store.MaxAttemptsMax
	edge.Metadata = map[string]string{strings.Repeat("k", store.MetadataKeyMaxLen): strings.Repeat("v", store.MetadataValueMaxLen), "empty": ""}
	if err := store.ValidateSpec("spec", edge); err != nil {
		t.Fatalf("a spec at every bound: %v", err)
	}
	cases := map[string]struct {
		change func(*store.JobSpec)
		field  string
	}{
		"empty queue":        {func(s *store.JobSpec) { s.Queue = "" }, "spec.queue"},
		"bad kind":           {func(s *store.JobSpec) { s.Kind = "a b" }, "spec.kind"},
		"bad dependency":     {func(s *store.JobSpec) { s.Dependency = "-x" }, "spec.dependency"},
		"oversize payload":   {func(s *store.JobSpec) { s.Payload = make([]byte, store.PayloadMaxBytes+1) }, "spec.payload"},
		"NUL metadata key":   {func(s *store.JobSpec) { s.Metadata = map[string]string{"\x00": "v"} }, "spec.metadata key"},
		"NUL metadata value": {func(s *store.JobSpec) { s.Metadata = map[string]string{"k": "\x00"} }, "spec.metadata[k]"},
		"bad UTF-8 value":    {func(s *store.JobSpec) { s.Metadata = map[string]string{"k": "\xc3"} }, "spec.metadata[k]"},
		"long metadata key": {func(s *store.JobSpec) {
			s.Metadata = map[string]string{strings.Repeat("k", store.MetadataKeyMaxLen+1): ""}
		}, "spec.metadata key"},
		"priority high":      {func(s *store.JobSpec) { s.Priority = store.PriorityMax + 1 }, "spec.priority"},
		"priority low":       {func(s *store.JobSpec) { s.Priority = store.PriorityMin - 1 }, "spec.priority"},
		"negative run_after": {func(s *store.JobSpec) { s.RunAfter = -1 }, "spec.run_after"},
		"huge run_after":     {func(s *store.JobSpec) { s.RunAfter = math.MaxInt64 }, "spec.run_after"},
		"negative attempts":  {func(s *store.JobSpec) { s.MaxAttempts = -1 }, "spec.max_attempts"},
		"too many attempts":  {func(s *store.JobSpec) { s.MaxAttempts = store.MaxAttemptsMax + 1 }, "spec.max_attempts"},
	}
	for name, tc := range cases {
		s := validSpec()
		tc.change(&s)
		err := store.ValidateSpec("spec", s)
		var inv *store.InvalidError
		if !isInvalid(err) || !errors.As(err, &inv) || inv.Field != tc.field {
			t.Errorf("%s: ValidateSpec = %v, want ErrInvalid on field %q", name, err, tc.field)
		}
	}
	many := map[string]string{}
	for i := range store.MetadataMaxEntries + 1 {
		many[strings.Repeat("k", i+1)] = ""
	}
	s := validSpec()
	s.Metadata = many
	if err := store.ValidateSpec("spec", s); !isInvalid(err) {
		t.Errorf("too many metadata entries: %v", err)
	}
}

func TestValidateCreate(t *testing.T) {
	t.Parallel()
	one := []store.CreateRequest{{Spec: validSpec(), RequestID: "r"}}
	if err := store.ValidateCreate(store.CreateJobsParams{Tenant: "t", Requests: one}); err != nil {
		t.Fatalf("a valid create: %v", err)
	}
	batch := []store.CreateRequest{{Spec: validSpec()}, {Spec: validSpec()}, {Spec: store.JobSpec{Queue: "q"}}}
	err := store.ValidateCreate(store.CreateJobsParams{Tenant: "t", Requests: batch})
	var inv *store.InvalidError
	if !errors.As(err, &inv) || inv.Field != "requests[2].job.kind" {
		t.Fatalf("a batch with a bad third item: %v, want the field requests[2].job.kind", err)
	}
	cases := map[string]store.CreateJobsParams{
		"empty tenant":      {Tenant: "", Requests: one},
		"NUL tenant":        {Tenant: "t\x00", Requests: one},
		"no requests":       {Tenant: "t"},
		"too many requests": {Tenant: "t", Requests: make([]store.CreateRequest, store.BatchMaxItems+1)},
		"negative window":   {Tenant: "t", Requests: one, IdempotencyWindow: -time.Second},
		"NUL request id":    {Tenant: "t", Requests: []store.CreateRequest{{Spec: validSpec(), RequestID: "r\x00"}}},
		"long request id":   {Tenant: "t", Requests: []store.CreateRequest{{Spec: validSpec(), RequestID: strings.Repeat("r", store.RequestIDMaxLen+1)}}},
	}
	for name, p := range cases {
		if err := store.ValidateCreate(p); !isInvalid(err) {
			t.Errorf("%s: ValidateCreate = %v, want ErrInvalid", name, err)
		}
	}
}

func TestValidateClaimAndRenew(t *testing.T) {
	t.Parallel()
	ok := store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"q"}, Max: 1}
	if err := store.ValidateClaim(ok); err != nil {
		t.Fatalf("a valid claim with the default lease: %v", err)
	}
	for name, change := range map[string]func(*store.ClaimParams){
		"worker":     func(p *store.ClaimParams) { p.Worker = "" },
		"no queues":  func(p *store.ClaimParams) { p.Queues = nil },
		"bad queue":  func(p *store.ClaimParams) { p.Queues = []string{"q", ""} },
		"max 0":      func(p *store.ClaimParams) { p.Max = 0 },
		"max high":   func(p *store.ClaimParams) { p.Max = store.BatchMaxItems + 1 },
		"short":      func(p *store.ClaimParams) { p.LeaseDuration = store.LeaseDurationMin - 1 },
		"long":       func(p *store.ClaimParams) { p.LeaseDuration = store.LeaseDurationMax + 1 },
		"negative":   func(p *store.ClaimParams) { p.LeaseDuration = -time.Second },
		"many queue": func(p *store.ClaimParams) { p.Queues = make([]string, store.QueuesMax+1) },
	} {
		p := ok
		change(&p)
		if err := store.ValidateClaim(p); !isInvalid(err) {
			t.Errorf("claim with bad %s: %v", name, err)
		}
	}
	tok := store.LeaseToken{JobID: "j", Generation: 1, WorkerID: "w"}
	if err := store.ValidateRenew(store.RenewParams{Tokens: []store.LeaseToken{tok}, LeaseDuration: store.LeaseDurationMax}); err != nil {
		t.Fatalf("a valid renew: %v", err)
	}
	for name, p := range map[string]store.RenewParams{
		"no tokens":      {},
		"generation 0":   {Tokens: []store.LeaseToken{{JobID: "j", WorkerID: "w"}}},
		"negative gen":   {Tokens: []store.LeaseToken{{JobID: "j", Generation: -1, WorkerID: "w"}}},
		"empty job":      {Tokens: []store.LeaseToken{{Generation: 1, WorkerID: "w"}}},
		"bad worker":     {Tokens: []store.LeaseToken{{JobID: "j", Generation: 1, WorkerID: "w w"}}},
		"lease too long": {Tokens: []store.LeaseToken{tok}, LeaseDuration: store.LeaseDurationMax + 1},
	} {
		if err := store.ValidateRenew(p); !isInvalid(err) {
			t.Errorf("renew with %s: %v", name, err)
		}
	}
}

func TestValidateSmallFields(t *testing.T) {
	t.Parallel()
	checks := []struct {
		name string
		err  error
		ok   bool
	}{
		{"job error", store.ValidateJobError(store.JobError{Code: "c", Message: "m"}), true},
		{"job error with NUL message", store.ValidateJobError(store.JobError{Message: "m\x00"}), false},
		{"job error with long code", store.ValidateJobError(store.JobError{Code: strings.Repeat("c", store.ErrorCodeMaxLen+1)}), false},
		{"retry-after zero", store.ValidateRetryAfter(0), true},
		{"retry-after max", store.ValidateRetryAfter(store.RetryAfterMax), true},
		{"retry-after over", store.ValidateRetryAfter(store.RetryAfterMax + 1), false},
		{"retry-after negative", store.ValidateRetryAfter(-1), false},
		{"empty reason", store.ValidateReason(""), true},
		{"NUL reason", store.ValidateReason("\x00"), false},
		{"long reason", store.ValidateReason(strings.Repeat("r", store.ReasonMaxLen+1)), false},
		{"blob at the bound", store.ValidateBlob("result", make([]byte, store.PayloadMaxBytes)), true},
		{"blob over the bound", store.ValidateBlob("result", make([]byte, store.PayloadMaxBytes+1)), false},
		{"phase", store.ValidatePhase("fetch"), true},
		{"empty phase", store.ValidatePhase(""), false},
		{"effect key", store.ValidateEffectKey("charge:1"), true},
		{"empty effect key", store.ValidateEffectKey(""), false},
		{"long effect key", store.ValidateEffectKey(strings.Repeat("k", store.EffectKeyMaxLen+1)), false},
		{"provider op id empty", store.ValidateProviderOperationID(""), true},
		{"provider op id NUL", store.ValidateProviderOperationID("op\x00"), false},
		{"optional lease zero", store.ValidateLeaseDuration("lease", 0, true), true},
		{"required lease zero", store.ValidateLeaseDuration("lease", 0, false), false},
		{"text required", store.ValidateText("tenant", "", 10, true), false},
		{"text too long", store.ValidateText("tenant", "abcdefghijk", 10, false), false},
		{"text invalid UTF-8", store.ValidateText("tenant", "\xff", 10, false), false},
	}
	for _, c := range checks {
		if c.ok && c.err != nil {
			t.Errorf("%s: %v, want nil", c.name, c.err)
		}
		if !c.ok && !isInvalid(c.err) {
			t.Errorf("%s: %v, want ErrInvalid", c.name, c.err)
		}
	}
}

func TestInvalidErrorMatchesOnlyErrInvalid(t *testing.T) {
	t.Parallel()
	err := store.Invalid("spec.queue", "is required")
	if !errors.Is(err, store.ErrInvalid) || errors.Is(err, store.ErrNotFound) {
		t.Fatalf("errors.Is on %v: ErrInvalid %v, ErrNotFound %v", err, errors.Is(err, store.ErrInvalid), errors.Is(err, store.ErrNotFound))
	}
	if got := err.Error(); got != "spec.queue: is required" {
		t.Fatalf("Error() = %q", got)
	}
	wrapped := errors.Join(errors.New("ctx"), err)
	if !errors.Is(wrapped, store.ErrInvalid) {
		t.Fatal("a wrapped InvalidError no longer matches ErrInvalid")
	}
}
