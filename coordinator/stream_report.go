package coordinator

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// streamReportsMax bounds the reports of one stream being committed at
// once. A worker never has more outstanding reports than leases (at most
// CreditsMax); past the bound the stream's receiver waits, which stops
// reading the stream and so pushes back through HTTP/2 flow control.
const streamReportsMax = CreditsMax

// streamReport is a report sent on the Connect stream, decoded.
type streamReport struct {
	kind leaseholdv1.ReportKind
	rep  store.Report
	tok  *leaseholdv1.LeaseToken // as sent, to correlate the answer
	err  error                   // why the report is invalid
	// parent is the worker's span of this report (ConnectRequest's
	// trace_context), valid only when the worker sampled it.
	parent trace.SpanContext
}

// traceContextValueMax bounds a trace_context value (W3C tracestate's own
// limit is 512 characters; a traceparent is 55).
const traceContextValueMax = 512

// spanStreamReport names the coordinator's span of a report sent on a
// stream, a child of the worker's report span, ended when the report's
// commit returned. The group commit's span links to it, so the commit is
// found from the report's own trace (not from the hours-long Connect span).
const spanStreamReport = "leasehold.stream.report "

// reportParent validates a report's trace_context and returns the span it
// names when that span is sampled.
func reportParent(tc map[string]string) (trace.SpanContext, error) {
	if len(tc) == 0 {
		return trace.SpanContext{}, nil
	}
	for k, v := range tc {
		if k != "traceparent" && k != "tracestate" {
			return trace.SpanContext{}, store.Invalid("trace_context", `only the keys "traceparent" and "tracestate" are allowed`)
		}
		if len(v) > traceContextValueMax {
			return trace.SpanContext{}, store.Invalid("trace_context", fmt.Sprintf("%s is longer than %d bytes", k, traceContextValueMax))
		}
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(tc)))
	if !sc.IsSampled() {
		return trace.SpanContext{}, nil
	}
	return sc, nil
}

// withoutSpan is ctx with no current span. A stream's reports that carry
// no sampled trace context commit under it, so their group commit links to
// nothing rather than to the stream's long-lived span.
func withoutSpan(ctx context.Context) context.Context {
	return trace.ContextWithSpanContext(ctx, trace.SpanContext{})
}

// reportCarrier is a message that may carry a report: a ConnectRequest,
// or one item of a ReportBatch.
type reportCarrier interface {
	GetComplete() *leaseholdv1.CompleteRequest
	GetRetry() *leaseholdv1.RetryRequest
	GetCancel() *leaseholdv1.CancelRequest
	GetRelease() *leaseholdv1.ReleaseRequest
	GetTraceContext() map[string]string
}

// decodeReport decodes m when it is a report; ok is false for any other
// message.
func (s *session) decodeReport(m reportCarrier) (r streamReport, ok bool) {
	var req proto.Message
	switch {
	case m.GetComplete() != nil:
		req = m.GetComplete()
	case m.GetRetry() != nil:
		req = m.GetRetry()
	case m.GetCancel() != nil:
		req = m.GetCancel()
	case m.GetRelease() != nil:
		req = m.GetRelease()
	default:
		return streamReport{}, false
	}
	kind, tok, rep, err := s.c.v.Report(req)
	if err == nil && rep.Token.WorkerID != s.hello.workerID {
		err = store.Invalid("token.worker_id", "a stream reports only for its own worker_id")
	}
	var parent trace.SpanContext
	if err == nil {
		parent, err = reportParent(m.GetTraceContext())
	}
	rep.Tenant = s.tenant
	return streamReport{kind: kind, rep: rep, tok: tok, err: err, parent: parent}, true
}

