package e2e

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// The Go SDK (and so the CLI, which dials with its options) honours the
// RetryInfo of a refusal: calls over the caller's rate wait the delay and
// succeed, while a client without the SDK's options sees the refusal.
func TestTheSDKWaitsOutRateLimitRefusals(t *testing.T) {
	t.Parallel()
	s, raw := setup(t, false, func(cfg *coordinator.Config) { cfg.UnaryRate, cfg.UnaryBurst = 4, 1 })
	ctx := ctxT(t)
	client := worker.NewClient(dialWith(t, s.Addr, worker.DialConfig{}))
	start := time.Now()
	for i := range 4 {
		if _, _, err := client.Create(ctx, "sdk", "k", nil, nil); err != nil {
			t.Fatalf("create %d through the SDK: %v", i, err)
		}
	}
	// A burst of 1 at 4/s: the last three each waited about 250ms.
	if d := time.Since(start); d < 500*time.Millisecond {
		t.Fatalf("4 creates at 4/s with a burst of 1 took %v: the limit did not apply", d)
	}
	page, err := client.List(ctx, &leaseholdv1.ListJobsRequest{Queue: "sdk"})
	if err != nil || len(page.GetJobs()) != 4 {
		t.Fatalf("jobs after the refused-and-repeated creates: %v, %v; want exactly 4", page.GetJobs(), err)
	}

	var refusedErr error
	for range 3 {
		if _, err := raw.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: page.GetJobs()[0].GetId()}); err != nil {
			refusedErr = err
			break
		}
	}
	wantReason(t, refusedErr, codes.ResourceExhausted, coordinator.ReasonRateLimited)
}
