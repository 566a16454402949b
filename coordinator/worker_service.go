package coordinator

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/coordinator/dispatch"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// APIVersion is reported by GetVersion.
const APIVersion = "leasehold.v1"

// Capabilities are the features this server supports, reported by
// GetVersion.
var Capabilities = []string{
	"connect_stream", "long_poll_claim", "idempotency", "effect_ledger",
	"checkpoints", "dead_letter", "watch_job", "stream_reports", "lease_secrets",
	"list_views", "pushed_watches", "retry_info", "circuit_breakers", "key_limits",
	"worker_credits", "renew_reported", "lease_acks", "schedules", "unique_jobs",
	"job_filters", "bulk_operations", "queue_counts_max_staleness",
	CapabilityLeaseBatches, CapabilityReportBatches,
}

// The capabilities of stream batches (docs/streams.md), both withdrawn by
// Config.StreamBatchesOff.
const (
	// CapabilityLeaseBatches: a worker that declares the lease_batches
	// feature may be pushed LeaseBatch and ReportResultBatch messages.
	CapabilityLeaseBatches = "lease_batches"
	// CapabilityReportBatches: the stream takes ReportBatch messages.
	CapabilityReportBatches = "report_batches"
)

// capabilities is what GetVersion reports under cfg.
func capabilities(cfg *Config) []string {
	if !cfg.StreamBatchesOff {
		return Capabilities
	}
	return slices.DeleteFunc(slices.Clone(Capabilities), func(c string) bool {
		return c == CapabilityLeaseBatches || c == CapabilityReportBatches
	})
}

// workerService is the worker API: thin shells over the store, plus the
// Connect stream (session.go).
type workerService struct {
	leaseholdv1.UnimplementedWorkerServiceServer
	c *Coordinator
}

// Claim leases jobs through the dispatcher, like a stream's credits, so
// that unary and stream workers share the same fair rounds. Without wait
// the next round answers it, with whatever it found; with wait it stays a
// waiter until a round brings jobs, the wait passes (an empty answer), or
// the coordinator shuts down (an empty answer too: the caller simply
// claims again, elsewhere).
func (w *workerService) Claim(ctx context.Context, req *leaseholdv1.ClaimRequest) (*leaseholdv1.ClaimResponse, error) {
	c := w.c
	cr, err := c.v.Claim(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	p := cr.params
	if err := c.checkClaim(ctx, p.Worker, p.Queues); err != nil {
		return nil, err
	}
	p.Tenant = tenantFrom(ctx)
	c.sawWorker(p.Tenant, p.Worker, p.Queues...)
	jobs, err := c.claim(ctx, p, cr.wait)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if len(jobs) > 0 {
		// The first granted lease binds the worker id; refused (another
		// principal bound it meanwhile), the leases go back.
		if err := c.checkWorker(ctx, p.Worker); err != nil {
			c.releaseAll(ctx, p.Tenant, jobs)
			return nil, err
		}
	}
	c.leasesClaimed(ctx, p.Tenant, jobs)
	out := make([]*leaseholdv1.LeasedJob, 0, len(jobs))
	for _, j := range jobs {
		out = append(out, toLeasedJob(j, c.identity.leases.sign(j.Token)))
	}
	return &leaseholdv1.ClaimResponse{Jobs: out}, nil
}

// claim registers a one-shot waiter with the dispatcher and waits for its
// answer.
func (c *Coordinator) claim(ctx context.Context, p store.ClaimParams, wait time.Duration) ([]store.ClaimedJob, error) {
	type answer struct {
		jobs []store.ClaimedJob
		err  error
	}
	var (
		mu     sync.Mutex // guards done
		done   bool
		result = make(chan answer, 1)
	)
	settle := func(a answer) bool {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return false
		}
		done = true
		result <- a
		return true
	}
	waiter := &dispatch.Waiter{
		Tenant: p.Tenant, Worker: p.Worker, Queues: p.Queues, LeaseDuration: p.LeaseDuration,
		OneShot: true, Immediate: wait == 0,
		Deliver: func(jobs []store.ClaimedJob) bool { return settle(answer{jobs: jobs}) },
		Fail:    func(err error) { settle(answer{err: err}) },
	}
	select {
	case <-c.life.closing:
		return nil, nil
	default:
	}
	if !c.core.dispatcher.Add(waiter, p.Max) {
		return nil, nil
	}
	var timeout <-chan time.Time
	if wait > 0 {
		timer := time.NewTimer(wait)
		defer timer.Stop()
		timeout = timer.C
	}
	select {
	case a := <-result:
		c.claimed(a.jobs)
		return a.jobs, a.err
	case <-timeout:
	case <-ctx.Done():
	case <-c.core.dispatcher.Quiesced():
	case <-c.life.closing:
	}
	c.core.dispatcher.Remove(waiter)
	if settle(answer{}) {
		return nil, ctx.Err() // nothing was delivered
	}
	a := <-result // delivered while we stopped waiting
	if ctx.Err() != nil && len(a.jobs) > 0 {
		// Nobody will read the answer: give the jobs back now rather
		// than let them sit out a lease.
		c.releaseAll(ctx, p.Tenant, a.jobs)
		return nil, ctx.Err()
	}
	c.claimed(a.jobs)
	return a.jobs, a.err
}

// claimed counts leases handed out by a unary Claim.
func (c *Coordinator) claimed(jobs []store.ClaimedJob) {
	if len(jobs) > 0 {
		c.core.activity.leased.Add(int64(len(jobs)))
		for _, j := range jobs {
			c.core.watches.notify(j.Job.Tenant, j.Job.ID)
		}
	}
}

