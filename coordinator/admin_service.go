package coordinator

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// adminService is the operator API.
type adminService struct {
	leaseholdv1.UnimplementedAdminServiceServer
	c *Coordinator
}

func (a *adminService) ListQueues(ctx context.Context, req *leaseholdv1.ListQueuesRequest) (*leaseholdv1.ListQueuesResponse, error) {
	c := a.c
	maxStale, err := c.v.ListQueues(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	tenant := tenantFrom(ctx)
	var qs []store.QueueSummary
	countedAt := c.wallNow()
	if maxStale == 0 {
		qs, err = c.store.ListQueues(ctx, tenant)
	} else {
		qs, countedAt, err = c.staleQueues(ctx, tenant, maxStale)
	}
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := make([]*leaseholdv1.QueueSummary, 0, len(qs))
	for i := range qs {
		if !inScope(ctx, qs[i].Policy.Queue) {
			continue
		}
		st := toQueueStats(&qs[i].Stats)
		st.CountedAt = timestamppb.New(countedAt)
		st.Throughput = c.maintenance.throughput.series(store.QueueRef{Tenant: tenant, Queue: qs[i].Policy.Queue})
		out = append(out, &leaseholdv1.QueueSummary{Policy: toQueuePolicy(&qs[i].Policy), Stats: st})
	}
	return &leaseholdv1.ListQueuesResponse{Queues: out}, nil
}

// staleQueues is ListQueues with counts at most maxStale old (queueCounts)
// and the policies read now: every queue with a count or a policy, by name.
func (c *Coordinator) staleQueues(ctx context.Context, tenant string, maxStale time.Duration) ([]store.QueueSummary, time.Time, error) {
	stats, at, err := c.probes.queueCounts.get(ctx, c, tenant, maxStale)
	if err != nil {
		return nil, time.Time{}, err
	}
	policies, err := c.store.ListQueuePolicies(ctx, tenant)
	if err != nil {
		return nil, time.Time{}, err
	}
	byName := make(map[string]store.QueueSummary, len(stats)+len(policies))
	for name, st := range stats {
		st.Paused = false
		byName[name] = store.QueueSummary{Policy: store.DefaultQueuePolicy(name), Stats: st}
	}
	for _, p := range policies {
		q := byName[p.Queue]
		q.Policy, q.Stats.Queue, q.Stats.Paused = p, p.Queue, p.Paused
		byName[p.Queue] = q
	}
	out := make([]store.QueueSummary, 0, len(byName))
	for _, q := range byName {
		out = append(out, q)
	}
	slices.SortFunc(out, func(a, b store.QueueSummary) int { return strings.Compare(a.Policy.Queue, b.Policy.Queue) })
	return out, at, nil
}

func (a *adminService) GetQueue(ctx context.Context, req *leaseholdv1.GetQueueRequest) (*leaseholdv1.GetQueueResponse, error) {
	c := a.c
	q, err := c.v.GetQueue(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := checkQueue(ctx, "queue", q); err != nil {
		return nil, err
	}
	tenant := tenantFrom(ctx)
	pol, err := c.store.GetQueuePolicy(ctx, tenant, q)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	st, err := c.store.QueueStats(ctx, store.QueueStatsParams{Tenant: tenant, Queue: q, Now: c.now()})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	stats := toQueueStats(st)
	stats.CountedAt = timestamppb.New(c.wallNow())
	stats.Throughput = c.maintenance.throughput.series(store.QueueRef{Tenant: tenant, Queue: q})
	return &leaseholdv1.GetQueueResponse{Queue: &leaseholdv1.QueueSummary{Policy: toQueuePolicy(pol), Stats: stats}}, nil
}

func (a *adminService) UpdateQueuePolicy(ctx context.Context, req *leaseholdv1.UpdateQueuePolicyRequest) (*leaseholdv1.UpdateQueuePolicyResponse, error) {
	c := a.c
	qp, err := c.v.UpdateQueuePolicy(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := checkQueue(ctx, "policy.queue", qp.Queue); err != nil {
		return nil, err
	}
	pol, err := c.store.UpdateQueuePolicy(ctx, tenantFrom(ctx), qp)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := toQueuePolicy(pol)
	var data map[string]any
	if b, err := protojson.Marshal(out); err == nil {
		data = map[string]any{"policy": json.RawMessage(b)}
	}
	c.audit(ctx, store.AuditQueuePolicyUpdated, pol.Queue, data)
	return &leaseholdv1.UpdateQueuePolicyResponse{Policy: out}, nil
}

func (a *adminService) PauseQueue(ctx context.Context, req *leaseholdv1.PauseQueueRequest) (*leaseholdv1.PauseQueueResponse, error) {
	q, err := a.c.v.PauseQueue(req)
	if err != nil {
		return nil, toStatus(ctx, a.c.log, err)
	}
	pol, err := a.setPaused(ctx, q, true)
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.PauseQueueResponse{Policy: pol}, nil
}

func (a *adminService) ResumeQueue(ctx context.Context, req *leaseholdv1.ResumeQueueRequest) (*leaseholdv1.ResumeQueueResponse, error) {
	q, err := a.c.v.ResumeQueue(req)
	if err != nil {
		return nil, toStatus(ctx, a.c.log, err)
	}
	pol, err := a.setPaused(ctx, q, false)
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.ResumeQueueResponse{Policy: pol}, nil
}

// setPaused pauses or resumes a validated queue name.
func (a *adminService) setPaused(ctx context.Context, q string, paused bool) (*leaseholdv1.QueuePolicy, error) {
	c := a.c
	if err := checkQueue(ctx, "queue", q); err != nil {
		return nil, err
	}
	tenant := tenantFrom(ctx)
	pol, err := c.store.SetQueuePaused(ctx, tenant, q, paused)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	action := store.AuditQueuePaused
	if !paused {
		action = store.AuditQueueResumed
		c.core.dispatcher.Wake(tenant, q) // its waiting jobs are claimable again
	}
	c.audit(ctx, action, q, nil)
	return toQueuePolicy(pol), nil
}

func (a *adminService) ListDeadJobs(ctx context.Context, req *leaseholdv1.ListDeadJobsRequest) (*leaseholdv1.ListDeadJobsResponse, error) {
	c := a.c
	p, err := c.v.ListDeadJobs(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := checkListScope(ctx, p.Queue, p.Filter.Queues); err != nil {
		return nil, err
	}
	p.Tenant = tenantFrom(ctx)
	page, err := c.store.ListDeadJobs(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, renameField(err, "cursor", "page_token"))
	}
	out := make([]*leaseholdv1.DeadJob, 0, len(page.DeadJobs))
	for _, d := range page.DeadJobs {
		if !inScope(ctx, d.Job.Queue) {
			continue // a scoped caller sees its queues' part of each page
		}
		out = append(out, toDeadJob(d))
	}
	return &leaseholdv1.ListDeadJobsResponse{DeadJobs: out, NextPageToken: page.NextCursor}, nil
}

func (a *adminService) GetDeadJob(ctx context.Context, req *leaseholdv1.GetDeadJobRequest) (*leaseholdv1.GetDeadJobResponse, error) {
	c := a.c
	id, err := c.v.GetDeadJob(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, id); err != nil {
		return nil, err
	}
	d, err := c.store.GetDeadJob(ctx, tenantFrom(ctx), id)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return &leaseholdv1.GetDeadJobResponse{DeadJob: toDeadJob(d)}, nil
}

func (a *adminService) ReplayDeadJob(ctx context.Context, req *leaseholdv1.ReplayDeadJobRequest) (*leaseholdv1.ReplayDeadJobResponse, error) {
	c := a.c
	p, err := c.v.ReplayDeadJob(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, p.JobID); err != nil {
		return nil, err
	}
	tenant := tenantFrom(ctx)
	p.Tenant, p.Now, p.Actor = tenant, c.now(), callerFrom(ctx).identity
	job, again, err := c.store.ReplayDeadJob(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditDeadJobReplayed, p.JobID, map[string]any{
		"replayed_as": job.ID, "reason": p.Reason, "already_replayed": again, "queue": job.Queue,
	})
	if !again {
		c.core.dispatcher.Wake(tenant, job.Queue)
	}
	c.core.watches.notify(tenant, p.JobID, job.ID)
	return &leaseholdv1.ReplayDeadJobResponse{Job: toJob(job), AlreadyReplayed: again}, nil
}

func (a *adminService) AbandonDeadJob(ctx context.Context, req *leaseholdv1.AbandonDeadJobRequest) (*leaseholdv1.AbandonDeadJobResponse, error) {
	c := a.c
	p, err := c.v.AbandonDeadJob(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkJobInScope(ctx, p.JobID); err != nil {
		return nil, err
	}
	p.Tenant, p.Now, p.Actor = tenantFrom(ctx), c.now(), callerFrom(ctx).identity
	d, err := c.store.AbandonDeadJob(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditDeadJobAbandoned, p.JobID, map[string]any{"reason": p.Reason, "queue": d.Job.Queue})
	c.core.watches.notify(p.Tenant, p.JobID)
	return &leaseholdv1.AbandonDeadJobResponse{DeadJob: toDeadJob(d)}, nil
}

// ListBreakers lists the tenant's breakers. Breakers are per tenant, not
// per queue, so a queue-scoped caller sees them all (they hold no job
// data).
func (a *adminService) ListBreakers(ctx context.Context, _ *leaseholdv1.ListBreakersRequest) (*leaseholdv1.ListBreakersResponse, error) {
	c := a.c
	bs, err := c.store.ListBreakers(ctx, tenantFrom(ctx))
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	now := c.now()
	out := make([]*leaseholdv1.Breaker, len(bs))
	for i := range bs {
		out[i] = toBreaker(&bs[i], now)
	}
	return &leaseholdv1.ListBreakersResponse{Breakers: out}, nil
}

func (a *adminService) GetBreaker(ctx context.Context, req *leaseholdv1.GetBreakerRequest) (*leaseholdv1.GetBreakerResponse, error) {
	c := a.c
	dep, err := c.v.GetBreaker(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	b, err := c.store.GetBreaker(ctx, tenantFrom(ctx), dep)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return &leaseholdv1.GetBreakerResponse{Breaker: toBreaker(b, c.now())}, nil
}

// breakerChange names what checkUnscoped refuses a scoped caller in
// ResetBreaker, ForceOpenBreaker and UpdateBreakerPolicy. A breaker is per
// (tenant, dependency) and holds back the jobs of every queue that use the
// dependency, so changing one is tenant-wide: a principal limited to some
// queues (operator or admin) reads breakers but changes none.
const breakerChange = "changing a circuit breaker"

func (a *adminService) ResetBreaker(ctx context.Context, req *leaseholdv1.ResetBreakerRequest) (*leaseholdv1.ResetBreakerResponse, error) {
	c := a.c
	if err := checkUnscoped(ctx, breakerChange); err != nil {
		return nil, err
	}
	p, err := c.v.ResetBreaker(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	p.Tenant, p.Now, p.Actor = tenantFrom(ctx), c.now(), callerFrom(ctx).identity
	b, err := c.store.ResetBreaker(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditBreakerReset, p.Dependency, map[string]any{"reason": p.Reason})
	// The dependency's jobs are claimable at once: do not leave them to
	// the next poll.
	c.core.dispatcher.WakeAll()
	return &leaseholdv1.ResetBreakerResponse{Breaker: toBreaker(b, p.Now)}, nil
}

func (a *adminService) ForceOpenBreaker(ctx context.Context, req *leaseholdv1.ForceOpenBreakerRequest) (*leaseholdv1.ForceOpenBreakerResponse, error) {
	c := a.c
	if err := checkUnscoped(ctx, breakerChange); err != nil {
		return nil, err
	}
	p, err := c.v.ForceOpenBreaker(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	p.Tenant, p.Now, p.Actor = tenantFrom(ctx), c.now(), callerFrom(ctx).identity
	b, err := c.store.ForceOpenBreaker(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditBreakerForcedOpen, p.Dependency, map[string]any{"reason": p.Reason, "duration": p.Duration.String()})
	return &leaseholdv1.ForceOpenBreakerResponse{Breaker: toBreaker(b, p.Now)}, nil
}

func (a *adminService) UpdateBreakerPolicy(ctx context.Context, req *leaseholdv1.UpdateBreakerPolicyRequest) (*leaseholdv1.UpdateBreakerPolicyResponse, error) {
	c := a.c
	if err := checkUnscoped(ctx, breakerChange); err != nil {
		return nil, err
	}
	pol, err := c.v.UpdateBreakerPolicy(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	now := c.now()
	b, err := c.store.UpdateBreakerPolicy(ctx, store.UpdateBreakerPolicyParams{
		Tenant: tenantFrom(ctx), Policy: pol, Actor: callerFrom(ctx).identity, Now: now,
	})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := toBreaker(b, now)
	var data map[string]any
	if raw, err := protojson.Marshal(out.GetPolicy()); err == nil {
		data = map[string]any{"policy": json.RawMessage(raw)}
	}
	c.audit(ctx, store.AuditBreakerPolicyUpdated, pol.Dependency, data)
	return &leaseholdv1.UpdateBreakerPolicyResponse{Breaker: out}, nil
}

func (a *adminService) ListBreakerEvents(ctx context.Context, req *leaseholdv1.ListBreakerEventsRequest) (*leaseholdv1.ListBreakerEventsResponse, error) {
	c := a.c
	p, err := c.v.ListBreakerEvents(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	p.Tenant = tenantFrom(ctx)
	evs, err := c.store.ListBreakerEvents(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := make([]*leaseholdv1.BreakerEvent, len(evs))
	for i, e := range evs {
		out[i] = &leaseholdv1.BreakerEvent{
			Dependency: e.Dependency, Sequence: e.Sequence, Type: breakerEventTypes[e.Type], Time: ts(e.Time), Data: e.Data,
		}
	}
	return &leaseholdv1.ListBreakerEventsResponse{Events: out}, nil
}

func (a *adminService) ListWorkers(ctx context.Context, _ *leaseholdv1.ListWorkersRequest) (*leaseholdv1.ListWorkersResponse, error) {
	ws := a.c.listWorkers(tenantFrom(ctx))
	if callerFrom(ctx).scoped() {
		// A scoped caller sees the workers that consume one of its
		// queues.
		ws = slices.DeleteFunc(ws, func(w *leaseholdv1.WorkerInfo) bool {
			return !slices.ContainsFunc(w.GetQueues(), func(q string) bool { return inScope(ctx, q) })
		})
	}
	return &leaseholdv1.ListWorkersResponse{Workers: ws}, nil
}
