package storetest

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// validationTests cover the store's own bounds: both engines refuse the same
// input with ErrInvalid before writing anything (PostgreSQL would reject a
// NUL byte in text by itself, SQLite would store it).
func validationTests() group {
	return group{name: "Validation", cases: []testCase{
		{"invalid creates are rejected with ErrInvalid and write nothing", testInvalidCreate},
		{"invalid claims and renewals are rejected with ErrInvalid and write nothing", testInvalidClaim},
		{"invalid lease-bound reports are rejected with ErrInvalid and change nothing", testInvalidReports},
		{"invalid queue policies are rejected with ErrInvalid and the stored policy stays", testInvalidPolicy},
	}}
}

func testInvalidCreate(t *testing.T, h Harness) {
	e := setup(t, h)
	long := func(n int) string { return strings.Repeat("q", n) }
	withSpec := func(change func(*store.JobSpec)) store.CreateJobsParams {
		sp := spec("default")
		change(&sp)
		return store.CreateJobsParams{Tenant: tenantA, Now: base, Requests: []store.CreateRequest{{Spec: sp}}}
	}
	manyMeta := map[string]string{}
	for i := range store.MetadataMaxEntries + 1 {
		manyMeta[strings.Repeat("k", 1+i%5)+string(rune('a'+i%26))+string(rune('a'+i/26))] = "v"
	}
	tooMany := make([]store.CreateRequest, store.BatchMaxItems+1)
	for i := range tooMany {
		tooMany[i] = store.CreateRequest{Spec: spec("default")}
	}
	cases := map[string]store.CreateJobsParams{
		"empty queue":                  withSpec(func(s *store.JobSpec) { s.Queue = "" }),
		"over-long queue":              withSpec(func(s *store.JobSpec) { s.Queue = long(store.NameMaxLen + 1) }),
		"NUL in queue":                 withSpec(func(s *store.JobSpec) { s.Queue = "de\x00fault" }),
		"space in queue":               withSpec(func(s *store.JobSpec) { s.Queue = "my queue" }),
		"queue starting with a dot":    withSpec(func(s *store.JobSpec) { s.Queue = ".hidden" }),
		"empty kind":                   withSpec(func(s *store.JobSpec) { s.Kind = "" }),
		"NUL in kind":                  withSpec(func(s *store.JobSpec) { s.Kind = "email\x00" }),
		"over-long kind":               withSpec(func(s *store.JobSpec) { s.Kind = long(store.NameMaxLen + 1) }),
		"NUL in dependency":            withSpec(func(s *store.JobSpec) { s.Dependency = "api\x00" }),
		"oversize payload":             withSpec(func(s *store.JobSpec) { s.Payload = make([]byte, store.PayloadMaxBytes+1) }),
		"NUL in a metadata key":        withSpec(func(s *store.JobSpec) { s.Metadata = map[string]string{"a\x00b": "v"} }),
		"NUL in a metadata value":      withSpec(func(s *store.JobSpec) { s.Metadata = map[string]string{"k": "v\x00"} }),
		"empty metadata key":           withSpec(func(s *store.JobSpec) { s.Metadata = map[string]string{"": "v"} }),
		"invalid UTF-8 metadata":       withSpec(func(s *store.JobSpec) { s.Metadata = map[string]string{"k": "\xff\xfe"} }),
		"over-long metadata value":     withSpec(func(s *store.JobSpec) { s.Metadata = map[string]string{"k": long(store.MetadataValueMaxLen + 1)} }),
		"too many metadata entries":    withSpec(func(s *store.JobSpec) { s.Metadata = manyMeta }),
		"priority above the maximum":   withSpec(func(s *store.JobSpec) { s.Priority = store.PriorityMax + 1 }),
		"priority below the minimum":   withSpec(func(s *store.JobSpec) { s.Priority = store.PriorityMin - 1 }),
		"negative max attempts":        withSpec(func(s *store.JobSpec) { s.MaxAttempts = -1 }),
		"max attempts over the bound":  withSpec(func(s *store.JobSpec) { s.MaxAttempts = store.MaxAttemptsMax + 1 }),
		"negative run_after":           withSpec(func(s *store.JobSpec) { s.RunAfter = -time.Second }),
		"run_after over the bound":     withSpec(func(s *store.JobSpec) { s.RunAfter = store.RunAfterMax + time.Second }),
		"overflowing run_after":        withSpec(func(s *store.JobSpec) { s.RunAfter = math.MaxInt64 }),
		"NUL in the request id":        {Tenant: tenantA, Now: base, Requests: []store.CreateRequest{{Spec: spec("default"), RequestID: "req\x00"}}},
		"over-long request id":         {Tenant: tenantA, Now: base, Requests: []store.CreateRequest{{Spec: spec("default"), RequestID: long(store.RequestIDMaxLen + 1)}}},
		"negative idempotency window":  {Tenant: tenantA, Now: base, IdempotencyWindow: -time.Second, Requests: []store.CreateRequest{{Spec: spec("default"), RequestID: "r"}}},
		"no requests":                  {Tenant: tenantA, Now: base},
		"too many requests":            {Tenant: tenantA, Now: base, Requests: tooMany},
		"empty tenant":                 {Tenant: "", Now: base, Requests: []store.CreateRequest{{Spec: spec("default")}}},
		"NUL in the tenant":            {Tenant: "tenant\x00a", Now: base, Requests: []store.CreateRequest{{Spec: spec("default")}}},
		"an invalid second batch item": {Tenant: tenantA, Now: base, Requests: []store.CreateRequest{{Spec: spec("default")}, {Spec: store.JobSpec{Queue: "default"}}}},
	}
	for name, p := range cases {
		_, err := e.s.CreateJobs(e.ctx, p)
		wantErr(t, err, store.ErrInvalid, "create with "+name)
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 0 {
		t.Fatalf("invalid creates left %d jobs", len(jobs))
	}
	e.claimNothing(tenantA, "default", at(time.Hour), "after invalid creates")
}

func testInvalidClaim(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	claim := func(change func(*store.ClaimParams)) store.ClaimParams {
		p := store.ClaimParams{Tenant: tenantA, Worker: workerA, Queues: []string{"default"}, Max: 1, LeaseDuration: lease, Now: at(time.Second)}
		change(&p)
		return p
	}
	many := make([]string, store.QueuesMax+1)
	for i := range many {
		many[i] = "default"
	}
	cases := map[string]store.ClaimParams{
		"empty worker":                claim(func(p *store.ClaimParams) { p.Worker = "" }),
		"NUL in the worker":           claim(func(p *store.ClaimParams) { p.Worker = "w\x00" }),
		"no queues":                   claim(func(p *store.ClaimParams) { p.Queues = nil }),
		"an invalid queue":            claim(func(p *store.ClaimParams) { p.Queues = []string{"default", "bad queue"} }),
		"NUL in a queue":              claim(func(p *store.ClaimParams) { p.Queues = []string{"default\x00"} }),
		"too many queues":             claim(func(p *store.ClaimParams) { p.Queues = many }),
		"max zero":                    claim(func(p *store.ClaimParams) { p.Max = 0 }),
		"negative max":                claim(func(p *store.ClaimParams) { p.Max = -1 }),
		"max over the bound":          claim(func(p *store.ClaimParams) { p.Max = store.BatchMaxItems + 1 }),
		"negative lease":              claim(func(p *store.ClaimParams) { p.LeaseDuration = -time.Second }),
		"lease under the minimum":     claim(func(p *store.ClaimParams) { p.LeaseDuration = 500 * time.Millisecond }),
		"lease over the maximum":      claim(func(p *store.ClaimParams) { p.LeaseDuration = 2 * time.Hour }),
		"overflowing lease":           claim(func(p *store.ClaimParams) { p.LeaseDuration = math.MaxInt64 }),
		"most negative lease":         claim(func(p *store.ClaimParams) { p.LeaseDuration = math.MinInt64 }),
		"lease of one nanosecond":     claim(func(p *store.ClaimParams) { p.LeaseDuration = time.Nanosecond }),
		"lease just under one second": claim(func(p *store.ClaimParams) { p.LeaseDuration = time.Second - time.Nanosecond }),
	}
	for name, p := range cases {
		got, err := e.s.Claim(e.ctx, p)
		wantErr(t, err, store.ErrInvalid, "claim with "+name)
		if len(got) != 0 {
			t.Errorf("claim with %s returned %d jobs", name, len(got))
		}
	}
	if got := e.get(tenantA, j.ID); got.State != store.JobStateQueued || got.LeaseGeneration != 0 {
		t.Fatalf("invalid claims changed the job: %s, generation %d", got.State, got.LeaseGeneration)
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued)

	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	renew := func(change func(*store.RenewParams)) store.RenewParams {
		p := store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{c.Token}, LeaseDuration: lease, Now: at(2 * time.Second)}
		change(&p)
		return p
	}
	tooMany := make([]store.LeaseToken, store.BatchMaxItems+1)
	for i := range tooMany {
		tooMany[i] = c.Token
	}
	renewCases := map[string]store.RenewParams{
		"no tokens":              renew(func(p *store.RenewParams) { p.Tokens = nil }),
		"too many tokens":        renew(func(p *store.RenewParams) { p.Tokens = tooMany }),
		"negative lease":         renew(func(p *store.RenewParams) { p.LeaseDuration = -time.Second }),
		"lease over the maximum": renew(func(p *store.RenewParams) { p.LeaseDuration = 2 * time.Hour }),
		"overflowing lease":      renew(func(p *store.RenewParams) { p.LeaseDuration = math.MaxInt64 }),
		"generation zero": renew(func(p *store.RenewParams) {
			p.Tokens = []store.LeaseToken{{JobID: c.Token.JobID, Generation: 0, WorkerID: workerA}}
		}),
		"empty job id": renew(func(p *store.RenewParams) {
			p.Tokens = []store.LeaseToken{{JobID: "", Generation: 1, WorkerID: workerA}}
		}),
		"NUL in the worker": renew(func(p *store.RenewParams) {
			p.Tokens = []store.LeaseToken{{JobID: c.Token.JobID, Generation: 1, WorkerID: "w\x00"}}
		}),
	}
	for name, p := range renewCases {
		_, err := e.s.Renew(e.ctx, p)
		wantErr(t, err, store.ErrInvalid, "renew with "+name)
	}
	got := e.get(tenantA, j.ID)
	wantTime(t, "lease expiry after invalid renewals", got.LeaseExpiresAt, at(time.Second+lease))
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased)
}

