package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func TestInvalidRequestsGetFieldViolationsAndWriteNothing(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, func(cfg *coordinator.Config) { cfg.PayloadMaxBytes = 1024 })
		ctx := ctxT(t)
		tooManyMeta := map[string]string{}
		for i := range 65 {
			tooManyMeta[strings.Repeat("k", i+1)] = "v"
		}
		tok := &leaseholdv1.LeaseToken{JobId: "j", LeaseGeneration: 1, WorkerId: "w"} // no secret
		cases := []struct {
			name  string
			field string
			call  func(context.Context) error
		}{
			{"payload over the configured limit", "job.payload", func(ctx context.Context) error {
				_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Payload: make([]byte, 1025)}})
				return err
			}},
			{"queue with a space", "job.queue", func(ctx context.Context) error {
				_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "bad queue", Kind: "k"}})
				return err
			}},
			{"missing job", "job", func(ctx context.Context) error {
				_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{})
				return err
			}},
			{"request id over 256 bytes", "request_id", func(ctx context.Context) error {
				_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("q", ""), RequestId: strings.Repeat("r", 257)})
				return err
			}},
			{"too much metadata", "job.metadata", func(ctx context.Context) error {
				_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k", Metadata: tooManyMeta}})
				return err
			}},
			{"one bad item fails the whole batch", "requests[1].job.kind", func(ctx context.Context) error {
				_, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: []*leaseholdv1.CreateJobRequest{
					{Job: spec("q", "")}, {Job: &leaseholdv1.JobSpec{Queue: "q", Kind: ""}},
				}})
				return err
			}},
			{"max jobs above 1000", "max_jobs", func(ctx context.Context) error {
				_, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}, MaxJobs: 1001})
				return err
			}},
			{"lease under a second", "lease_duration", func(ctx context.Context) error {
				_, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}, LeaseDuration: durationpb.New(500 * time.Millisecond)})
				return err
			}},
			{"claim lease of zero", "lease_duration", func(ctx context.Context) error {
				_, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}, LeaseDuration: durationpb.New(0)})
				return err
			}},
			{"job id that is not a UUID", "job_id", func(ctx context.Context) error {
				_, err := c.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: "job-1"})
				return err
			}},
			{"cancel of a job id that is not a UUID", "job_id", func(ctx context.Context) error {
				_, err := c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: "job-1"})
				return err
			}},
			{"claim wait over 60s", "wait", func(ctx context.Context) error {
				_, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}, Wait: durationpb.New(61 * time.Second)})
				return err
			}},
			{"negative page size", "page_size", func(ctx context.Context) error {
				_, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{PageSize: -1})
				return err
			}},
			{"token without its secret", "token.secret", func(ctx context.Context) error {
				_, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok})
				return err
			}},
			{"policy with a multiplier below 1", "policy.retry.multiplier", func(ctx context.Context) error {
				_, err := c.admin.UpdateQueuePolicy(ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
					Queue: "q", Retry: &leaseholdv1.RetryPolicy{Multiplier: 0.5},
				}})
				return err
			}},
			{"pause of an unnamed queue", "queue", func(ctx context.Context) error {
				_, err := c.admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{})
				return err
			}},
		}
		for _, tc := range cases {
			err := tc.call(ctx)
			wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)
			if fields := fieldViolations(err); !slices.Contains(fields, tc.field) {
				t.Errorf("%s: field violations %v, want %s", tc.name, fields, tc.field)
			}
		}

		// A stream whose first message is not a valid Hello is refused.
		cs, err := c.workers.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := cs.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{WorkerId: "w", Capacity: 1}}}); err != nil {
			t.Fatal(err)
		}
		_, err = cs.Recv()
		wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)
		if fields := fieldViolations(err); !slices.Contains(fields, "hello.queues") {
			t.Errorf("hello violations %v, want hello.queues", fields)
		}

		// Nothing was written.
		jobs, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{})
		if err != nil || len(jobs.GetJobs()) != 0 {
			t.Fatalf("jobs after invalid requests = %v, %v; want none", jobs.GetJobs(), err)
		}
		queues, err := c.admin.ListQueues(ctx, &leaseholdv1.ListQueuesRequest{})
		if err != nil || len(queues.GetQueues()) != 0 {
			t.Fatalf("queues after invalid requests = %v, %v; want none", queues.GetQueues(), err)
		}
	})
}

