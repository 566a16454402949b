package coordinator

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/store"
)

// Queue scopes. A principal with queue patterns may create, claim, list
// and act on jobs of matching queues only:
//
//   - a queue the caller names itself (a create, a claim, a filter, a
//     queue operation) out of scope is PERMISSION_DENIED: the caller chose
//     the name, so refusing it reveals nothing;
//   - a job the caller names by id whose queue is out of scope is
//     NOT_FOUND, byte for byte the answer for a missing job, so a scoped
//     principal learns nothing of jobs outside its queues;
//   - lists leave out what is out of scope.
//
// Lease-bound calls need no queue check: the lease was handed out by a
// scoped Claim or Connect, and checkWorker keeps anyone else from
// reporting as the worker that holds it.

// inScope reports whether the caller may see jobs of queue.
func inScope(ctx context.Context, queue string) bool {
	return store.MatchQueue(callerFrom(ctx).queues, queue)
}

// checkQueue refuses a queue the caller named outside its scope.
func checkQueue(ctx context.Context, field, queue string) error {
	if inScope(ctx, queue) {
		return nil
	}
	cl := callerFrom(ctx)
	return statusError(codes.PermissionDenied, ReasonPermissionDenied,
		fmt.Sprintf("%s: queue %q is outside this principal's queues (%s)", field, queue, strings.Join(cl.queues, ", ")))
}

// checkQueues is checkQueue for each queue of a list (field[i]).
func checkQueues(ctx context.Context, field string, queues []string) error {
	for i, q := range queues {
		if err := checkQueue(ctx, fmt.Sprintf("%s[%d]", field, i), q); err != nil {
			return err
		}
	}
	return nil
}

// checkListScope refuses a list call whose queue, or a queue of its
// filter, is outside the caller's scope.
func checkListScope(ctx context.Context, queue string, filterQueues []string) error {
	if queue != "" {
		if err := checkQueue(ctx, "queue", queue); err != nil {
			return err
		}
	}
	for _, q := range filterQueues {
		if err := checkQueue(ctx, "filter", q); err != nil {
			return err
		}
	}
	return nil
}

// checkJobInScope answers NOT_FOUND, exactly as for a missing job, when the
// caller is scoped and the job's queue is outside its scope (or the job is
// missing). Unscoped callers cost nothing: the store call that follows
// answers for a missing job itself.
func (c *Coordinator) checkJobInScope(ctx context.Context, jobID string) error {
	if !callerFrom(ctx).scoped() {
		return nil
	}
	job, err := c.store.GetJob(ctx, tenantFrom(ctx), jobID)
	if err != nil {
		return toStatus(ctx, c.log, err)
	}
	if !inScope(ctx, job.Queue) {
		return toStatus(ctx, c.log, store.ErrNotFound)
	}
	return nil
}

// checkUnscoped refuses callers with queue scopes, for tenant-wide
// operations a scope cannot narrow (managing keys, reading the audit log).
func checkUnscoped(ctx context.Context, what string) error {
	if callerFrom(ctx).scoped() {
		return statusError(codes.PermissionDenied, ReasonPermissionDenied,
			what+" is tenant-wide: a principal limited to queues may not do it")
	}
	return nil
}
