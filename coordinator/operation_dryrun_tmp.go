package coordinator

// Temporary until helper filter's CountJobs lands in main.

import (
	"context"

	"google.golang.org/grpc/codes"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

func (c *Coordinator) dryRun(_ context.Context, _ store.JobFilter) (*leaseholdv1.BulkDryRun, error) {
	return nil, statusError(codes.Unimplemented, ReasonUnimplemented, "dry run pending CountJobs")
}