func testInvalidReports(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	tok := c.Token
	now := at(2 * time.Second)
	oversize := make([]byte, store.PayloadMaxBytes+1)
	nul := func(s string) string { return s + "\x00" }
	calls := map[string]func() error{
		"complete with an oversize result": func() error {
			_, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: tok, Result: oversize, Now: now})
			return err
		},
		"complete with generation zero": func() error {
			_, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: store.LeaseToken{JobID: j.ID, WorkerID: workerA}, Now: now})
			return err
		},
		"retry with NUL in the error message": func() error {
			_, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: tok, Error: store.JobError{Code: "x", Message: nul("boom")}, Now: now})
			return err
		},
		"retry with NUL in the error code": func() error {
			_, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: tok, Error: store.JobError{Code: nul("x")}, Now: now})
			return err
		},
		"retry with an over-long error message": func() error {
			_, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: tok, Error: store.JobError{Message: strings.Repeat("m", store.ErrorMessageMaxLen+1)}, Now: now})
			return err
		},
		"retry with a negative retry-after": func() error {
			_, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: tok, Error: store.JobError{Retryable: true}, RetryAfter: -time.Second, Now: now})
			return err
		},
		"retry with a retry-after over the bound": func() error {
			_, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: tok, Error: store.JobError{Retryable: true}, RetryAfter: store.RetryAfterMax + time.Second, Now: now})
			return err
		},
		"retry with an overflowing retry-after": func() error {
			_, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: tok, Error: store.JobError{Retryable: true}, RetryAfter: math.MaxInt64, Now: now})
			return err
		},
		"cancel with NUL in the reason": func() error {
			_, err := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: tok, Reason: nul("stop"), Now: now})
			return err
		},
		"cancel with an over-long reason": func() error {
			_, err := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: tok, Reason: strings.Repeat("r", store.ReasonMaxLen+1), Now: now})
			return err
		},
		"request cancel with NUL in the reason": func() error {
			_, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: j.ID, Reason: nul("stop"), Now: now})
			return err
		},
		"checkpoint with an empty phase": func() error {
			_, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: tok, Phase: "", Now: now})
			return err
		},
		"checkpoint with NUL in the phase": func() error {
			_, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: tok, Phase: nul("p"), Now: now})
			return err
		},
		"checkpoint with oversize state": func() error {
			_, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: tok, Phase: "p", State: oversize, Now: now})
			return err
		},
		"reserve with an empty effect key": func() error {
			_, _, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: tok, Key: "", Now: now})
			return err
		},
		"reserve with NUL in the effect key": func() error {
			_, _, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: tok, Key: nul("k"), Now: now})
			return err
		},
		"reserve with an over-long effect key": func() error {
			_, _, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: tok, Key: strings.Repeat("k", store.EffectKeyMaxLen+1), Now: now})
			return err
		},
		"record with status reserved": func() error {
			_, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: tok, Key: "k", Status: store.EffectReserved, Now: now})
			return err
		},
		"record with an unknown status": func() error {
			_, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: tok, Key: "k", Status: "done", Now: now})
			return err
		},
		"record with NUL in the provider operation id": func() error {
			_, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: tok, Key: "k", Status: store.EffectSucceeded, ProviderOperationID: nul("op"), Now: now})
			return err
		},
		"record with an oversize result": func() error {
			_, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: tok, Key: "k", Status: store.EffectSucceeded, Result: oversize, Now: now})
			return err
		},
	}
	// The effect key "k" is reserved so that the record cases fail only
	// because of their own input.
	if _, reserved, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: tok, Key: "k", Now: now}); err != nil || !reserved {
		t.Fatalf("reserve effect k: reserved %v, %v", reserved, err)
	}
	before := e.events(tenantA, j.ID)
	for name, call := range calls {
		wantErr(t, call(), store.ErrInvalid, name)
	}
	got := e.get(tenantA, j.ID)
	if got.State != store.JobStateLeased || got.CancelRequested || got.Checkpoint != nil || got.LastError != nil || got.Result != nil {
		t.Fatalf("invalid reports changed the job: %+v", got)
	}
	if after := e.events(tenantA, j.ID); len(after) != len(before) {
		t.Fatalf("invalid reports added events: %v → %v", eventTypes(before), eventTypes(after))
	}
	effs, err := e.s.ListEffects(e.ctx, tenantA, j.ID)
	if err != nil || len(effs) != 1 || effs[0].Status != store.EffectReserved {
		t.Fatalf("invalid reports changed the effect ledger: %+v, %v", effs, err)
	}

	// The dead-letter operations validate their reason too.
	dead := e.deadJob(tenantA, "dlq", at(time.Minute))
	_, _, err = e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: dead.ID, Reason: nul("again"), Now: at(2 * time.Minute)})
	wantErr(t, err, store.ErrInvalid, "replay with NUL in the reason")
	_, err = e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: dead.ID, Reason: nul("give up"), Now: at(2 * time.Minute)})
	wantErr(t, err, store.ErrInvalid, "abandon with NUL in the reason")
	dj, err := e.s.GetDeadJob(e.ctx, tenantA, dead.ID)
	if err != nil || dj.Abandoned || dj.ReplayedAs != "" {
		t.Fatalf("invalid dead-letter calls changed the dead job: %+v, %v", dj, err)
	}
	// The result stored by a valid complete is byte-exact.
	res := bytes.Repeat([]byte{0, 1, 2, 0xff}, 8)
	done, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: tok, Result: res, Now: now})
	if err != nil || !bytes.Equal(done.Result, res) || !bytes.Equal(e.get(tenantA, j.ID).Result, res) {
		t.Fatalf("complete with a binary result: %v (result %v)", err, done)
	}
}