// releaseAll releases leases nobody received, in one batch. It detaches
// from ctx (already cancelled) with a short timeout: releasing spares the
// jobs a lease of waiting, and failing to is harmless (the leases expire).
func (c *Coordinator) releaseAll(ctx context.Context, tenant string, jobs []store.ClaimedJob) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	reports := make([]store.Report, len(jobs))
	for i, j := range jobs {
		reports[i] = store.Report{Kind: store.ReportRelease, Tenant: tenant, Token: j.Token, Now: c.now()}
	}
	_, _ = c.store.ApplyReports(rctx, reports)
}

func (w *workerService) Renew(ctx context.Context, req *leaseholdv1.RenewRequest) (*leaseholdv1.RenewResponse, error) {
	c := w.c
	p, err := c.v.Renew(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := c.checkWorkers(ctx, p.Tokens); err != nil {
		return nil, err
	}
	p.Tenant, p.Now = tenantFrom(ctx), c.now()
	c.sawTokens(p.Tenant, p.Tokens)
	res, err := c.store.Renew(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return &leaseholdv1.RenewResponse{Results: toRenewResults(res)}, nil
}

func (w *workerService) Complete(ctx context.Context, req *leaseholdv1.CompleteRequest) (*leaseholdv1.CompleteResponse, error) {
	return reportCall(ctx, w.c, req, func(j *store.Job) *leaseholdv1.CompleteResponse {
		return &leaseholdv1.CompleteResponse{Job: toJob(j)}
	})
}

func (w *workerService) Retry(ctx context.Context, req *leaseholdv1.RetryRequest) (*leaseholdv1.RetryResponse, error) {
	return reportCall(ctx, w.c, req, func(j *store.Job) *leaseholdv1.RetryResponse {
		return &leaseholdv1.RetryResponse{Job: toJob(j)}
	})
}

func (w *workerService) Cancel(ctx context.Context, req *leaseholdv1.CancelRequest) (*leaseholdv1.CancelResponse, error) {
	return reportCall(ctx, w.c, req, func(j *store.Job) *leaseholdv1.CancelResponse {
		return &leaseholdv1.CancelResponse{Job: toJob(j)}
	})
}

func (w *workerService) Release(ctx context.Context, req *leaseholdv1.ReleaseRequest) (*leaseholdv1.ReleaseResponse, error) {
	return reportCall(ctx, w.c, req, func(j *store.Job) *leaseholdv1.ReleaseResponse {
		return &leaseholdv1.ReleaseResponse{Job: toJob(j)}
	})
}

// finished records that a job's lease ended through a unary call: the
// holding stream stops tracking it, watchers wake, and a job back in its
// queue wakes dispatch.
func (c *Coordinator) finished(ctx context.Context, tenant string, job *store.Job) {
	c.core.activity.ended(job.State)
	c.core.metrics.jobEnded(ctx, tenant, job)
	c.leaseEnded(tenant, job)
	c.core.watches.notify(tenant, job.ID)
	if job.State == store.JobStateQueued {
		c.core.dispatcher.Wake(tenant, job.Queue)
	}
}

func (w *workerService) SaveCheckpoint(ctx context.Context, req *leaseholdv1.SaveCheckpointRequest) (*leaseholdv1.SaveCheckpointResponse, error) {
	c := w.c
	p, err := c.v.SaveCheckpoint(req)
	return leaseCall(ctx, c, p.Token, err, func(tenant string, now time.Time) (*leaseholdv1.SaveCheckpointResponse, error) {
		p.Tenant, p.Now = tenant, now
		cp, err := c.store.SaveCheckpoint(ctx, p)
		if err != nil {
			return nil, err
		}
		c.core.watches.notify(p.Tenant, p.Token.JobID)
		return &leaseholdv1.SaveCheckpointResponse{Checkpoint: toCheckpoint(cp)}, nil
	})
}

func (w *workerService) ReserveEffect(ctx context.Context, req *leaseholdv1.ReserveEffectRequest) (*leaseholdv1.ReserveEffectResponse, error) {
	c := w.c
	p, err := c.v.ReserveEffect(req)
	return leaseCall(ctx, c, p.Token, err, func(tenant string, now time.Time) (*leaseholdv1.ReserveEffectResponse, error) {
		p.Tenant, p.Now = tenant, now
		eff, reserved, err := c.store.ReserveEffect(ctx, p)
		return &leaseholdv1.ReserveEffectResponse{Effect: toEffect(eff), Reserved: reserved}, err
	})
}

func (w *workerService) RecordEffect(ctx context.Context, req *leaseholdv1.RecordEffectRequest) (*leaseholdv1.RecordEffectResponse, error) {
	c := w.c
	p, err := c.v.RecordEffect(req)
	return leaseCall(ctx, c, p.Token, err, func(tenant string, now time.Time) (*leaseholdv1.RecordEffectResponse, error) {
		p.Tenant, p.Now = tenant, now
		eff, err := c.store.RecordEffect(ctx, p)
		return &leaseholdv1.RecordEffectResponse{Effect: toEffect(eff)}, err
	})
}

func (w *workerService) GetVersion(ctx context.Context, _ *leaseholdv1.GetVersionRequest) (*leaseholdv1.GetVersionResponse, error) {
	c := w.c
	now := c.now()
	if now.IsZero() {
		var err error
		if now, err = c.store.Now(ctx); err != nil {
			return nil, toStatus(ctx, c.log, err)
		}
	}
	return &leaseholdv1.GetVersionResponse{
		Version: c.cfg.Version, ApiVersion: APIVersion, Capabilities: capabilities(&c.cfg),
		StoreEngine: c.store.Engine(), ServerTime: timestamppb.New(now),
		Caller: callerFrom(ctx).principal(),
	}, nil
}
