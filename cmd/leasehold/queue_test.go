package main

import (
	"slices"
	"strings"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func TestQueueCommands(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.createJob("--queue", "orders", "--kind", "ship")

	t.Run("get shows the defaults of a queue without a policy", func(t *testing.T) {
		var resp leaseholdv1.GetQueueResponse
		h.json(&resp, "queue", "get", "orders")
		p := resp.GetQueue().GetPolicy()
		if p.GetQueue() != "orders" || p.GetRetry().GetMaxAttempts() != 25 || p.GetRetry().GetMultiplier() != 2 ||
			resp.GetQueue().GetStats().GetQueued() != 1 {
			t.Fatalf("queue get orders: %v", &resp)
		}
		r := h.ok("queue", "get", "orders")
		for _, want := range []string{"Max attempts:", "25", "Multiplier:", "Queued:", "Concurrency limit:", "unlimited"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("queue get lacks %q:\n%s", want, r.stdout)
			}
		}
	})

	t.Run("set-policy changes only the flags given", func(t *testing.T) {
		var resp leaseholdv1.UpdateQueuePolicyResponse
		h.json(&resp, "queue", "set-policy", "orders", "--max-attempts", "3", "--initial-delay", "250ms",
			"--non-retryable-codes", "HTTP_400, HTTP_404", "--jitter", "0", "--concurrency-limit", "5")
		r := resp.GetPolicy().GetRetry()
		if r.GetMaxAttempts() != 3 || r.GetInitialDelay().AsDuration() != 250*time.Millisecond || r.JitterFraction == nil ||
			r.GetJitterFraction() != 0 || !slices.Equal(r.GetNonRetryableErrorCodes(), []string{"HTTP_400", "HTTP_404"}) ||
			resp.GetPolicy().GetConcurrencyLimit() != 5 || r.GetMultiplier() != 2 {
			t.Fatalf("first set-policy: %v", &resp)
		}
		// A second change keeps everything the first one set.
		h.json(&resp, "queue", "set-policy", "orders", "--multiplier", "3", "--lease-duration", "2m", "--total-retry-deadline", "1h")
		var got leaseholdv1.GetQueueResponse
		h.json(&got, "queue", "get", "orders")
		p := got.GetQueue().GetPolicy()
		r = p.GetRetry()
		if r.GetMaxAttempts() != 3 || r.GetInitialDelay().AsDuration() != 250*time.Millisecond || r.GetMultiplier() != 3 ||
			r.GetTotalRetryDeadline().AsDuration() != time.Hour || p.GetDefaultLeaseDuration().AsDuration() != 2*time.Minute ||
			len(r.GetNonRetryableErrorCodes()) != 2 || p.GetConcurrencyLimit() != 5 {
			t.Fatalf("after the second set-policy: %v", p)
		}
		// An empty list clears the codes.
		h.json(&resp, "queue", "set-policy", "orders", "--non-retryable-codes", "")
		if codes := resp.GetPolicy().GetRetry().GetNonRetryableErrorCodes(); len(codes) != 0 || resp.GetPolicy().GetRetry().GetMaxAttempts() != 3 {
			t.Errorf("clearing codes: %v", resp.GetPolicy())
		}
		out := h.ok("queue", "set-policy", "orders", "--retryable-codes", "HTTP_503")
		if !strings.Contains(out.stdout, "Retryable codes:") || !strings.Contains(out.stdout, "HTTP_503") {
			t.Errorf("set-policy table output:\n%s", out.stdout)
		}
	})

	t.Run("set-policy errors", func(t *testing.T) {
		h.fail(exitUsage, []string{"nothing to change"}, "queue", "set-policy", "orders")
		h.fail(exitUsage, []string{"missing Q"}, "queue", "set-policy", "--max-attempts", "2")
		h.fail(exitUsage, []string{"invalid value"}, "queue", "set-policy", "orders", "--initial-delay", "soon")
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "multiplier"}, "queue", "set-policy", "orders", "--multiplier", "0.5")
	})

	t.Run("pause and resume", func(t *testing.T) {
		var paused leaseholdv1.PauseQueueResponse
		h.json(&paused, "queue", "pause", "orders")
		if !paused.GetPolicy().GetPaused() || paused.GetPolicy().GetRetry().GetMaxAttempts() != 3 {
			t.Fatalf("pause: %v", &paused)
		}
		var list leaseholdv1.ListQueuesResponse
		h.json(&list, "queue", "list")
		idx := slices.IndexFunc(list.GetQueues(), func(q *leaseholdv1.QueueSummary) bool { return q.GetPolicy().GetQueue() == "orders" })
		if idx < 0 || !list.GetQueues()[idx].GetPolicy().GetPaused() {
			t.Fatalf("queue list after pause: %v", &list)
		}
		r := h.ok("queue", "list")
		if !strings.Contains(r.stdout, "PAUSED") || !strings.Contains(r.stdout, "orders") || !strings.Contains(r.stdout, "yes") {
			t.Errorf("queue list table:\n%s", r.stdout)
		}
		// A paused queue hands out nothing.
		claim, err := leaseholdv1.NewWorkerServiceClient(h.conn).Claim(t.Context(), &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"orders"}})
		if err != nil || len(claim.GetJobs()) != 0 {
			t.Fatalf("claim from a paused queue: %v %v", claim, err)
		}
		r = h.ok("queue", "resume", "orders")
		if !strings.Contains(r.stdout, "queue orders resumed") {
			t.Errorf("resume output: %s", r.stdout)
		}
		h.json(&list, "queue", "list")
		idx = slices.IndexFunc(list.GetQueues(), func(q *leaseholdv1.QueueSummary) bool { return q.GetPolicy().GetQueue() == "orders" })
		if idx < 0 || list.GetQueues()[idx].GetPolicy().GetPaused() || list.GetQueues()[idx].GetStats().GetQueued() != 1 {
			t.Errorf("queue list after resume: %v", &list)
		}
		h.fail(exitUsage, []string{"missing Q"}, "queue", "pause")
	})
}
