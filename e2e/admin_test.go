package e2e

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func TestPausedQueuesHandOutNothingUntilResumed(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		paused, err := c.admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: "exports"})
		if err != nil || !paused.GetPolicy().GetPaused() {
			t.Fatalf("pause = %v, %v", paused, err)
		}
		// Creates still succeed on a paused queue.
		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("exports", "csv")})
		if err != nil {
			t.Fatal(err)
		}
		if none, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"exports"}}); err != nil || len(none.GetJobs()) != 0 {
			t.Fatalf("claim from a paused queue = %v, %v", none, err)
		}
		q, err := c.admin.GetQueue(ctx, &leaseholdv1.GetQueueRequest{Queue: "exports"})
		if err != nil || q.GetQueue().GetStats().GetQueued() != 1 || !q.GetQueue().GetStats().GetPaused() ||
			q.GetQueue().GetPolicy().GetRetry().GetMaxAttempts() != 25 {
			t.Fatalf("GetQueue = %v, %v", q, err)
		}
		list, err := c.admin.ListQueues(ctx, &leaseholdv1.ListQueuesRequest{})
		if err != nil || len(list.GetQueues()) != 1 || list.GetQueues()[0].GetPolicy().GetQueue() != "exports" {
			t.Fatalf("ListQueues = %v, %v", list, err)
		}

		resumed, err := c.admin.ResumeQueue(ctx, &leaseholdv1.ResumeQueueRequest{Queue: "exports"})
		if err != nil || resumed.GetPolicy().GetPaused() {
			t.Fatalf("resume = %v, %v", resumed, err)
		}
		claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"exports"}})
		if err != nil || len(claim.GetJobs()) != 1 || claim.GetJobs()[0].GetToken().GetJobId() != created.GetJob().GetId() {
			t.Fatalf("claim after resume = %v, %v", claim, err)
		}

		breakers, err := c.admin.ListBreakers(ctx, &leaseholdv1.ListBreakersRequest{})
		if err != nil || len(breakers.GetBreakers()) != 0 {
			t.Fatalf("ListBreakers = %v, %v; want an empty list", breakers, err)
		}
		_, err = c.admin.ResetBreaker(ctx, &leaseholdv1.ResetBreakerRequest{Dependency: "payments-api"})
		wantReason(t, err, codes.NotFound, coordinator.ReasonBreakerNotFound)
		_, err = c.admin.UpdateBreakerPolicy(ctx, &leaseholdv1.UpdateBreakerPolicyRequest{Policy: &leaseholdv1.BreakerPolicy{
			Dependency: "payments-api", FailureRateThreshold: 1.5}})
		wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)

		v, err := c.workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
		wantEngine := map[bool]string{false: "sqlite", true: "postgres"}[pg]
		if err != nil || v.GetStoreEngine() != wantEngine || v.GetServerTime() == nil || !slices.Contains(v.GetCapabilities(), "circuit_breakers") || !slices.Contains(v.GetCapabilities(), "key_limits") {
			t.Fatalf("GetVersion = %v, %v; want the circuit_breakers and key_limits capabilities", v, err)
		}
		// With --auth none the caller is the anonymous admin of the tenant.
		for _, c := range []string{"job_filters", "bulk_operations", "queue_counts_max_staleness"} {
			if !slices.Contains(v.GetCapabilities(), c) {
				t.Errorf("GetVersion capabilities %v lack %q", v.GetCapabilities(), c)
			}
		}
		if cl := v.GetCaller(); cl.GetRole() != leaseholdv1.Role_ROLE_ADMIN || cl.GetIdentity() != "anonymous" || cl.GetTenant() == "" {
			t.Fatalf("GetVersion caller = %v; want the anonymous admin", cl)
		}
	})
}
