package e2e

import (
	"slices"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// ListJobs answers BASIC unless asked for FULL, and a FULL page of large
// jobs ends at the page byte budget with a token, so a client with grpc-go's
// default 4 MiB receive limit can page through 1 MB jobs.
func TestListViewsAndPageBudget(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		const n, size = 6, 1 << 20
		for i := range n {
			payload := make([]byte, size-1024) // under the 1 MiB limit with the envelope
			payload[0] = byte(i)
			if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "big", Kind: "k", Payload: payload}}); err != nil {
				t.Fatal(err)
			}
		}
		basic, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Queue: "big", PageSize: 500})
		if err != nil || len(basic.GetJobs()) != n || basic.GetNextPageToken() != "" {
			t.Fatalf("default list: %d jobs, token %q, %v; want all %d on one page", len(basic.GetJobs()), basic.GetNextPageToken(), err, n)
		}
		for _, j := range basic.GetJobs() {
			if j.GetPayload() != nil {
				t.Fatalf("the default (BASIC) view carries a %d-byte payload", len(j.GetPayload()))
			}
		}
		req := &leaseholdv1.ListJobsRequest{Queue: "big", PageSize: 500, View: leaseholdv1.JobView_JOB_VIEW_FULL}
		seen, pages := 0, 0
		for {
			page, err := c.jobs.ListJobs(ctx, req) // the client's default 4 MiB receive limit
			if err != nil {
				t.Fatalf("FULL page %d: %v", pages, err)
			}
			pages++
			if len(page.GetJobs()) == 0 || len(page.GetJobs()) > coordinator.ListPageBytesDefault/(size-1024) {
				t.Fatalf("FULL page %d holds %d jobs of 1 MB; the budget is %d bytes", pages, len(page.GetJobs()), coordinator.ListPageBytesDefault)
			}
			for _, j := range page.GetJobs() {
				if len(j.GetPayload()) != size-1024 {
					t.Fatalf("FULL job with a %d-byte payload", len(j.GetPayload()))
				}
			}
			seen += len(page.GetJobs())
			if page.GetNextPageToken() == "" {
				break
			}
			req.PageToken = page.GetNextPageToken()
		}
		if seen != n || pages < n/2 {
			t.Fatalf("FULL paging listed %d jobs in %d pages; want %d jobs in at least %d pages", seen, pages, n, n/2)
		}
		v, err := c.workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
		if err != nil || !slices.Contains(v.GetCapabilities(), "list_views") {
			t.Fatalf("GetVersion = %v, %v; want the list_views capability", v, err)
		}
		_, err = c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{View: leaseholdv1.JobView(99)})
		wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)
		dead, err := c.admin.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{View: leaseholdv1.JobView_JOB_VIEW_FULL})
		if err != nil || len(dead.GetDeadJobs()) != 0 {
			t.Fatalf("ListDeadJobs FULL = %v, %v", dead, err)
		}
	})
}
