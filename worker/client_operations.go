package worker

// The bulk side of Client: OperationService. Each bulk call takes a filter
// (the ListJobs filter grammar) and either answers a dry run (count and
// sample) or starts an Operation, which the coordinators run in chunks;
// follow it with GetOperation or WaitOperation. Errors keep the server's
// gRPC status, wrapped with what was being done.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// BulkResult is a bulk call's answer: DryRun for a dry run, else the
// started Operation.
type BulkResult struct {
	DryRun    *leaseholdv1.BulkDryRun
	Operation *leaseholdv1.Operation
}

// BulkKind names a bulk call.
type BulkKind string

// The bulk calls.
const (
	BulkCancel      BulkKind = "cancel"
	BulkRetry       BulkKind = "retry"
	BulkReplay      BulkKind = "replay"
	BulkAbandon     BulkKind = "abandon"
	BulkDelete      BulkKind = "delete"
	BulkSetPriority BulkKind = "set_priority"
)

// BulkRequest is what every bulk call takes; Priority is for
// BulkSetPriority only.
type BulkRequest struct {
	Filter   string
	DryRun   bool
	Reason   string
	Priority int32
}

// Bulk runs one bulk call.
func (c *Client) Bulk(ctx context.Context, kind BulkKind, r BulkRequest) (BulkResult, error) {
	var (
		dry *leaseholdv1.BulkDryRun
		op  *leaseholdv1.Operation
		err error
	)
	switch kind {
	case BulkCancel:
		var resp *leaseholdv1.CancelJobsResponse
		resp, err = c.ops.CancelJobs(ctx, &leaseholdv1.CancelJobsRequest{Filter: r.Filter, DryRun: r.DryRun, Reason: r.Reason})
		dry, op = resp.GetDryRun(), resp.GetOperation()
	case BulkRetry:
		var resp *leaseholdv1.RetryJobsResponse
		resp, err = c.ops.RetryJobs(ctx, &leaseholdv1.RetryJobsRequest{Filter: r.Filter, DryRun: r.DryRun, Reason: r.Reason})
		dry, op = resp.GetDryRun(), resp.GetOperation()
	case BulkReplay:
		var resp *leaseholdv1.ReplayDeadJobsResponse
		resp, err = c.ops.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: r.Filter, DryRun: r.DryRun, Reason: r.Reason})
		dry, op = resp.GetDryRun(), resp.GetOperation()
	case BulkAbandon:
		var resp *leaseholdv1.AbandonDeadJobsResponse
		resp, err = c.ops.AbandonDeadJobs(ctx, &leaseholdv1.AbandonDeadJobsRequest{Filter: r.Filter, DryRun: r.DryRun, Reason: r.Reason})
		dry, op = resp.GetDryRun(), resp.GetOperation()
	case BulkDelete:
		var resp *leaseholdv1.DeleteJobsResponse
		resp, err = c.ops.DeleteJobs(ctx, &leaseholdv1.DeleteJobsRequest{Filter: r.Filter, DryRun: r.DryRun, Reason: r.Reason})
		dry, op = resp.GetDryRun(), resp.GetOperation()
	case BulkSetPriority:
		var resp *leaseholdv1.SetJobsPriorityResponse
		resp, err = c.ops.SetJobsPriority(ctx, &leaseholdv1.SetJobsPriorityRequest{Filter: r.Filter, DryRun: r.DryRun, Reason: r.Reason, Priority: r.Priority})
		dry, op = resp.GetDryRun(), resp.GetOperation()
	default:
		return BulkResult{}, fmt.Errorf("leasehold: unknown bulk call %q", kind)
	}
	if err != nil {
		return BulkResult{}, fmt.Errorf("leasehold: bulk %s: %w", kind, err)
	}
	return BulkResult{DryRun: dry, Operation: op}, nil
}

// GetOperation returns one operation, named "operations/{id}" or by id.
func (c *Client) GetOperation(ctx context.Context, name string) (*leaseholdv1.Operation, error) {
	resp, err := c.ops.GetOperation(ctx, &leaseholdv1.GetOperationRequest{Name: name})
	if err != nil {
		return nil, fmt.Errorf("leasehold: get operation %q: %w", name, err)
	}
	return resp.GetOperation(), nil
}

// ListOperations pages the tenant's operations, newest first.
func (c *Client) ListOperations(ctx context.Context, req *leaseholdv1.ListOperationsRequest) (*leaseholdv1.ListOperationsResponse, error) {
	resp, err := c.ops.ListOperations(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: list operations: %w", err)
	}
	return resp, nil
}

// CancelOperation stops a running operation after its current chunk.
func (c *Client) CancelOperation(ctx context.Context, name string) (*leaseholdv1.Operation, error) {
	resp, err := c.ops.CancelOperation(ctx, &leaseholdv1.CancelOperationRequest{Name: name})
	if err != nil {
		return nil, fmt.Errorf("leasehold: cancel operation %q: %w", name, err)
	}
	return resp.GetOperation(), nil
}

// WaitOperation returns the operation once it is done or after timeout
// (at most a minute; check Done).
func (c *Client) WaitOperation(ctx context.Context, name string, timeout time.Duration) (*leaseholdv1.Operation, error) {
	resp, err := c.ops.WaitOperation(ctx, &leaseholdv1.WaitOperationRequest{Name: name, Timeout: durationpb.New(timeout)})
	if err != nil {
		return nil, fmt.Errorf("leasehold: wait for operation %q: %w", name, err)
	}
	return resp.GetOperation(), nil
}
