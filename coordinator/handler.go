package coordinator

import (
	"context"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/store"
)

// The shapes of a handler. Each checks the call, calls the core and maps
// the error with toStatus, so that a handler holds only what is its own:
// which store call, and how its answer is encoded.

// leaseCall runs a worker call that acts on one lease: refused with verr
// when the request did not decode; otherwise the token's worker id is
// checked against the caller (worker_identity.go) and call runs with the
// caller's tenant and the injected clock.
func leaseCall[R any](ctx context.Context, c *Coordinator, tok store.LeaseToken, verr error,
	call func(tenant string, now time.Time) (R, error),
) (R, error) {
	var zero R
	if verr != nil {
		return zero, toStatus(ctx, c.log, verr)
	}
	if err := c.checkWorker(ctx, tok.WorkerID); err != nil {
		return zero, err
	}
	tenant := tenantFrom(ctx)
	c.sawWorker(tenant, tok.WorkerID)
	out, err := call(tenant, c.now())
	if err != nil {
		return zero, toStatus(ctx, c.log, err)
	}
	return out, nil
}

// reportCall runs a unary terminal report (Complete, Retry, Cancel,
// Release) through the same entry as a stream's report (Coordinator.report)
// and wraps the job it left in the RPC's response.
func reportCall[R any](ctx context.Context, c *Coordinator, req proto.Message, wrap func(*store.Job) R) (R, error) {
	_, _, rep, err := c.v.Report(req)
	return leaseCall(ctx, c, rep.Token, err, func(tenant string, _ time.Time) (R, error) {
		rep.Tenant = tenant
		job, err := c.report(ctx, rep)
		if err != nil {
			var zero R
			return zero, err
		}
		return wrap(job), nil
	})
}

// report is Coordinator.reports for one report: the entry of a unary
// report and of a report sent alone on a stream.
func (c *Coordinator) report(ctx context.Context, rep store.Report) (*store.Job, error) {
	jobs, errs := c.reports(ctx, []store.Report{rep})
	return jobs[0], errs[0]
}

// reports is the one entry of terminal reports, unary or sent on a stream
// (alone or in a ReportBatch): reps (decoded by validator.Report, their
// tenant set) are committed together with everyone else's reports, and
// what a committed report does follows (finished). Each report gets its
// own answer, exactly as if sent alone: a job, or its own refusal or the
// batch's fault.
func (c *Coordinator) reports(ctx context.Context, reps []store.Report) ([]*store.Job, []error) {
	jobs := make([]*store.Job, len(reps))
	errs := make([]error, len(reps))
	now := c.now()
	valid := make([]store.Report, 0, len(reps))
	at := make([]int, 0, len(reps))
	for i := range reps {
		reps[i].Now = now
		// Checked alone, so that an invalid report is refused by itself,
		// naming its own field rather than its place in a batch.
		if errs[i] = store.ValidateReport(reps[i]); errs[i] == nil {
			valid = append(valid, reps[i])
			at = append(at, i)
		}
	}
	if len(valid) == 0 {
		return jobs, errs
	}
	res, err := c.store.ApplyReports(ctx, valid)
	for k, i := range at {
		if err != nil {
			errs[i] = err
			continue
		}
		jobs[i], errs[i] = res[k].Job, res[k].Err
		if errs[i] == nil {
			c.finished(ctx, reps[i].Tenant, jobs[i])
		}
	}
	return jobs, errs
}
