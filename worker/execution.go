package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// reportTimeout bounds publishing one outcome (retries included). Reports
// run on a context detached from shutdown: an outcome computed during the
// grace period must still reach the coordinator.
const reportTimeout = 30 * time.Second

// execution is one held lease and the handler running on it.
type execution struct {
	w     *Worker
	token *leaseholdv1.LeaseToken
	key   leaseKey
	job   *Job
	// ctx is the handler's context; cancel's cause says why it ended.
	ctx    context.Context
	cancel context.CancelCauseFunc

	// mu guards the fields below. Lock order: Worker.mu, then execution.mu.
	mu sync.Mutex
	// lost: the lease is gone; nothing more may be published for it.
	lost bool
	// released: shutdown gave the lease back; nothing more may be published.
	released bool
	// cancelRequested: a client asked to cancel; cancelReason is theirs.
	cancelRequested bool
	cancelReason    string
	// claimed: the single right to publish the lease's outcome (complete,
	// retry, cancel or release) has been taken.
	claimed bool
	// effectsCalled holds the effect keys this attempt has called.
	effectsCalled map[string]bool
}

// leaseKey identifies one lease: a job may be leased to this worker again
// (a newer generation) while the handler of a lost older lease still runs.
type leaseKey struct {
	jobID      string
	generation int64
}

func keyOf(t *leaseholdv1.LeaseToken) leaseKey {
	return leaseKey{jobID: t.GetJobId(), generation: t.GetLeaseGeneration()}
}

// markLost fences the execution off: its handler is cancelled with cause
// ErrLeaseLost and its outcome will be dropped.
func (e *execution) markLost() {
	e.mu.Lock()
	e.lost = true
	e.mu.Unlock()
	e.cancel(ErrLeaseLost)
}

// markCancelRequested cancels the handler with cause ErrCancelRequested; a
// failed outcome is then reported as an acknowledged cancellation.
func (e *execution) markCancelRequested(reason string) {
	e.mu.Lock()
	if e.lost {
		e.mu.Unlock()
		return
	}
	e.cancelRequested = true
	if reason != "" {
		e.cancelReason = reason
	}
	e.mu.Unlock()
	e.cancel(ErrCancelRequested)
}

// reporting reports whether the lease's outcome (complete, retry, cancel
// or release) is being, or has been, published.
func (e *execution) reporting() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.claimed || e.released
}

// heartbeatable reports whether the lease is still worth renewing.
func (e *execution) heartbeatable() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.lost && !e.released
}

// checkPublishable returns ErrLeaseLost once nothing may be published.
func (e *execution) checkPublishable() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lost || e.released {
		return ErrLeaseLost
	}
	return nil
}

// publishError turns a refused lease-bound call into ErrLeaseLost (and
// fences the execution); other errors pass through.
func (e *execution) publishError(err error) error {
	if isLeaseLost(err) {
		e.markLost()
		// One %w only: callers match ErrLeaseLost, and the gRPC status
		// stays out of the chain so status.Code does not see through it.
		return fmt.Errorf("%w: %v", ErrLeaseLost, err) //nolint:errorlint // one %w, see above
	}
	return err
}

// startEffect records that this attempt is about to call key and reports
// whether it is the first time.
func (e *execution) startEffect(key string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.effectsCalled[key] {
		return false
	}
	if e.effectsCalled == nil {
		e.effectsCalled = map[string]bool{}
	}
	e.effectsCalled[key] = true
	return true
}

// outcomeRight is the state in which the publishing right was taken.
type outcomeRight struct {
	ok              bool // false: someone else already took it
	lost            bool
	cancelRequested bool
	cancelReason    string
}

// claim takes the single right to publish the lease's outcome. release says
// the taker is shutdown giving the lease back.
func (e *execution) claim(release bool) outcomeRight {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.claimed {
		return outcomeRight{}
	}
	e.claimed = true
	if release && !e.lost {
		e.released = true
	}
	return outcomeRight{ok: true, lost: e.lost, cancelRequested: e.cancelRequested, cancelReason: e.cancelReason}
}

// execute runs the handler on e and publishes its outcome. It runs on its
// own goroutine, counted in Worker.active.
func (w *Worker) execute(e *execution) {
	defer w.finished(e)
	ctx, span := w.startSpan(e)
	defer span.End() // after the report, which is its child
	result, err := w.callHandler(ctx, e.job)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	w.handlerReturned()
	w.publish(ctx, e, result, err)
}

