package e2e

import (
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func TestCheckpointsAndEffectsCarryOverToTheNextAttempt(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("pay", "order-7")}); err != nil {
			t.Fatal(err)
		}
		claim := func() *leaseholdv1.LeasedJob {
			t.Helper()
			resp, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "payer", Queues: []string{"pay"}})
			if err != nil || len(resp.GetJobs()) != 1 {
				t.Fatalf("claim = %v, %v", resp, err)
			}
			return resp.GetJobs()[0]
		}
		first := claim()
		tok := first.GetToken()
		cp, err := c.workers.SaveCheckpoint(ctx, &leaseholdv1.SaveCheckpointRequest{Token: tok, Phase: "charged", State: []byte("s1")})
		if err != nil || cp.GetCheckpoint().GetPhase() != "charged" {
			t.Fatalf("checkpoint = %v, %v", cp, err)
		}
		res, err := c.workers.ReserveEffect(ctx, &leaseholdv1.ReserveEffectRequest{Token: tok, EffectKey: "charge-card"})
		if err != nil || !res.GetReserved() {
			t.Fatalf("reserve = %v, %v", res, err)
		}
		rec, err := c.workers.RecordEffect(ctx, &leaseholdv1.RecordEffectRequest{
			Token: tok, EffectKey: "charge-card", Status: leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED, ProviderOperationId: "pi_123",
		})
		if err != nil || rec.GetEffect().GetStatus() != leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED {
			t.Fatalf("record = %v, %v", rec, err)
		}
		_, err = c.workers.RecordEffect(ctx, &leaseholdv1.RecordEffectRequest{
			Token: tok, EffectKey: "never-reserved", Status: leaseholdv1.EffectStatus_EFFECT_STATUS_FAILED,
		})
		wantReason(t, err, codes.NotFound, coordinator.ReasonEffectNotFound)

		// Give it back; the next attempt sees the checkpoint and the effect.
		rel, err := c.workers.Release(ctx, &leaseholdv1.ReleaseRequest{Token: tok})
		if err != nil || rel.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("release = %v, %v", rel, err)
		}
		second := claim()
		if second.GetToken().GetLeaseGeneration() != tok.GetLeaseGeneration()+1 ||
			second.GetJob().GetCheckpoint().GetPhase() != "charged" || len(second.GetEffects()) != 1 ||
			second.GetEffects()[0].GetProviderOperationId() != "pi_123" {
			t.Fatalf("second attempt = %v", second)
		}
		again, err := c.workers.ReserveEffect(ctx, &leaseholdv1.ReserveEffectRequest{Token: second.GetToken(), EffectKey: "charge-card"})
		if err != nil || again.GetReserved() || again.GetEffect().GetStatus() != leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED {
			t.Fatalf("reserve by the next attempt = %v, %v; want the recorded success", again, err)
		}
		// Anyone who may read the job reads its ledger (the console's job
		// page); a missing job is NOT_FOUND.
		ledger, err := c.jobs.ListJobEffects(ctx, &leaseholdv1.ListJobEffectsRequest{JobId: tok.GetJobId()})
		if err != nil || len(ledger.GetEffects()) != 1 || ledger.GetHasMore() ||
			ledger.GetEffects()[0].GetEffectKey() != "charge-card" || ledger.GetEffects()[0].GetProviderOperationId() != "pi_123" {
			t.Fatalf("ListJobEffects = %v, %v; want the one recorded effect", ledger, err)
		}
		_, err = c.jobs.ListJobEffects(ctx, &leaseholdv1.ListJobEffectsRequest{JobId: "01900000-0000-7000-8000-000000000000"})
		wantReason(t, err, codes.NotFound, coordinator.ReasonJobNotFound)
		history, err := c.jobs.ListJobCheckpoints(ctx, &leaseholdv1.ListJobCheckpointsRequest{JobId: tok.GetJobId()})
		if err != nil || len(history.GetCheckpoints()) != 1 || history.GetCheckpoints()[0].GetPhase() != "charged" ||
			string(history.GetCheckpoints()[0].GetState()) != "s1" {
			t.Fatalf("ListJobCheckpoints = %v, %v; want the one saved checkpoint", history, err)
		}

		// The old generation is fenced out of the ledger too.
		_, err = c.workers.SaveCheckpoint(ctx, &leaseholdv1.SaveCheckpointRequest{Token: tok, Phase: "late"})
		wantReason(t, err, codes.FailedPrecondition, coordinator.ReasonLeaseLost)
	})
}
