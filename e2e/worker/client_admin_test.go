package worker_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func TestClientAdmin(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	ctx := context.Background()

	// deadJob creates a job with one attempt and fails it retryably, so it
	// lands in the dead-letter queue.
	deadJob := func(t *testing.T, queue string) *leaseholdv1.Job {
		t.Helper()
		job, _, err := h.client.Create(ctx, queue, "doomed", []byte("evidence"), &worker.CreateOptions{MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		wc := leaseholdv1.NewWorkerServiceClient(h.conn)
		claim, err := wc.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "admin-test", Queues: []string{queue}})
		if err != nil || len(claim.GetJobs()) != 1 {
			t.Fatalf("claim: %v %v", claim, err)
		}
		if _, err := wc.Retry(ctx, &leaseholdv1.RetryRequest{
			Token: claim.GetJobs()[0].GetToken(),
			Error: &leaseholdv1.JobError{Code: "HTTP_503", Message: "down", Retryable: true},
		}); err != nil {
			t.Fatal(err)
		}
		return job
	}

	t.Run("queues are read, changed, paused and resumed", func(t *testing.T) {
		if _, _, err := h.client.Create(ctx, "admin-q", "k", nil, nil); err != nil {
			t.Fatal(err)
		}
		q, err := h.client.GetQueue(ctx, "admin-q")
		if err != nil || q.GetStats().GetQueued() != 1 || q.GetPolicy().GetRetry().GetMaxAttempts() == 0 {
			t.Fatalf("GetQueue: %v %v", q, err)
		}
		policy := q.GetPolicy()
		policy.Retry.MaxAttempts = 3
		stored, err := h.client.UpdateQueuePolicy(ctx, policy)
		if err != nil || stored.GetRetry().GetMaxAttempts() != 3 {
			t.Fatalf("UpdateQueuePolicy: %v %v", stored, err)
		}
		if p, err := h.client.PauseQueue(ctx, "admin-q"); err != nil || !p.GetPaused() {
			t.Fatalf("PauseQueue: %v %v", p, err)
		}
		queues, err := h.client.ListQueues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, s := range queues {
			found = found || (s.GetPolicy().GetQueue() == "admin-q" && s.GetPolicy().GetPaused())
		}
		if !found {
			t.Fatalf("ListQueues does not show admin-q paused: %v", queues)
		}
		if p, err := h.client.ResumeQueue(ctx, "admin-q"); err != nil || p.GetPaused() {
			t.Fatalf("ResumeQueue: %v %v", p, err)
		}
		bad := &leaseholdv1.QueuePolicy{Queue: "admin-q", Retry: &leaseholdv1.RetryPolicy{Multiplier: 0.5}}
		if _, err := h.client.UpdateQueuePolicy(ctx, bad); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("an invalid policy: %v, want INVALID_ARGUMENT", err)
		}
	})

	t.Run("dead jobs are listed, shown, replayed once and abandoned", func(t *testing.T) {
		dead, other := deadJob(t, "admin-dlq"), deadJob(t, "admin-dlq")
		page, err := h.client.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{Queue: "admin-dlq", PageSize: 1})
		if err != nil || len(page.GetDeadJobs()) != 1 || page.GetNextPageToken() == "" {
			t.Fatalf("first page: %v %v", page, err)
		}
		d, err := h.client.GetDeadJob(ctx, dead.GetId())
		if err != nil || len(d.GetAttempts()) != 1 || d.GetJob().GetLastError().GetCode() != "HTTP_503" {
			t.Fatalf("GetDeadJob: %v %v", d, err)
		}
		replay, already, err := h.client.ReplayDeadJob(ctx, dead.GetId(), "fixed")
		if err != nil || already || replay.GetReplayOf() != dead.GetId() {
			t.Fatalf("first replay: %v %v %v", replay, already, err)
		}
		again, already, err := h.client.ReplayDeadJob(ctx, dead.GetId(), "fixed")
		if err != nil || !already || again.GetId() != replay.GetId() {
			t.Fatalf("second replay: %v %v %v, want the first replay", again, already, err)
		}
		abandoned, err := h.client.AbandonDeadJob(ctx, other.GetId(), "gone")
		if err != nil || !abandoned.GetAbandoned() {
			t.Fatalf("AbandonDeadJob: %v %v", abandoned, err)
		}
		if _, _, err := h.client.ReplayDeadJob(ctx, replay.GetId(), ""); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("replaying a job that is not dead: %v, want FAILED_PRECONDITION", err)
		}
	})

	t.Run("breakers and workers", func(t *testing.T) {
		if b, err := h.client.ListBreakers(ctx); err != nil || len(b) != 0 {
			t.Fatalf("ListBreakers: %v %v", b, err)
		}
		if _, err := h.client.ResetBreaker(ctx, "payments", ""); status.Code(err) != codes.NotFound {
			t.Fatalf("ResetBreaker of a dependency with no breaker: %v, want NOT_FOUND", err)
		}
		opened, err := h.client.ForceOpenBreaker(ctx, "payments", time.Minute, "maintenance")
		if err != nil || opened.GetState() != leaseholdv1.BreakerState_BREAKER_STATE_OPEN || opened.GetNextProbeAt() == nil {
			t.Fatalf("ForceOpenBreaker: %v %v", opened, err)
		}
		if b, err := h.client.UpdateBreakerPolicy(ctx, &leaseholdv1.BreakerPolicy{Dependency: "payments", HalfOpenProbes: 2}); err != nil ||
			b.GetPolicy().GetHalfOpenProbes() != 2 || b.GetState() != leaseholdv1.BreakerState_BREAKER_STATE_OPEN {
			t.Fatalf("UpdateBreakerPolicy: %v %v", b, err)
		}
		if b, err := h.client.GetBreaker(ctx, "payments"); err != nil || !b.GetForced() {
			t.Fatalf("GetBreaker: %v %v", b, err)
		}
		if b, err := h.client.ResetBreaker(ctx, "payments", "done"); err != nil || b.GetState() != leaseholdv1.BreakerState_BREAKER_STATE_CLOSED {
			t.Fatalf("ResetBreaker: %v %v", b, err)
		}
		if evs, err := h.client.BreakerEvents(ctx, "payments"); err != nil || len(evs) != 3 {
			t.Fatalf("BreakerEvents: %v %v; want forced_open, policy_updated, reset", evs, err)
		}
		if _, err := h.client.ListWorkers(ctx); err != nil {
			t.Fatalf("ListWorkers: %v", err)
		}
	})
}