// callHandler runs the job's handler, turning a panic into a retryable
// failure coded PANIC: one bad job must never crash the worker (and with it
// every other lease it holds).
func (w *Worker) callHandler(ctx context.Context, job *Job) (result []byte, err error) {
	h := w.handlerFor(job.Kind)
	if h == nil {
		// Retryable: a newer worker that knows the kind may be deployed.
		return nil, WithCode(codeNoHandler, fmt.Errorf("no handler registered for kind %q", job.Kind))
	}
	defer func() {
		if r := recover(); r != nil {
			// The stack goes to the log only: the job's error is shown to
			// producers and operators, who need the panic, not our frames.
			w.log.ErrorContext(ctx, "handler panicked", slog.String("job_id", job.ID), slog.String("kind", job.Kind),
				slog.String("panic", fmt.Sprint(r)), slog.String("stack", string(debug.Stack())))
			result, err = nil, WithCode(codePanic, fmt.Errorf("panic: %v", r))
		}
	}()
	return h(ctx, job)
}

// publish reports the handler's outcome, unless the lease is lost (nothing
// may be published) or shutdown already released it. spanCtx is the
// handler's: the report is a span under it (the handler may have returned
// because spanCtx ended, so only its values are kept).
func (w *Worker) publish(spanCtx context.Context, e *execution, result []byte, handlerErr error) {
	right := e.claim(false)
	if !right.ok {
		return
	}
	attrs := []any{slog.String("job_id", e.key.jobID), slog.Int64("generation", e.key.generation)}
	if right.lost {
		w.log.InfoContext(spanCtx, "lease lost while the handler ran; outcome dropped", attrs...)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(spanCtx), reportTimeout)
	defer cancel()
	var (
		what  string
		kind  leaseholdv1.ReportKind
		msg   *leaseholdv1.ConnectRequest
		unary func(ctx context.Context) error
	)
	switch {
	case handlerErr == nil:
		// Even after a cancel request: the work is done, and reporting it
		// cancelled would hide side effects that happened. The coordinator's
		// compare-and-set decides between the two.
		what, kind = "complete", leaseholdv1.ReportKind_REPORT_KIND_COMPLETE
		req := &leaseholdv1.CompleteRequest{Token: e.token, Result: result}
		msg = &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Complete{Complete: req}}
		unary = func(ctx context.Context) error {
			_, err := w.api.Complete(ctx, req)
			return err
		}
	case right.cancelRequested:
		what, kind = "acknowledge cancel", leaseholdv1.ReportKind_REPORT_KIND_CANCEL
		req := &leaseholdv1.CancelRequest{Token: e.token, Reason: truncate(cmp.Or(right.cancelReason, "cancel requested"), 1024)}
		msg = &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Cancel{Cancel: req}}
		unary = func(ctx context.Context) error {
			_, err := w.api.Cancel(ctx, req)
			return err
		}
	case errors.Is(context.Cause(e.ctx), ErrShutdown): //nolint:contextcheck // reads why the execution's own context ended
		// Cut short by shutdown: give the job back without spending the
		// attempt.
		what, kind = "release", leaseholdv1.ReportKind_REPORT_KIND_RELEASE
		req := &leaseholdv1.ReleaseRequest{Token: e.token}
		msg = &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Release{Release: req}}
		unary = func(ctx context.Context) error {
			_, err := w.api.Release(ctx, req)
			return err
		}
	default:
		f := classify(handlerErr)
		what, kind = "retry", leaseholdv1.ReportKind_REPORT_KIND_RETRY
		req := &leaseholdv1.RetryRequest{
			Token: e.token,
			Error: &leaseholdv1.JobError{Code: f.code, Message: f.message, Retryable: f.retryable},
		}
		if f.retryAfter > 0 {
			req.RetryAfter = durationpb.New(f.retryAfter)
		}
		attrs = append(attrs, slog.String("error_code", f.code), slog.Bool("retryable", f.retryable))
		msg = &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Retry{Retry: req}}
		unary = func(ctx context.Context) error {
			_, err := w.api.Retry(ctx, req)
			return err
		}
	}
	// The stream carries the report when it can (no request per job); the
	// unary call is the fallback, always safe to repeat.
	call := func(ctx context.Context) error {
		w.mu.Lock()
		s := w.sess
		w.mu.Unlock()
		if s != nil {
			msg.TraceContext = sampledTraceContext(ctx)
			if sent, err := s.sendReport(ctx, kind, e.token, msg); sent {
				return err
			}
		}
		return unary(ctx)
	}
	ctx, span := w.tracer.Start(ctx, reportSpanNames[kind], reportSpanStart...)
	err := retryTransient(ctx, call)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	switch {
	case err == nil:
		w.log.DebugContext(ctx, "reported "+what, attrs...)
	case isLeaseLost(err):
		e.markLost()
		w.log.InfoContext(ctx, "lease lost before "+what+"; outcome dropped", append(attrs, slog.Any("error", err))...)
	default:
		// The lease expires and the job is retried elsewhere: at least once.
		w.log.ErrorContext(ctx, "could not "+what+"; the lease will expire", append(attrs, slog.Any("error", err))...)
	}
}

