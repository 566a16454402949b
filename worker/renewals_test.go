package worker

import (
	"context"
	"errors"
	"testing"

	"google.golang.org/grpc"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// unusedConn is a connection the test never calls through.
type unusedConn struct{ grpc.ClientConnInterface }

// runningLease adds an execution for job to w's running set, as if its
// lease had been received, and returns it.
func runningLease(w *Worker, job string) *execution {
	tok := &leaseholdv1.LeaseToken{JobId: job, LeaseGeneration: 1, WorkerId: w.ID()}
	ctx, cancel := context.WithCancelCause(context.Background())
	e := &execution{w: w, token: tok, key: keyOf(tok), ctx: ctx, cancel: cancel}
	w.mu.Lock()
	w.running[e.key] = e
	w.mu.Unlock()
	return e
}

// A heartbeat answer of RENEW_STATUS_REPORTED for a lease whose outcome
// this worker is reporting is no loss: the handler's context stays as it
// is and the lease is not fenced. For a lease it made no report for, the
// lease is gone all the same (the coordinator released it): lost.
func TestRenewReportedIsQuietOnlyForALeaseBeingReported(t *testing.T) {
	t.Parallel()
	w, err := New(unusedConn{}, Config{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	reporting, silent := runningLease(w, "reporting"), runningLease(w, "silent")
	if !reporting.claim(false).ok {
		t.Fatal("the outcome right was taken already")
	}
	w.applyRenewals([]*leaseholdv1.RenewResult{
		{Token: reporting.token, Status: leaseholdv1.RenewStatus_RENEW_STATUS_REPORTED},
		{Token: silent.token, Status: leaseholdv1.RenewStatus_RENEW_STATUS_REPORTED},
	})
	if err := reporting.checkPublishable(); err != nil || reporting.ctx.Err() != nil {
		t.Errorf("the lease being reported: publishable %v, context %v; want untouched", err, context.Cause(reporting.ctx))
	}
	if err := silent.checkPublishable(); !errors.Is(err, ErrLeaseLost) || !errors.Is(context.Cause(silent.ctx), ErrLeaseLost) {
		t.Errorf("a lease with no report of ours: publishable %v, context %v; want ErrLeaseLost", err, context.Cause(silent.ctx))
	}
}
