package e2e

import (
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// A filter over gRPC: ListJobs and ListDeadJobs return the jobs it selects,
// ANDed with their own fields; a bad filter is INVALID_ARGUMENT with reason
// INVALID_FILTER and a field violation on "filter", on both engines.
func TestListFilterSelectsJobsAndABadFilterIsInvalidFilter(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		create := func(queue, customer string, maxAttempts int32) string {
			t.Helper()
			sp := spec(queue, "x")
			sp.Metadata = map[string]string{"customer": customer}
			sp.MaxAttempts = maxAttempts
			r, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: sp})
			if err != nil {
				t.Fatal(err)
			}
			return r.GetJob().GetId()
		}
		a42 := create("emails", "42", 0)
		create("emails", "7", 0)
		b42 := create("reports", "42", 0)
		dead := create("charges", "42", 1)
		claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"charges"}})
		if err != nil || len(claim.GetJobs()) != 1 {
			t.Fatalf("claim = %v, %v", claim, err)
		}
		if _, err := c.workers.Retry(ctx, &leaseholdv1.RetryRequest{
			Token: claim.GetJobs()[0].GetToken(),
			Error: &leaseholdv1.JobError{Code: "TIMEOUT", Message: "slow", Retryable: true},
		}); err != nil {
			t.Fatal(err)
		}

		ids := func(jobs []*leaseholdv1.Job) []string {
			var out []string
			for _, j := range jobs {
				out = append(out, j.GetId())
			}
			slices.Sort(out)
			return out
		}
		sorted := func(s ...string) []string { slices.Sort(s); return s }
		for _, tc := range []struct {
			req  *leaseholdv1.ListJobsRequest
			want []string
		}{
			{&leaseholdv1.ListJobsRequest{Filter: `metadata.customer = "42"`}, sorted(a42, b42, dead)},
			{&leaseholdv1.ListJobsRequest{Filter: `metadata.customer = "42" AND state = QUEUED`}, sorted(a42, b42)},
			{&leaseholdv1.ListJobsRequest{Queue: "emails", Filter: `metadata.customer = "42"`}, []string{a42}},
			{&leaseholdv1.ListJobsRequest{Filter: `queue:(emails, reports) AND metadata.customer = "42"`}, sorted(a42, b42)},
			{&leaseholdv1.ListJobsRequest{Filter: `error_code = TIMEOUT`}, []string{dead}},
		} {
			resp, err := c.jobs.ListJobs(ctx, tc.req)
			if err != nil {
				t.Fatalf("ListJobs(%v): %v", tc.req, err)
			}
			if got := ids(resp.GetJobs()); !slices.Equal(got, tc.want) {
				t.Errorf("ListJobs(%v) = %v, want %v", tc.req, got, tc.want)
			}
		}
		dl, err := c.admin.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{Filter: `metadata.customer = "42" AND error_code = TIMEOUT`})
		if err != nil || len(dl.GetDeadJobs()) != 1 || dl.GetDeadJobs()[0].GetJob().GetId() != dead {
			t.Fatalf("ListDeadJobs with a filter = %v, %v; want the dead job", dl, err)
		}
		dl, err = c.admin.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{Filter: `metadata.customer = "7"`})
		if err != nil || len(dl.GetDeadJobs()) != 0 {
			t.Fatalf("ListDeadJobs with a filter no dead job matches = %v, %v", dl, err)
		}

		for _, bad := range []string{`state = SLEEPING`, `queue = a OR queue = b`, `metadata.customer`, `created >= yesterday`, strings.Repeat("x", 8193)} {
			_, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Filter: bad})
			wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidFilter)
			if fields := fieldViolations(err); !slices.Equal(fields, []string{"filter"}) {
				t.Errorf("ListJobs with filter %.30q: field violations %v, want [filter]", bad, fields)
			}
			_, err = c.admin.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{Filter: bad})
			wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidFilter)
			if fields := fieldViolations(err); !slices.Equal(fields, []string{"filter"}) {
				t.Errorf("ListDeadJobs with filter %.30q: field violations %v, want [filter]", bad, fields)
			}
		}
	})
}
