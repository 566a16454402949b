package main

import (
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Per-key limits through the CLI: set them on a queue, read them back,
// create a keyed job, clear the rate.
func TestQueueLimitFlags(t *testing.T) {
	t.Parallel()
	h := setup(t)
	var got leaseholdv1.UpdateQueuePolicyResponse
	h.json(&got, "queue", "set-policy", "per-customer", "--key-concurrency-limit", "2",
		"--rate-starts", "50", "--rate-interval", "1s", "--rate-per-key", "--default-dependency", "payments-api")
	p := got.GetPolicy()
	if p.GetKeyConcurrencyLimit() != 2 || p.GetRateLimit().GetStarts() != 50 || p.GetRateLimit().GetInterval().AsDuration().String() != "1s" ||
		!p.GetRateLimit().GetPerKey() || p.GetDefaultDependency() != "payments-api" {
		t.Fatalf("set-policy stored %v", p)
	}
	r := h.ok("queue", "get", "per-customer")
	for _, want := range []string{"2 per key", "50 per 1s per key", "payments-api"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("queue get lacks %q:\n%s", want, r.stdout)
		}
	}
	var created leaseholdv1.CreateJobResponse
	h.json(&created, "job", "create", "--queue", "per-customer", "--kind", "k", "--concurrency-key", "cust-7")
	if j := created.GetJob(); j.GetConcurrencyKey() != "cust-7" || j.GetDependency() != "payments-api" {
		t.Fatalf("created job: key %q dependency %q; want cust-7 and the queue's default dependency", j.GetConcurrencyKey(), j.GetDependency())
	}
	h.fail(exitFail, []string{"INVALID_ARGUMENT", "policy.rate_limit.interval"}, "queue", "set-policy", "per-customer", "--rate-interval", "10ms")
	h.json(&got, "queue", "set-policy", "per-customer", "--rate-starts", "0", "--rate-interval", "0s", "--rate-per-key=false")
	if got.GetPolicy().GetRateLimit() != nil || got.GetPolicy().GetKeyConcurrencyLimit() != 2 {
		t.Fatalf("clearing the rate: %v", got.GetPolicy())
	}
}
