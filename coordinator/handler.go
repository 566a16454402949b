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

// report is the one entry of a terminal report, unary or sent on a
// stream: rep (decoded by validator.Report, its tenant set) is committed
// with everyone else's reports, and what a committed report does follows
// (finished). The error is the report's own refusal or the batch's fault.
func (c *Coordinator) report(ctx context.Context, rep store.Report) (*store.Job, error) {
	rep.Now = c.now()
	// Checked alone first, so that a refusal names the report's own field
	// rather than its place in a batch.
	if err := store.ValidateReport(rep); err != nil {
		return nil, err
	}
	res, err := c.store.ApplyReports(ctx, []store.Report{rep})
	if err == nil {
		err = res[0].Err
	}
	if err != nil {
		return nil, err
	}
	c.finished(ctx, rep.Tenant, res[0].Job)
	return res[0].Job, nil
}