// Lease-bound calls check the lease's secret before anything else, so their
// other fields are tried with a real lease: each invalid call is refused
// with its field and leaves the lease as it was; a secret that is not the
// lease's is PERMISSION_DENIED.
func TestInvalidLeaseCallsGetFieldViolationsAndChangeNothing(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("lease-calls", "")})
		if err != nil {
			t.Fatal(err)
		}
		claimed, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"lease-calls"}})
		if err != nil || len(claimed.GetJobs()) != 1 {
			t.Fatalf("claim: %v, %v", claimed, err)
		}
		tok := claimed.GetJobs()[0].GetToken()
		other := &leaseholdv1.LeaseToken{JobId: created.GetJob().GetId(), LeaseGeneration: 1, WorkerId: "other", Secret: tok.GetSecret()}
		cases := []struct {
			name  string
			field string
			call  func(context.Context) error
		}{
			{"retry without an error", "error", func(ctx context.Context) error {
				_, err := c.workers.Retry(ctx, &leaseholdv1.RetryRequest{Token: tok})
				return err
			}},
			{"renew tokens of two workers", "tokens[1].worker_id", func(ctx context.Context) error {
				_, err := c.workers.Renew(ctx, &leaseholdv1.RenewRequest{Tokens: []*leaseholdv1.LeaseToken{tok, other}})
				return err
			}},
			{"renew with a lease of zero", "lease_duration", func(ctx context.Context) error {
				_, err := c.workers.Renew(ctx, &leaseholdv1.RenewRequest{Tokens: []*leaseholdv1.LeaseToken{tok}, LeaseDuration: durationpb.New(0)})
				return err
			}},
			{"record effect without status", "status", func(ctx context.Context) error {
				_, err := c.workers.RecordEffect(ctx, &leaseholdv1.RecordEffectRequest{Token: tok, EffectKey: "charge"})
				return err
			}},
		}
		for _, tc := range cases {
			err := tc.call(ctx)
			wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)
			if fields := fieldViolations(err); !slices.Contains(fields, tc.field) {
				t.Errorf("%s: field violations %v, want %s", tc.name, fields, tc.field)
			}
		}
		for name, bad := range map[string]*leaseholdv1.LeaseToken{
			"another worker's id":   other,
			"another generation":    {JobId: tok.GetJobId(), LeaseGeneration: 2, WorkerId: "w", Secret: tok.GetSecret()},
			"a secret one bit away": {JobId: tok.GetJobId(), LeaseGeneration: 1, WorkerId: "w", Secret: flipBit(tok.GetSecret())},
		} {
			_, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: bad})
			if code, reason := errorInfo(err); code != codes.PermissionDenied || reason != coordinator.ReasonLeaseSecretMismatch {
				t.Errorf("complete with %s: %v, want PERMISSION_DENIED %s", name, err, coordinator.ReasonLeaseSecretMismatch)
			}
		}
		got, err := c.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: tok.GetJobId()})
		if err != nil || got.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_LEASED || got.GetJob().GetLease().GetGeneration() != 1 {
			t.Fatalf("after the refused calls the job is %v, %v; want leased at generation 1", got.GetJob(), err)
		}
		events, err := c.jobs.ListJobEvents(ctx, &leaseholdv1.ListJobEventsRequest{JobId: tok.GetJobId()})
		if err != nil || len(events.GetEvents()) != 2 {
			t.Fatalf("events after the refused calls: %v, %v; want QUEUED and LEASED only", events.GetEvents(), err)
		}
		if _, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok}); err != nil {
			t.Fatalf("complete with the lease's own token: %v", err)
		}
	})
}

func flipBit(b []byte) []byte {
	out := slices.Clone(b)
	out[0] ^= 1
	return out
}

func TestPageSizesFollowAIP158(t *testing.T) {
	t.Parallel()
	_, c := setup(t, false, nil)
	ctx := ctxT(t)
	reqs := make([]*leaseholdv1.CreateJobRequest, 0, 600)
	for range 600 {
		reqs = append(reqs, &leaseholdv1.CreateJobRequest{Job: spec("bulk", "")})
	}
	if _, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: reqs}); err != nil {
		t.Fatal(err)
	}
	def, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{})
	if err != nil || len(def.GetJobs()) != coordinator.PageSizeDefault || def.GetNextPageToken() == "" {
		t.Fatalf("default page: %d jobs, token %q, %v", len(def.GetJobs()), def.GetNextPageToken(), err)
	}
	capped, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{PageSize: 100000})
	if err != nil || len(capped.GetJobs()) != coordinator.PageSizeMax {
		t.Fatalf("capped page: %d jobs, %v", len(capped.GetJobs()), err)
	}
	rest, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{PageSize: 500, PageToken: capped.GetNextPageToken()})
	if err != nil || len(rest.GetJobs()) != 100 || rest.GetNextPageToken() != "" {
		t.Fatalf("last page: %d jobs, token %q, %v", len(rest.GetJobs()), rest.GetNextPageToken(), err)
	}
	seen := map[string]bool{}
	for _, j := range append(capped.GetJobs(), rest.GetJobs()...) {
		if seen[j.GetId()] {
			t.Fatalf("job %s on two pages", j.GetId())
		}
		seen[j.GetId()] = true
	}
}
