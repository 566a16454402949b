package e2e

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func TestRetryUntilDeadThenReplayThroughAdmin(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		clk := newClock()
		_, c := setup(t, pg, func(cfg *coordinator.Config) { cfg.Now = clk.Now })
		ctx := ctxT(t)

		pol, err := c.admin.UpdateQueuePolicy(ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
			Queue: "flaky",
			Retry: &leaseholdv1.RetryPolicy{
				MaxAttempts: 2, InitialDelay: durationpb.New(time.Second), MaxDelay: durationpb.New(time.Minute),
				JitterFraction: proto.Float64(0),
			},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if pol.GetPolicy().GetRetry().GetMaxAttempts() != 2 || pol.GetPolicy().GetRetry().GetJitterFraction() != 0 ||
			pol.GetPolicy().GetRetry().GetMultiplier() != 2 || pol.GetPolicy().GetDefaultLeaseDuration().AsDuration() != 30*time.Second {
			t.Fatalf("stored policy = %v; want max_attempts 2, no jitter, defaults elsewhere", pol.GetPolicy())
		}

		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("flaky", "charge")})
		if err != nil {
			t.Fatal(err)
		}
		id := created.GetJob().GetId()
		fail := func() *leaseholdv1.Job {
			t.Helper()
			claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"flaky"}})
			if err != nil || len(claim.GetJobs()) != 1 {
				t.Fatalf("claim = %v, %v", claim, err)
			}
			r, err := c.workers.Retry(ctx, &leaseholdv1.RetryRequest{
				Token: claim.GetJobs()[0].GetToken(),
				Error: &leaseholdv1.JobError{Code: "HTTP_503", Message: "upstream unavailable", Retryable: true},
			})
			if err != nil {
				t.Fatal(err)
			}
			return r.GetJob()
		}
		j := fail()
		if j.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED || !j.GetAvailableAt().AsTime().Equal(clk.Now().Add(time.Second)) {
			t.Fatalf("after first failure: state %v available %v (now %v); want QUEUED one second later",
				j.GetState(), j.GetAvailableAt().AsTime(), clk.Now())
		}
		// Backing off: not claimable yet.
		if none, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"flaky"}}); err != nil || len(none.GetJobs()) != 0 {
			t.Fatalf("claim during backoff = %v, %v", none, err)
		}
		clk.Advance(2 * time.Second)
		if j = fail(); j.GetState() != leaseholdv1.JobState_JOB_STATE_DEAD {
			t.Fatalf("after the second failure the job is %v, want DEAD", j.GetState())
		}

		dead, err := c.admin.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{Queue: "flaky"})
		if err != nil || len(dead.GetDeadJobs()) != 1 || dead.GetDeadJobs()[0].GetJob().GetId() != id {
			t.Fatalf("dead jobs = %v, %v", dead, err)
		}
		evidence, err := c.admin.GetDeadJob(ctx, &leaseholdv1.GetDeadJobRequest{JobId: id})
		if err != nil || len(evidence.GetDeadJob().GetAttempts()) != 2 ||
			evidence.GetDeadJob().GetJob().GetLastError().GetCode() != "HTTP_503" {
			t.Fatalf("dead job evidence = %v, %v", evidence, err)
		}

		replay, err := c.admin.ReplayDeadJob(ctx, &leaseholdv1.ReplayDeadJobRequest{JobId: id, Reason: "upstream fixed"})
		if err != nil {
			t.Fatal(err)
		}
		nj := replay.GetJob()
		if nj.GetId() == id || nj.GetReplayOf() != id || nj.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED ||
			nj.GetAttempts() != 0 || replay.GetAlreadyReplayed() {
			t.Fatalf("replay = %v", replay)
		}
		again, err := c.admin.ReplayDeadJob(ctx, &leaseholdv1.ReplayDeadJobRequest{JobId: id})
		if err != nil || !again.GetAlreadyReplayed() || again.GetJob().GetId() != nj.GetId() {
			t.Fatalf("second replay = %v, %v; want the first replay back", again, err)
		}
		_, err = c.admin.AbandonDeadJob(ctx, &leaseholdv1.AbandonDeadJobRequest{JobId: id})
		wantReason(t, err, codes.FailedPrecondition, coordinator.ReasonJobAlreadyReplayed)
		_, err = c.admin.ReplayDeadJob(ctx, &leaseholdv1.ReplayDeadJobRequest{JobId: nj.GetId()})
		wantReason(t, err, codes.FailedPrecondition, coordinator.ReasonJobNotDead)

		// The replayed job runs to completion.
		claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"flaky"}})
		if err != nil || len(claim.GetJobs()) != 1 || claim.GetJobs()[0].GetToken().GetJobId() != nj.GetId() {
			t.Fatalf("claim of the replay = %v, %v", claim, err)
		}
		if _, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claim.GetJobs()[0].GetToken()}); err != nil {
			t.Fatal(err)
		}
		if got := eventTypes(t, c, id); got[len(got)-1] != leaseholdv1.EventType_EVENT_TYPE_REPLAYED {
			t.Fatalf("dead job events = %v; want REPLAYED last", got)
		}
		_, err = c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: nj.GetId()})
		wantReason(t, err, codes.FailedPrecondition, coordinator.ReasonJobAlreadyFinal)
		_, err = c.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: "00000000-0000-7000-8000-000000000000"})
		wantReason(t, err, codes.NotFound, coordinator.ReasonJobNotFound)
	})
}
