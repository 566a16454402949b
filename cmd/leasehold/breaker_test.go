package main

import (
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Circuit breakers are not built yet: the coordinator lists none and
// refuses a reset with UNIMPLEMENTED. The CLI must pass that on honestly.
func TestBreakerCommands(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("list prints the server's empty answer", func(t *testing.T) {
		r := h.ok("breaker", "list")
		if !strings.Contains(r.stdout, "no circuit breakers") {
			t.Errorf("breaker list: %q", r.stdout)
		}
		var resp leaseholdv1.ListBreakersResponse
		h.json(&resp, "breaker", "list")
		if len(resp.GetBreakers()) != 0 {
			t.Errorf("breaker list --output json: %v", &resp)
		}
	})

	t.Run("reset exits 1 with UNIMPLEMENTED and says why", func(t *testing.T) {
		h.fail(exitFail, []string{"UNIMPLEMENTED", "not available in this version"}, "breaker", "reset", "payments-api")
		h.fail(exitUsage, []string{"missing DEP"}, "breaker", "reset")
	})
}