// report commits one stream report through the entry unary reports take
// too (Coordinator.report) and queues its answer. It runs on its own
// goroutine, so that one stream's reports join the same batches as
// everyone else's instead of waiting for each other's commits.
func (s *session) report(r streamReport) {
	defer func() {
		<-s.reportSlots
		s.reports.Done()
	}()
	ctx, end := s.reportSpan(r)
	job, err := s.c.report(ctx, r.rep)
	end(err)
	if out, ok := s.answer(r, job, err); ok {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.enqueueAnswerLocked(out)
	}
}

// enqueueAnswerLocked queues a report's answer (a ConnectResponse holding
// a ReportResult) with answerSize for its size. s.mu held.
func (s *session) enqueueAnswerLocked(m *leaseholdv1.ConnectResponse) {
	s.enqueueSizedLocked(m, answerSize(m.GetReportResult()))
}

// answerSize bounds the encoded size of a ConnectResponse holding r from
// above, without walking it as proto.Size does (once per report): the
// bounds it feeds, the outbound queue's and a batch's, need no more. The
// fixed part covers every tag, length and varint (a negative code takes
// ten bytes); the rest is the strings' and the secret's lengths.
func answerSize(r *leaseholdv1.ReportResult) int {
	t := r.GetToken()
	return answerSizeFixed + len(t.GetJobId()) + len(t.GetWorkerId()) + len(t.GetSecret()) + len(r.GetReason()) + len(r.GetMessage())
}

// answerSizeFixed is answerSize's fixed part (50 bytes at most, rounded up).
const answerSizeFixed = 64

// answer is the answer to r, which committed job or failed with err. ok is
// false when the stream ended while the report was being committed:
// nobody to answer.
func (s *session) answer(r streamReport, job *store.Job, err error) (m *leaseholdv1.ConnectResponse, ok bool) {
	c := s.c
	out := &leaseholdv1.ReportResult{Token: withoutSecret(r.tok), Kind: r.kind}
	if err != nil {
		if errors.Is(err, context.Canceled) && s.ctx.Err() != nil {
			return nil, false
		}
		setReportError(out, toStatus(s.ctx, c.log, err))
	} else {
		out.State = jobStates[job.State]
	}
	return &leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_ReportResult{ReportResult: out}}, true
}

// setReportError copies a status (code, message, ErrorInfo reason) into a
// report's answer.
func setReportError(out *leaseholdv1.ReportResult, err error) {
	st := status.Convert(err)
	out.Code, out.Message = int32(st.Code()), st.Message()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			out.Reason = info.GetReason()
		}
	}
	if out.GetCode() == int32(codes.OK) {
		out.Code = int32(codes.Internal)
	}
}

// reportSpan returns the context to commit r under and the function that
// ends its span. A report whose worker sent a sampled trace context gets
// a span of its own, a child of the worker's report span; any other
// report commits under s.untraced, without a span: nothing is allocated
// for it.
func (s *session) reportSpan(r streamReport) (context.Context, func(error)) {
	if !r.parent.IsValid() {
		return s.untraced, func(error) {}
	}
	//nolint:spancheck // ended by the returned function once the commit returned
	ctx, span := s.c.core.tracer.Start(trace.ContextWithRemoteSpanContext(s.ctx, r.parent),
		spanStreamReport+reportSpanNames[r.kind],
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("leasehold.job.id", r.rep.Token.JobID),
			attribute.Int64("leasehold.lease.generation", r.rep.Token.Generation),
			attribute.String("leasehold.worker.id", r.rep.Token.WorkerID),
		))
	//nolint:spancheck // see above
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(otelcodes.Error, err.Error())
		}
		span.End()
	}
}

// reportSpanNames name a stream report's span after the unary RPC it
// stands for.
var reportSpanNames = map[leaseholdv1.ReportKind]string{
	leaseholdv1.ReportKind_REPORT_KIND_COMPLETE: "Complete",
	leaseholdv1.ReportKind_REPORT_KIND_RETRY:    "Retry",
	leaseholdv1.ReportKind_REPORT_KIND_CANCEL:   "Cancel",
	leaseholdv1.ReportKind_REPORT_KIND_RELEASE:  "Release",
}
