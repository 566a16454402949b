package worker

// The operator side of Client: AdminService's queues, dead-letter queue,
// circuit breakers and connected workers. The leasehold CLI's operator
// commands are built on these methods. Errors keep the server's gRPC status
// (reachable with status.FromError or errors.As), wrapped with what was
// being done.

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// ListQueues returns every queue that has jobs or a stored policy, by
// name, with its effective policy and its counts by state.
func (c *Client) ListQueues(ctx context.Context) ([]*leaseholdv1.QueueSummary, error) {
	resp, err := c.admin.ListQueues(ctx, &leaseholdv1.ListQueuesRequest{})
	if err != nil {
		return nil, fmt.Errorf("leasehold: list queues: %w", err)
	}
	return resp.GetQueues(), nil
}

// GetQueue returns a queue's policy (the defaults when none is stored) and
// its counts by state.
func (c *Client) GetQueue(ctx context.Context, queue string) (*leaseholdv1.QueueSummary, error) {
	resp, err := c.admin.GetQueue(ctx, &leaseholdv1.GetQueueRequest{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("leasehold: get queue %q: %w", queue, err)
	}
	return resp.GetQueue(), nil
}

// UpdateQueuePolicy replaces a queue's policy (policy.Queue names it) and
// returns the stored policy, defaults filled in. Unset durations and zero
// numbers take the defaults, so to change one setting read the policy with
// GetQueue first. The paused flag is ignored: use PauseQueue and
// ResumeQueue. An invalid policy fails with INVALID_ARGUMENT naming the
// field.
func (c *Client) UpdateQueuePolicy(ctx context.Context, policy *leaseholdv1.QueuePolicy) (*leaseholdv1.QueuePolicy, error) {
	resp, err := c.admin.UpdateQueuePolicy(ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: policy})
	if err != nil {
		return nil, fmt.Errorf("leasehold: update policy of queue %q: %w", policy.GetQueue(), err)
	}
	return resp.GetPolicy(), nil
}

// PauseQueue stops the coordinator handing out the queue's jobs; creates
// still succeed. It returns the policy, paused.
func (c *Client) PauseQueue(ctx context.Context, queue string) (*leaseholdv1.QueuePolicy, error) {
	resp, err := c.admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("leasehold: pause queue %q: %w", queue, err)
	}
	return resp.GetPolicy(), nil
}

// ResumeQueue undoes PauseQueue and returns the policy.
func (c *Client) ResumeQueue(ctx context.Context, queue string) (*leaseholdv1.QueuePolicy, error) {
	resp, err := c.admin.ResumeQueue(ctx, &leaseholdv1.ResumeQueueRequest{Queue: queue})
	if err != nil {
		return nil, fmt.Errorf("leasehold: resume queue %q: %w", queue, err)
	}
	return resp.GetPolicy(), nil
}

// ListDeadJobs returns one page of the dead-letter queue (jobs whose retry
// budget is spent), newest first. Pass the response's NextPageToken in
// req.PageToken for the next page; it is empty on the last one.
func (c *Client) ListDeadJobs(ctx context.Context, req *leaseholdv1.ListDeadJobsRequest) (*leaseholdv1.ListDeadJobsResponse, error) {
	resp, err := c.admin.ListDeadJobs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: list dead jobs: %w", err)
	}
	return resp, nil
}

// GetDeadJob returns a dead job with its evidence: the job, its last error,
// every attempt, and what operators did to it (replayed as, abandoned).
func (c *Client) GetDeadJob(ctx context.Context, id string) (*leaseholdv1.DeadJob, error) {
	resp, err := c.admin.GetDeadJob(ctx, &leaseholdv1.GetDeadJobRequest{JobId: id})
	if err != nil {
		return nil, fmt.Errorf("leasehold: get dead job %s: %w", id, err)
	}
	return resp.GetDeadJob(), nil
}

// ReplayDeadJob creates a new job from a dead one (new id, attempts reset,
// ReplayOf = id), recording reason on the dead job. It is idempotent:
// replaying the same dead job again returns the first replay with
// alreadyReplayed set. A job that is not dead fails with
// FAILED_PRECONDITION, reason JOB_NOT_DEAD; an abandoned one with reason
// JOB_ABANDONED.
func (c *Client) ReplayDeadJob(ctx context.Context, id, reason string) (job *leaseholdv1.Job, alreadyReplayed bool, err error) {
	resp, err := c.admin.ReplayDeadJob(ctx, &leaseholdv1.ReplayDeadJobRequest{JobId: id, Reason: reason})
	if err != nil {
		return nil, false, fmt.Errorf("leasehold: replay dead job %s: %w", id, err)
	}
	return resp.GetJob(), resp.GetAlreadyReplayed(), nil
}

