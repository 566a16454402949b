package main

import (
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// The breaker commands against a real coordinator: open by hand, show,
// change the policy, list the events, reset.
func TestBreakerCommands(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("list says when there are none", func(t *testing.T) {
		r := h.ok("breaker", "list")
		if !strings.Contains(r.stdout, "no circuit breakers") {
			t.Errorf("breaker list: %q", r.stdout)
		}
	})

	t.Run("an unknown breaker is NOT_FOUND, and usage errors are usage errors", func(t *testing.T) {
		h.fail(exitFail, []string{"NOT_FOUND", "BREAKER_NOT_FOUND"}, "breaker", "get", "never-seen")
		h.fail(exitFail, []string{"NOT_FOUND"}, "breaker", "reset", "never-seen")
		h.fail(exitUsage, []string{"missing DEP"}, "breaker", "reset")
		h.fail(exitUsage, []string{"nothing to change"}, "breaker", "set-policy", "payments-api")
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "policy.failure_rate_threshold"}, "breaker", "set-policy", "payments-api", "--threshold", "2")
	})

	t.Run("open, get, set-policy, events, reset", func(t *testing.T) {
		r := h.ok("breaker", "open", "cli-api", "--for", "10m", "--reason", "provider maintenance")
		if !strings.Contains(r.stdout, "breaker cli-api is OPEN until") {
			t.Errorf("breaker open: %q", r.stdout)
		}
		var list leaseholdv1.ListBreakersResponse
		h.json(&list, "breaker", "list")
		if len(list.GetBreakers()) != 1 || list.GetBreakers()[0].GetState() != leaseholdv1.BreakerState_BREAKER_STATE_OPEN {
			t.Fatalf("breaker list after open: %v", &list)
		}
		r = h.ok("breaker", "get", "cli-api")
		for _, want := range []string{"OPEN", "forced", "true", "every code", "20 outcomes"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("breaker get lacks %q:\n%s", want, r.stdout)
			}
		}
		var got leaseholdv1.UpdateBreakerPolicyResponse
		h.json(&got, "breaker", "set-policy", "cli-api", "--codes", "HTTP_503,TIMEOUT", "--window", "1m", "--probes", "3")
		p := got.GetBreaker().GetPolicy()
		if strings.Join(p.GetCountedErrorCodes(), ",") != "HTTP_503,TIMEOUT" || p.GetWindowDuration().AsDuration().String() != "1m0s" ||
			p.GetHalfOpenProbes() != 3 || p.GetWindowSize() != 0 || !got.GetBreaker().GetPolicyStored() {
			t.Fatalf("set-policy stored %v", p)
		}
		// A second change keeps what the first set.
		h.json(&got, "breaker", "set-policy", "cli-api", "--threshold", "0.25")
		if p := got.GetBreaker().GetPolicy(); p.GetHalfOpenProbes() != 3 || p.GetFailureRateThreshold() != 0.25 {
			t.Fatalf("second set-policy lost the first: %v", p)
		}
		r = h.ok("breaker", "reset", "cli-api", "--reason", "provider is back")
		if !strings.Contains(r.stdout, "breaker cli-api is CLOSED") {
			t.Errorf("breaker reset: %q", r.stdout)
		}
		var evs leaseholdv1.ListBreakerEventsResponse
		h.json(&evs, "breaker", "events", "cli-api")
		var types []string
		for _, e := range evs.GetEvents() {
			types = append(types, strings.TrimPrefix(e.GetType().String(), "BREAKER_EVENT_TYPE_"))
		}
		if got := strings.Join(types, " "); got != "FORCED_OPEN POLICY_UPDATED POLICY_UPDATED RESET" {
			t.Fatalf("breaker events: %s", got)
		}
		r = h.ok("breaker", "events", "cli-api")
		if !strings.Contains(r.stdout, "provider maintenance") || !strings.Contains(r.stdout, "provider is back") {
			t.Errorf("breaker events table lacks the reasons:\n%s", r.stdout)
		}
	})
}