// sampledTraceContext is ctx's span context in W3C form when that span is
// sampled, for a report sent on the stream (the unary calls carry it in
// gRPC metadata): the coordinator's commit of the report then joins its
// trace. Nil otherwise, so an unsampled report costs nothing more.
func sampledTraceContext(ctx context.Context) map[string]string {
	if !trace.SpanContextFromContext(ctx).IsSampled() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier
}

// reportSpanNames name a report's span after the RPC it stands for, on the
// stream or unary.
var reportSpanNames = map[leaseholdv1.ReportKind]string{
	leaseholdv1.ReportKind_REPORT_KIND_COMPLETE: "leasehold.report Complete",
	leaseholdv1.ReportKind_REPORT_KIND_RETRY:    "leasehold.report Retry",
	leaseholdv1.ReportKind_REPORT_KIND_CANCEL:   "leasehold.report Cancel",
	leaseholdv1.ReportKind_REPORT_KIND_RELEASE:  "leasehold.report Release",
}

// release gives a lease back (shutdown, or a lease this worker cannot take).
// It runs on its own goroutine, counted in Worker.active.
// The release must go out even when ctx (a stream's, or the worker's
// shutdown) has ended, so it keeps only ctx's values and is bounded by
// reportTimeout.
func (w *Worker) release(ctx context.Context, token *leaseholdv1.LeaseToken, why string) {
	defer w.doneActive()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	err := retryTransient(ctx, func(ctx context.Context) error {
		_, err := w.api.Release(ctx, &leaseholdv1.ReleaseRequest{Token: token})
		return err
	})
	attrs := []any{slog.String("job_id", token.GetJobId()), slog.Int64("generation", token.GetLeaseGeneration()), slog.String("why", why)}
	if err != nil && !isLeaseLost(err) {
		w.log.WarnContext(ctx, "could not release lease; it will expire", append(attrs, slog.Any("error", err))...)
		return
	}
	w.log.DebugContext(ctx, "released lease", attrs...)
}

// startSpan starts the handler's span, linked (not parented) to the
// producer's span carried in the job metadata: the job runs in its own
// trace, later and possibly many times, but stays navigable to its cause.
// The job's attributes are set only when the span records: a job that is
// not sampled costs no allocation for them (a sampler decides without
// them; the standard ones do not read attributes).
func (w *Worker) startSpan(e *execution) (context.Context, trace.Span) {
	j := e.job
	opts := jobSpanStart
	// Most jobs carry no producer's trace context: Extract (and the stack
	// growth its frame costs the handler's new goroutine, 5% of a worker's
	// CPU in a drain profile) runs only when there is one to read. Extract
	// finds nothing without a traceparent, so the link is the same.
	if j.Metadata[traceparentKey] != "" {
		producer := trace.SpanContextFromContext(
			propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(j.Metadata)))
		if producer.IsValid() {
			opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: producer}))
		}
	}
	ctx, span := w.tracer.Start(e.ctx, "leasehold.job "+j.Kind, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("leasehold.job.id", j.ID),
			attribute.String("leasehold.job.queue", j.Queue),
			attribute.String("leasehold.job.kind", j.Kind),
			attribute.Int("leasehold.job.attempt", int(j.Attempt)),
			attribute.Int64("leasehold.lease.generation", j.Token.Generation),
			attribute.String("leasehold.worker.id", j.Token.WorkerID),
		)
	}
	return ctx, span
}

// traceparentKey is the W3C header propagation.TraceContext reads first.
const traceparentKey = "traceparent"

// The start options of the handler's and the reports' spans, built once.
var (
	jobSpanStart    = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer)}
	reportSpanStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindClient)}
)
