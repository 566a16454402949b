package e2e

import (
	"bytes"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func setupSQLite(t *testing.T) *testserver.Server {
	return testserver.Start(t, testserver.Options{})
}

func spec(queue string, payload string) *leaseholdv1.JobSpec {
	return &leaseholdv1.JobSpec{Queue: queue, Kind: "test.kind", Payload: []byte(payload)}
}

// eventTypes lists a job's event types in order.
func eventTypes(t *testing.T, c clients, jobID string) []leaseholdv1.EventType {
	t.Helper()
	resp, err := c.jobs.ListJobEvents(ctxT(t), &leaseholdv1.ListJobEventsRequest{JobId: jobID})
	if err != nil {
		t.Fatalf("ListJobEvents: %v", err)
	}
	var out []leaseholdv1.EventType
	for i, e := range resp.GetEvents() {
		if e.GetSequence() != int64(i+1) {
			t.Fatalf("event %d has sequence %d: not gapless", i, e.GetSequence())
		}
		out = append(out, e.GetType())
	}
	return out
}

func TestCreateClaimRenewComplete(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)

		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("emails", "hello")})
		if err != nil {
			t.Fatal(err)
		}
		if created.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED || created.GetReplayed() {
			t.Fatalf("created = %v", created)
		}
		id := created.GetJob().GetId()

		claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{
			WorkerId: "worker-1", Queues: []string{"emails"}, LeaseDuration: durationpb.New(10 * time.Second),
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(claim.GetJobs()) != 1 {
			t.Fatalf("claimed %d jobs, want 1", len(claim.GetJobs()))
		}
		lj := claim.GetJobs()[0]
		tok := lj.GetToken()
		if tok.GetJobId() != id || tok.GetLeaseGeneration() != 1 || tok.GetWorkerId() != "worker-1" {
			t.Fatalf("token = %v", tok)
		}
		if !bytes.Equal(lj.GetJob().GetPayload(), []byte("hello")) || lj.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_LEASED {
			t.Fatalf("leased job = %v", lj.GetJob())
		}
		firstExpiry := lj.GetLeaseExpiresAt().AsTime()

		renew, err := c.workers.Renew(ctx, &leaseholdv1.RenewRequest{
			Tokens: []*leaseholdv1.LeaseToken{tok}, LeaseDuration: durationpb.New(time.Minute),
		})
		if err != nil {
			t.Fatal(err)
		}
		r := renew.GetResults()[0]
		if r.GetStatus() != leaseholdv1.RenewStatus_RENEW_STATUS_RENEWED || !r.GetLeaseExpiresAt().AsTime().After(firstExpiry) {
			t.Fatalf("renew = %v (first expiry %v)", r, firstExpiry)
		}

		done, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok, Result: []byte("ok")})
		if err != nil {
			t.Fatal(err)
		}
		if done.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(done.GetJob().GetResult()) != "ok" {
			t.Fatalf("completed job = %v", done.GetJob())
		}
		// The same generation repeating its report (its answer was lost)
		// gets the same answer.
		again, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok, Result: []byte("ok")})
		if err != nil || again.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("repeated complete = %v, %v", again, err)
		}

		got := eventTypes(t, c, id)
		want := []leaseholdv1.EventType{
			leaseholdv1.EventType_EVENT_TYPE_QUEUED, leaseholdv1.EventType_EVENT_TYPE_LEASED, leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED,
		}
		if !equalTypes(got, want) {
			t.Fatalf("events = %v, want %v", got, want)
		}

		// WatchJob replays the history and ends after the terminal event.
		ws, err := c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: id})
		if err != nil {
			t.Fatal(err)
		}
		var watched []leaseholdv1.EventType
		for {
			m, err := ws.Recv()
			if err != nil {
				break
			}
			watched = append(watched, m.GetEvent().GetType())
		}
		if !equalTypes(watched, want) {
			t.Fatalf("watched = %v, want %v", watched, want)
		}
	})
}