// AbandonDeadJob gives up on a dead job, recording reason: it leaves the
// dead-letter listing and stays as evidence until retention prunes it.
func (c *Client) AbandonDeadJob(ctx context.Context, id, reason string) (*leaseholdv1.DeadJob, error) {
	resp, err := c.admin.AbandonDeadJob(ctx, &leaseholdv1.AbandonDeadJobRequest{JobId: id, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("leasehold: abandon dead job %s: %w", id, err)
	}
	return resp.GetDeadJob(), nil
}

// ListBreakers returns the circuit breakers, one per dependency.
func (c *Client) ListBreakers(ctx context.Context) ([]*leaseholdv1.Breaker, error) {
	resp, err := c.admin.ListBreakers(ctx, &leaseholdv1.ListBreakersRequest{})
	if err != nil {
		return nil, fmt.Errorf("leasehold: list breakers: %w", err)
	}
	return resp.GetBreakers(), nil
}

// GetBreaker returns a dependency's breaker: its state, the counts in its
// window, when it opened and when it next probes, and its policy. NOT_FOUND
// (reason BREAKER_NOT_FOUND) when nothing has reported on the dependency
// and no operator has acted on it.
func (c *Client) GetBreaker(ctx context.Context, dependency string) (*leaseholdv1.Breaker, error) {
	resp, err := c.admin.GetBreaker(ctx, &leaseholdv1.GetBreakerRequest{Dependency: dependency})
	if err != nil {
		return nil, fmt.Errorf("leasehold: get breaker %q: %w", dependency, err)
	}
	return resp.GetBreaker(), nil
}

// ResetBreaker closes a dependency's breaker by hand and returns it: the
// dependency's held jobs are claimable again at once. reason is recorded
// in the breaker's events and the audit log.
func (c *Client) ResetBreaker(ctx context.Context, dependency, reason string) (*leaseholdv1.Breaker, error) {
	resp, err := c.admin.ResetBreaker(ctx, &leaseholdv1.ResetBreakerRequest{Dependency: dependency, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("leasehold: reset breaker %q: %w", dependency, err)
	}
	return resp.GetBreaker(), nil
}

// ForceOpenBreaker opens a dependency's breaker by hand (a maintenance
// window): no coordinator claims its jobs until ResetBreaker, or, when d
// is positive, until d has passed and half-open probes succeed.
func (c *Client) ForceOpenBreaker(ctx context.Context, dependency string, d time.Duration, reason string) (*leaseholdv1.Breaker, error) {
	req := &leaseholdv1.ForceOpenBreakerRequest{Dependency: dependency, Reason: reason}
	if d > 0 {
		req.Duration = durationpb.New(d)
	}
	resp, err := c.admin.ForceOpenBreaker(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: force open breaker %q: %w", dependency, err)
	}
	return resp.GetBreaker(), nil
}

// UpdateBreakerPolicy stores a dependency's breaker policy (unset fields
// take the defaults) and returns the breaker with it.
func (c *Client) UpdateBreakerPolicy(ctx context.Context, policy *leaseholdv1.BreakerPolicy) (*leaseholdv1.Breaker, error) {
	resp, err := c.admin.UpdateBreakerPolicy(ctx, &leaseholdv1.UpdateBreakerPolicyRequest{Policy: policy})
	if err != nil {
		return nil, fmt.Errorf("leasehold: update breaker policy %q: %w", policy.GetDependency(), err)
	}
	return resp.GetBreaker(), nil
}

// BreakerEvents returns every transition of a dependency's breaker, oldest
// first, paging through ListBreakerEvents.
func (c *Client) BreakerEvents(ctx context.Context, dependency string) ([]*leaseholdv1.BreakerEvent, error) {
	var (
		out   []*leaseholdv1.BreakerEvent
		after int64
	)
	for {
		resp, err := c.admin.ListBreakerEvents(ctx, &leaseholdv1.ListBreakerEventsRequest{
			Dependency: dependency, AfterSequence: after, PageSize: breakerEventPage,
		})
		if err != nil {
			return nil, fmt.Errorf("leasehold: breaker events of %q: %w", dependency, err)
		}
		out = append(out, resp.GetEvents()...)
		if len(resp.GetEvents()) < breakerEventPage {
			return out, nil
		}
		after = resp.GetEvents()[len(resp.GetEvents())-1].GetSequence()
	}
}

// breakerEventPage is the page size BreakerEvents asks for.
const breakerEventPage = 500

// ListWorkers returns the workers connected through WorkerService.Connect
// to the coordinator that answers (not to every coordinator sharing its
// database).
func (c *Client) ListWorkers(ctx context.Context) ([]*leaseholdv1.WorkerInfo, error) {
	resp, err := c.admin.ListWorkers(ctx, &leaseholdv1.ListWorkersRequest{})
	if err != nil {
		return nil, fmt.Errorf("leasehold: list workers: %w", err)
	}
	return resp.GetWorkers(), nil
}

// ReleaseWorkerBinding frees a worker id from the principal that owns it
// (an operator's action), returning that principal's id ("" when the id
// had no owner).
func (c *Client) ReleaseWorkerBinding(ctx context.Context, workerID string) (string, error) {
	resp, err := c.admin.ReleaseWorkerBinding(ctx, &leaseholdv1.ReleaseWorkerBindingRequest{WorkerId: workerID})
	if err != nil {
		return "", fmt.Errorf("leasehold: release worker binding %q: %w", workerID, err)
	}
	return resp.GetPreviousOwnerId(), nil
}
