package storetest

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// limitTests cover the per-key concurrency limit and the start-rate
// limits, fleet-wide.
func limitTests() group {
	return group{name: "Limits", cases: []testCase{
		{"a job keeps its concurrency key, and a bad key is rejected", testConcurrencyKeyStored},
		{"a concurrency key never has more than its limit leased, and expiry or completion frees room", testKeyLimit},
		{"two coordinators claiming at once never exceed a key's limit", testKeyLimitConcurrent},
		{"a queue starts at most its rate per interval, across coordinators", testRateLimit},
		{"a per-key rate counts each concurrency key on its own", testRateLimitPerKey},
		{"limit policies reject bad values", testLimitValidation},
	}}
}

// keyed creates n jobs of queue with concurrency key (empty: none).
func (e *env) keyed(tenant, queue, key string, n int, now time.Time) []*store.Job {
	e.t.Helper()
	var out []*store.Job
	for range n {
		sp := spec(queue)
		sp.ConcurrencyKey = key
		out = append(out, e.mustCreate(tenant, sp, now))
	}
	return out
}

// byKey counts claimed jobs by concurrency key.
func byKey(cs []store.ClaimedJob) map[string]int {
	out := map[string]int{}
	for _, c := range cs {
		out[c.Job.ConcurrencyKey]++
	}
	return out
}

func testConcurrencyKeyStored(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.keyed(tenantA, "keys", "customer-42", 1, base)[0]
	if j.ConcurrencyKey != "customer-42" || e.get(tenantA, j.ID).ConcurrencyKey != "customer-42" {
		t.Fatalf("concurrency key reads back as %q / %q", j.ConcurrencyKey, e.get(tenantA, j.ID).ConcurrencyKey)
	}
	c := e.mustClaim(tenantA, workerA, "keys", j.ID, at(time.Second))
	if c.Job.ConcurrencyKey != "customer-42" {
		t.Fatalf("claimed job has concurrency key %q", c.Job.ConcurrencyKey)
	}
	sp := spec("keys")
	sp.ConcurrencyKey = strings.Repeat("k", store.NameMaxLen+1)
	_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{{Spec: sp}}, Now: base})
	wantErr(t, err, store.ErrInvalid, "a concurrency key longer than 128 characters")
}

func testKeyLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	pol := store.DefaultQueuePolicy("per-customer")
	pol.KeyConcurrencyLimit = 2
	e.setPolicy(tenantA, pol)
	e.keyed(tenantA, "per-customer", "cust-1", 4, base)
	e.keyed(tenantA, "per-customer", "cust-2", 3, base)
	e.keyed(tenantA, "per-customer", "", 3, base)
	got := e.claim(tenantA, workerA, "per-customer", 20, lease, at(time.Second))
	if n := byKey(got); n["cust-1"] != 2 || n["cust-2"] != 2 || n[""] != 3 {
		t.Fatalf("first claim took %v, want 2 of each key and all 3 jobs with no key", n)
	}
	e.claimNothing(tenantA, "per-customer", at(2*time.Second), "both keys are at their limit")
	var done store.ClaimedJob
	for _, c := range got {
		if c.Job.ConcurrencyKey == "cust-1" {
			done = c
			break
		}
	}
	e.complete(tenantA, done.Token, at(3*time.Second))
	more := e.claim(tenantA, workerB, "per-customer", 20, lease, at(4*time.Second))
	if n := byKey(more); len(more) != 1 || n["cust-1"] != 1 {
		t.Fatalf("after one cust-1 job completed the claim took %v, want exactly one cust-1 job", n)
	}
	// Expired leases do not count: the holders of cust-2 are gone.
	late := e.claim(tenantA, workerC, "per-customer", 20, lease, at(time.Second+lease+time.Second))
	if n := byKey(late); n["cust-2"] != 1 {
		t.Fatalf("after cust-2's leases expired the claim took %v, want the one cust-2 job left", n)
	}
}

func testKeyLimitConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	pol := store.DefaultQueuePolicy("hot")
	pol.KeyConcurrencyLimit = 3
	e.setPolicy(tenantA, pol)
	e.keyed(tenantA, "hot", "big-customer", 30, base)
	e.keyed(tenantA, "hot", "small-customer", 2, base)
	s2 := e.shared()
	for round := range 3 {
		now := at(time.Duration(round+1) * time.Minute)
		var (
			wg    sync.WaitGroup
			start = make(chan struct{})
			mu    sync.Mutex
			all   []store.ClaimedJob
			errs  []error
		)
		for i := range 8 {
			s := e.s
			if i%2 == 1 {
				s = s2
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				got, err := s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerB, Queues: []string{"hot"}, Max: 5, Now: now})
				mu.Lock()
				defer mu.Unlock()
				all, errs = append(all, got...), append(errs, err)
			}()
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatalf("round %d: claim: %v", round, err)
			}
		}
		n := byKey(all)
		if n["big-customer"] != 3 {
			t.Fatalf("round %d: eight concurrent claims on two coordinators leased %d big-customer jobs, want exactly its limit of 3",
				round, n["big-customer"])
		}
		for _, c := range all {
			if c.Job.ConcurrencyKey == "big-customer" {
				e.complete(tenantA, c.Token, now.Add(time.Second))
			}
		}
	}
}

func testRateLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	pol := store.DefaultQueuePolicy("metered")
	pol.RateLimit = store.RateLimit{Starts: 5, Interval: 10 * time.Second}
	e.setPolicy(tenantA, pol)
	e.keyed(tenantA, "metered", "", 40, base)
	s2 := e.shared()
	// The window of base: both coordinators together start exactly 5.
	var (
		wg    sync.WaitGroup
		start = make(chan struct{})
		mu    sync.Mutex
		total int
	)
	for i := range 4 {
		s := e.s
		if i%2 == 1 {
			s = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			got, err := s.Claim(e.ctx, store.ClaimParams{Tenant: tenantA, Worker: workerB, Queues: []string{"metered"}, Max: 10, Now: base})
			if err != nil {
				t.Errorf("claim: %v", err)
			}
			mu.Lock()
			total += len(got)
			mu.Unlock()
		}()
	}
	close(start)
	wg.Wait()
	if total != 5 {
		t.Fatalf("four concurrent claims on two coordinators started %d jobs in one window, want the rate of 5", total)
	}
	e.claimNothing(tenantA, "metered", at(9*time.Second), "the window's 5 starts are spent")
	// Over 0s..35s (four windows) claims every second start at most 4 × 5,
	// within one interval's tolerance of 5 per 10s.
	started := total
	for s := 10; s <= 35; s++ {
		started += len(e.claim(tenantA, workerA, "metered", 3, lease, at(time.Duration(s)*time.Second)))
	}
	if started != 20 {
		t.Fatalf("claims every second over four 10s windows started %d jobs, want 20", started)
	}
}

func testRateLimitPerKey(t *testing.T, h Harness) {
	e := setup(t, h)
	pol := store.DefaultQueuePolicy("per-key-rate")
	pol.RateLimit = store.RateLimit{Starts: 2, Interval: time.Minute, PerKey: true}
	e.setPolicy(tenantA, pol)
	e.keyed(tenantA, "per-key-rate", "a", 5, base)
	e.keyed(tenantA, "per-key-rate", "b", 5, base)
	e.keyed(tenantA, "per-key-rate", "", 2, base)
	got := e.claim(tenantA, workerA, "per-key-rate", 50, lease, base)
	if n := byKey(got); n["a"] != 2 || n["b"] != 2 || n[""] != 2 {
		t.Fatalf("first claim took %v, want 2 per key and both jobs with no key", n)
	}
	// Completing does not give starts back: a rate is not a concurrency.
	for _, c := range got {
		e.complete(tenantA, c.Token, at(time.Second))
	}
	e.claimNothing(tenantA, "per-key-rate", at(59*time.Second), "each key spent its 2 starts this minute")
	if n := byKey(e.claim(tenantA, workerA, "per-key-rate", 50, lease, at(time.Minute))); n["a"] != 2 || n["b"] != 2 {
		t.Fatalf("the next minute's claim took %v, want 2 per key again", n)
	}
}

func testLimitValidation(t *testing.T, h Harness) {
	e := setup(t, h)
	for _, c := range []struct {
		field string
		set   func(p *store.QueuePolicy)
	}{
		{"policy.key_concurrency_limit", func(p *store.QueuePolicy) { p.KeyConcurrencyLimit = -1 }},
		{"policy.rate_limit.starts", func(p *store.QueuePolicy) { p.RateLimit = store.RateLimit{Starts: -1} }},
		{"policy.rate_limit.starts", func(p *store.QueuePolicy) { p.RateLimit = store.RateLimit{Interval: time.Second} }},
		{"policy.rate_limit.interval", func(p *store.QueuePolicy) { p.RateLimit = store.RateLimit{Starts: 5} }},
		{"policy.rate_limit.interval", func(p *store.QueuePolicy) {
			p.RateLimit = store.RateLimit{Starts: 5, Interval: 25 * time.Hour}
		}},
	} {
		p := store.DefaultQueuePolicy("bad-limits")
		c.set(&p)
		_, err := e.s.UpdateQueuePolicy(e.ctx, tenantA, p)
		wantErr(t, err, store.ErrInvalid, c.field)
		var inv *store.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field {
			t.Fatalf("got %v, want an error on %s", err, c.field)
		}
	}
	p := store.DefaultQueuePolicy("good-limits")
	p.KeyConcurrencyLimit, p.RateLimit = 7, store.RateLimit{Starts: 50, Interval: time.Second, PerKey: true}
	got := e.setPolicy(tenantA, p)
	if got.KeyConcurrencyLimit != 7 || got.RateLimit != p.RateLimit {
		t.Fatalf("stored limits %d %+v, want %d %+v", got.KeyConcurrencyLimit, got.RateLimit, 7, p.RateLimit)
	}
	read, err := e.s.GetQueuePolicy(e.ctx, tenantA, "good-limits")
	if err != nil || read.KeyConcurrencyLimit != 7 || read.RateLimit != p.RateLimit {
		t.Fatalf("read back %+v, %v", read, err)
	}
}