func equalTypes(a, b []leaseholdv1.EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDuplicateCreateReplaysAndConflicts(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		req := &leaseholdv1.CreateJobRequest{Job: spec("billing", `{"invoice":42}`), RequestId: "invoice-42"}
		first, err := c.jobs.CreateJob(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		second, err := c.jobs.CreateJob(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if !second.GetReplayed() || second.GetJob().GetId() != first.GetJob().GetId() || first.GetReplayed() {
			t.Fatalf("first = %v replayed=%v; second = %v replayed=%v",
				first.GetJob().GetId(), first.GetReplayed(), second.GetJob().GetId(), second.GetReplayed())
		}
		_, err = c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("billing", `{"invoice":43}`), RequestId: "invoice-42"})
		wantReason(t, err, codes.AlreadyExists, coordinator.ReasonIdempotencyConflict)

		list, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Queue: "billing"})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.GetJobs()) != 1 {
			t.Fatalf("%d jobs in billing, want exactly 1", len(list.GetJobs()))
		}
		if got := eventTypes(t, c, first.GetJob().GetId()); len(got) != 1 {
			t.Fatalf("events after replays = %v, want only QUEUED", got)
		}
	})
}

func TestExpiredLeaseIsReclaimedAndLateCompleteIsFenced(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		clk := newClock()
		// The reaper looks often: the injected clock jumps past expiries
		// it was not told of.
		_, c := setup(t, pg, func(cfg *coordinator.Config) { cfg.Now, cfg.ReapIntervalMax = clk.Now, 20*time.Millisecond })
		ctx := ctxT(t)
		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("media", "video-1")})
		if err != nil {
			t.Fatal(err)
		}
		claim1, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{
			WorkerId: "worker-a", Queues: []string{"media"}, LeaseDuration: durationpb.New(5 * time.Second),
		})
		if err != nil || len(claim1.GetJobs()) != 1 {
			t.Fatalf("claim by worker-a = %v, %v", claim1, err)
		}
		tokA := claim1.GetJobs()[0].GetToken()

		// Before expiry nobody else can take it.
		none, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "worker-b", Queues: []string{"media"}})
		if err != nil || len(none.GetJobs()) != 0 {
			t.Fatalf("claim before expiry = %v, %v; want nothing", none, err)
		}

		// worker-a stops renewing; time passes the lease, and the reaper
		// puts the job back for worker-b's (long-polling) claim.
		clk.Advance(6 * time.Second)
		claim2, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{
			WorkerId: "worker-b", Queues: []string{"media"}, LeaseDuration: durationpb.New(30 * time.Second),
			Wait: durationpb.New(10 * time.Second),
		})
		if err != nil || len(claim2.GetJobs()) != 1 {
			t.Fatalf("claim by worker-b after expiry = %v, %v", claim2, err)
		}
		tokB := claim2.GetJobs()[0].GetToken()
		if tokB.GetJobId() != created.GetJob().GetId() || tokB.GetLeaseGeneration() != tokA.GetLeaseGeneration()+1 {
			t.Fatalf("worker-b token = %v; want the same job at generation %d", tokB, tokA.GetLeaseGeneration()+1)
		}

		_, err = c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tokA})
		wantReason(t, err, codes.FailedPrecondition, coordinator.ReasonLeaseLost)
		renew, err := c.workers.Renew(ctx, &leaseholdv1.RenewRequest{Tokens: []*leaseholdv1.LeaseToken{tokA}})
		if err != nil || renew.GetResults()[0].GetStatus() != leaseholdv1.RenewStatus_RENEW_STATUS_LOST {
			t.Fatalf("renew by the fenced worker = %v, %v; want LOST", renew, err)
		}

		done, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tokB})
		if err != nil || done.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("complete by worker-b = %v, %v", done, err)
		}
		got := eventTypes(t, c, created.GetJob().GetId())
		terminal := 0
		for _, e := range got {
			if e == leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED {
				terminal++
			}
		}
		if terminal != 1 || !containsType(got, leaseholdv1.EventType_EVENT_TYPE_LEASE_EXPIRED) {
			t.Fatalf("events = %v; want one SUCCEEDED and a LEASE_EXPIRED", got)
		}
	})
}

func containsType(ts []leaseholdv1.EventType, want leaseholdv1.EventType) bool {
	for _, t := range ts {
		if t == want {
			return true
		}
	}
	return false
}