func testInvalidPolicy(t *testing.T, h Harness) {
	e := setup(t, h)
	stored := e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{MaxAttempts: 5}, ConcurrencyLimit: 3})
	policy := func(change func(*store.QueuePolicy)) store.QueuePolicy {
		p := store.QueuePolicy{Queue: "q"}
		change(&p)
		return p
	}
	cases := map[string]store.QueuePolicy{
		"an invalid queue name":       policy(func(p *store.QueuePolicy) { p.Queue = "bad queue" }),
		"an empty queue name":         policy(func(p *store.QueuePolicy) { p.Queue = "" }),
		"max attempts over the bound": policy(func(p *store.QueuePolicy) { p.Retry.MaxAttempts = store.MaxAttemptsMax + 1 }),
		"negative max attempts":       policy(func(p *store.QueuePolicy) { p.Retry.MaxAttempts = -1 }),
		"a negative initial delay":    policy(func(p *store.QueuePolicy) { p.Retry.InitialDelay = -time.Second }),
		"max delay under initial":     policy(func(p *store.QueuePolicy) { p.Retry.InitialDelay = time.Minute; p.Retry.MaxDelay = time.Second }),
		"an overflowing max delay":    policy(func(p *store.QueuePolicy) { p.Retry.MaxDelay = math.MaxInt64 }),
		"a multiplier under one":      policy(func(p *store.QueuePolicy) { p.Retry.Multiplier = 0.5 }),
		"a NaN multiplier":            policy(func(p *store.QueuePolicy) { p.Retry.Multiplier = math.NaN() }),
		"a negative jitter":           policy(func(p *store.QueuePolicy) { p.Retry.JitterFraction = -0.1 }),
		"a jitter over one":           policy(func(p *store.QueuePolicy) { p.Retry.JitterFraction = 1.5 }),
		"a negative retry deadline":   policy(func(p *store.QueuePolicy) { p.Retry.TotalRetryDeadline = -time.Second }),
		"an overflowing deadline":     policy(func(p *store.QueuePolicy) { p.Retry.TotalRetryDeadline = math.MaxInt64 }),
		"NUL in an error code":        policy(func(p *store.QueuePolicy) { p.Retry.NonRetryableErrorCodes = []string{"bad\x00"} }),
		"a lease under the minimum":   policy(func(p *store.QueuePolicy) { p.DefaultLeaseDuration = 500 * time.Millisecond }),
		"a lease over the maximum":    policy(func(p *store.QueuePolicy) { p.DefaultLeaseDuration = 2 * time.Hour }),
		"a negative lease":            policy(func(p *store.QueuePolicy) { p.DefaultLeaseDuration = -time.Second }),
		"a negative concurrency":      policy(func(p *store.QueuePolicy) { p.ConcurrencyLimit = -1 }),
	}
	for name, p := range cases {
		_, err := e.s.UpdateQueuePolicy(e.ctx, tenantA, p)
		wantErr(t, err, store.ErrInvalid, "policy with "+name)
	}
	_, err := e.s.SetQueuePaused(e.ctx, tenantA, "bad queue", true)
	wantErr(t, err, store.ErrInvalid, "pausing an invalid queue name")
	got, err := e.s.GetQueuePolicy(e.ctx, tenantA, "q")
	if err != nil {
		t.Fatal(err)
	}
	if got.Retry.MaxAttempts != stored.Retry.MaxAttempts || got.ConcurrencyLimit != 3 || got.DefaultLeaseDuration != stored.DefaultLeaseDuration {
		t.Fatalf("invalid updates changed the stored policy: %+v, want %+v", got, stored)
	}
	qs, err := e.s.ListQueues(e.ctx, tenantA)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs[0].Policy.Queue != "q" {
		t.Fatalf("invalid updates created queues: %+v", qs)
	}
}
