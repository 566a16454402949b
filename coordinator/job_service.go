package coordinator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"

	"github.com/leasehold/leasehold/coordinator/dispatch"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// jobService is the producer API: a thin shell that validates, calls the
// store and encodes.
type jobService struct {
	leaseholdv1.UnimplementedJobServiceServer
	c *Coordinator
}

func (s *jobService) CreateJob(ctx context.Context, req *leaseholdv1.CreateJobRequest) (*leaseholdv1.CreateJobResponse, error) {
	c := s.c
	cr, err := c.v.CreateJob(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := checkQueue(ctx, "job.queue", cr.Spec.Queue); err != nil {
		return nil, err
	}
	res, err := c.createJobs(ctx, []store.CreateRequest{cr})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return &leaseholdv1.CreateJobResponse{Job: toJob(res[0].Job), Replayed: res[0].Replayed, Duplicate: res[0].Duplicate}, nil
}

func (s *jobService) BatchCreateJobs(ctx context.Context, req *leaseholdv1.BatchCreateJobsRequest) (*leaseholdv1.BatchCreateJobsResponse, error) {
	c := s.c
	crs, err := c.v.BatchCreateJobs(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	for i, cr := range crs {
		if err := checkQueue(ctx, fmt.Sprintf("requests[%d].job.queue", i), cr.Spec.Queue); err != nil {
			return nil, err
		}
	}
	res, err := c.createJobs(ctx, crs)
	if err != nil {
		if len(crs) == 1 {
			// The store names one request's fields as CreateJob does.
			err = renameField(err, "", "requests[0].")
		}
		return nil, toStatus(ctx, c.log, err)
	}
	out := make([]*leaseholdv1.CreateJobResponse, 0, len(res))
	for _, r := range res {
		out = append(out, &leaseholdv1.CreateJobResponse{Job: toJob(r.Job), Replayed: r.Replayed, Duplicate: r.Duplicate})
	}
	return &leaseholdv1.BatchCreateJobsResponse{Responses: out}, nil
}

// createJobs creates in one transaction and wakes local dispatch for the
// queues that got new jobs (other coordinators learn it from the store's
// notifier or their next poll). When the store can, jobs due now go
// straight to this coordinator's waiting workers: they are leased in the
// create's own transaction (store.HandoffCreator) and pushed after its
// commit, and a queue whose new jobs were all leased needs no wake-up.
func (c *Coordinator) createJobs(ctx context.Context, crs []store.CreateRequest) ([]store.CreateResult, error) {
	tenant := tenantFrom(ctx)
	p := store.CreateJobsParams{Tenant: tenant, Requests: crs, IdempotencyWindow: c.cfg.IdempotencyWindow, Now: c.now()}
	var (
		res    []store.CreateResult
		err    error
		handed map[string]int
	)
	if hc, r := c.reserveFor(tenant, crs); r != nil {
		var leased []store.ClaimedJob
		res, leased, err = hc.CreateJobsHandoff(ctx, p, r.Claims())
		handed = r.Finish(ctx, leased)
	} else {
		res, err = c.store.CreateJobs(ctx, p)
	}
	if errors.Is(err, store.ErrUniqueConflict) {
		c.core.metrics.uniqueConflict(ctx, tenant, refusedQueue(crs), "refused", 1)
	}
	if err != nil {
		return nil, err
	}
	fresh := map[string]int{}
	for _, r := range res {
		switch {
		case r.Duplicate:
			c.core.metrics.uniqueConflict(ctx, tenant, r.Job.Queue, "duplicate", 1)
		case !r.Replayed:
			fresh[r.Job.Queue]++
		}
	}
	created := 0
	for q, n := range fresh {
		created += n
		c.core.metrics.jobCreated(ctx, tenant, q, n)
		if handed[q] < n {
			c.core.dispatcher.Wake(tenant, q)
		}
	}
	c.core.activity.created.Add(int64(created))
	c.core.activity.replayed.Add(int64(len(res) - created))
	return res, nil
}

// refusedQueue names the queue of a refused unique create: the queue of
// its first request that asked to fail on a duplicate.
func refusedQueue(crs []store.CreateRequest) string {
	for _, cr := range crs {
		if cr.Unique != nil && cr.Unique.OnConflict == store.UniqueFail {
			return cr.Spec.Queue
		}
	}
	return crs[0].Spec.Queue
}

// reserveFor reserves waiting workers for the requests due now, when the
// store can lease in the create's transaction.
func (c *Coordinator) reserveFor(tenant string, crs []store.CreateRequest) (store.HandoffCreator, *dispatch.Reservation) {
	hc, ok := c.store.(store.HandoffCreator)
	if !ok {
		return nil, nil
	}
	now := cmp.Or(c.now(), time.Now())
	want := map[string]int{}
	for _, r := range crs {
		if !r.Spec.AvailableFrom(now).After(now) {
			want[r.Spec.Queue]++
		}
	}
	return hc, c.core.dispatcher.Reserve(tenant, want)
}

func (s *jobService) GetJob(ctx context.Context, req *leaseholdv1.GetJobRequest) (*leaseholdv1.GetJobResponse, error) {
	c := s.c
	id, err := c.v.GetJob(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	job, err := c.store.GetJob(ctx, tenantFrom(ctx), id)
	if err == nil && !inScope(ctx, job.Queue) {
		err = store.ErrNotFound // answered exactly like a missing job
	}
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return &leaseholdv1.GetJobResponse{Job: toJob(job)}, nil
}

func (s *jobService) ListJobs(ctx context.Context, req *leaseholdv1.ListJobsRequest) (*leaseholdv1.ListJobsResponse, error) {
	c := s.c
	p, err := c.v.ListJobs(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := checkListScope(ctx, p.Queue, p.Filter.Queues); err != nil {
		return nil, err
	}
	p.Tenant = tenantFrom(ctx)
	page, err := c.store.ListJobs(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, renameField(err, "cursor", "page_token"))
	}
	if p.Queue == "" && callerFrom(ctx).scoped() {
		// The store pages the whole tenant; a scoped caller sees its
		// queues' jobs of each page (so a page may hold fewer than
		// page_size, and the token still leads on).
		page.Jobs = slices.DeleteFunc(page.Jobs, func(j *store.Job) bool { return !inScope(ctx, j.Queue) })
	}
	return &leaseholdv1.ListJobsResponse{Jobs: toJobs(page.Jobs), NextPageToken: page.NextCursor}, nil
}

func (s *jobService) CancelJob(ctx context.Context, req *leaseholdv1.CancelJobRequest) (*leaseholdv1.CancelJobResponse, error) {
	c := s.c
	p, err := c.v.CancelJob(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, p.JobID); err != nil {
		return nil, err
	}
	p.Tenant, p.Now, p.Actor = tenantFrom(ctx), c.now(), callerFrom(ctx).identity
	job, err := c.store.RequestCancel(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditJobCancelled, job.ID, map[string]any{
		"queue": job.Queue, "reason": p.Reason, "state": string(job.State), "cancel_requested": job.CancelRequested,
	})
	if job.State == store.JobStateLeased && job.CancelRequested {
		c.notifyCancel(p.Tenant, job, p.Reason)
	}
	if job.State == store.JobStateCancelled {
		c.core.activity.cancelled.Add(1)
		c.core.metrics.jobEnded(ctx, p.Tenant, job)
	}
	c.core.watches.notify(p.Tenant, job.ID)
	return &leaseholdv1.CancelJobResponse{Job: toJob(job)}, nil
}

func (s *jobService) ListJobCheckpoints(ctx context.Context, req *leaseholdv1.ListJobCheckpointsRequest) (*leaseholdv1.ListJobCheckpointsResponse, error) {
	c := s.c
	id, err := c.v.ListJobCheckpoints(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, id); err != nil {
		return nil, err
	}
	cps, err := c.store.ListCheckpoints(ctx, tenantFrom(ctx), id)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := make([]*leaseholdv1.Checkpoint, len(cps))
	for i := range cps {
		out[i] = toCheckpoint(&cps[i])
	}
	return &leaseholdv1.ListJobCheckpointsResponse{Checkpoints: out}, nil
}

// ListJobEffectsMax bounds a ListJobEffects answer.
const ListJobEffectsMax = 1000

func (s *jobService) ListJobEffects(ctx context.Context, req *leaseholdv1.ListJobEffectsRequest) (*leaseholdv1.ListJobEffectsResponse, error) {
	c := s.c
	id, err := c.v.ListJobEffects(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, id); err != nil {
		return nil, err
	}
	tenant := tenantFrom(ctx)
	effs, err := c.store.ListEffects(ctx, tenant, id)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if len(effs) == 0 {
		// An empty ledger must still tell a missing job from one without
		// effects.
		if _, err := c.store.GetJob(ctx, tenant, id); err != nil {
			return nil, toStatus(ctx, c.log, err)
		}
	}
	more := len(effs) > ListJobEffectsMax
	if more {
		effs = effs[:ListJobEffectsMax]
	}
	out := make([]*leaseholdv1.Effect, len(effs))
	for i := range effs {
		out[i] = toEffect(&effs[i])
	}
	return &leaseholdv1.ListJobEffectsResponse{Effects: out, HasMore: more}, nil
}

func (s *jobService) ListJobEvents(ctx context.Context, req *leaseholdv1.ListJobEventsRequest) (*leaseholdv1.ListJobEventsResponse, error) {
	c := s.c
	p, err := c.v.ListJobEvents(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, p.JobID); err != nil {
		return nil, err
	}
	p.Tenant = tenantFrom(ctx)
	size := p.Limit
	p.Limit = size + 1 // one more tells whether another page follows
	evs, err := c.store.ListEvents(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if len(evs) == 0 {
		// An empty answer must still tell a missing job from one with no
		// events after after_sequence.
		if _, err := c.store.GetJob(ctx, p.Tenant, p.JobID); err != nil {
			return nil, toStatus(ctx, c.log, err)
		}
	}
	more := len(evs) > size
	if more {
		evs = evs[:size]
	}
	out := make([]*leaseholdv1.Event, 0, len(evs))
	for _, e := range evs {
		out = append(out, toEvent(e))
	}
	return &leaseholdv1.ListJobEventsResponse{Events: out, HasMore: more}, nil
}

// watchLimitRetryDelay is the RetryInfo delay of a WatchJob refused by a
// watcher cap: watchers end when their jobs do, so slots free up, but not
// within milliseconds.
const watchLimitRetryDelay = 5 * time.Second

// WatchJob sends the events after after_sequence, then new ones, and ends
// after the terminal event. The stream subscribes to its job in the
// coordinator's watchHub and sleeps until that job changes (through this
// coordinator, or through another one sharing the store): an idle watcher
// costs no store reads. Watchers are capped per connection and per
// coordinator (RESOURCE_EXHAUSTED, reason WATCH_LIMIT). At shutdown it ends
// with UNAVAILABLE (reason SHUTTING_DOWN): resume elsewhere from the last
// sequence received.
func (s *jobService) WatchJob(req *leaseholdv1.WatchJobRequest, stream leaseholdv1.JobService_WatchJobServer) error {
	c := s.c
	ctx := stream.Context()
	p, err := c.v.WatchJob(req)
	if err != nil {
		return toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, p.JobID); err != nil {
		return err
	}
	p.Tenant = tenantFrom(ctx)
	// Subscribe before the first read, so that no change after it is
	// missed.
	w, err := c.core.watches.add(store.JobRef{Tenant: p.Tenant, ID: p.JobID}, connectionKey(ctx))
	if err != nil {
		c.defences.overload.watchesRefused.Add(1)
		c.core.metrics.WatchLimited(ctx, p.Tenant, leaseholdv1.JobService_WatchJob_FullMethodName)
		noteRefusal(ctx, refusalWatchLimit, watchLimitRetryDelay)
		return refusalError(codes.ResourceExhausted, ReasonWatchLimit,
			err.Error()+": close watches you no longer need, or retry after the RetryInfo delay", watchLimitRetryDelay)
	}
	defer c.core.watches.remove(w)
	// Changes are sent to this coordinator from now on.
	if err := c.core.watches.present(ctx); err != nil {
		return toStatus(ctx, c.log, err)
	}
	if _, err := c.store.GetJob(ctx, p.Tenant, p.JobID); err != nil {
		return toStatus(ctx, c.log, err)
	}
	first := true
	for {
		evs, err := c.store.ListEvents(ctx, p)
		if err != nil {
			return toStatus(ctx, c.log, err)
		}
		for _, e := range evs {
			if err := stream.Send(&leaseholdv1.WatchJobResponse{Event: toEvent(e)}); err != nil {
				return err
			}
			p.AfterSequence = e.Sequence
			if terminalEvent(e.Type) {
				return nil
			}
		}
		if len(evs) == p.Limit {
			continue // a full page: read on at once
		}
		if first && len(evs) == 0 {
			// Started after the terminal event: nothing more will come.
			job, err := c.store.GetJob(ctx, p.Tenant, p.JobID)
			if err != nil {
				return toStatus(ctx, c.log, err)
			}
			if job.State.Terminal() {
				more, err := c.store.ListEvents(ctx, p)
				if err != nil {
					return toStatus(ctx, c.log, err)
				}
				for _, e := range more {
					if err := stream.Send(&leaseholdv1.WatchJobResponse{Event: toEvent(e)}); err != nil {
						return err
					}
				}
				return nil
			}
		}
		first = false
		select {
		case <-ctx.Done():
			return toStatus(ctx, c.log, ctx.Err())
		case <-c.life.closing:
			return statusError(codes.Unavailable, ReasonShuttingDown,
				"coordinator shutting down: watch again elsewhere with after_sequence set to the last sequence received")
		case <-w.wake:
		}
	}
}

// connectionKey names the client connection of a call: its peer address.
func connectionKey(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
