package store

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// CommitTelemetry is how an engine reports its group commits: a metric
// per flush (Observer) and a span per flush (TracerProvider). Both are
// optional; the zero value reports nothing. coordinator.Metrics implements
// CommitObserver.
//
// Each engine's group committers report through EngineOptions.CommitHooks:
// the "reports" and "creates" flushes each get a metric and a span, linked
// to the spans of the calls they served.
type CommitTelemetry struct {
	Observer       CommitObserver
	TracerProvider trace.TracerProvider
}

// CommitObserver is told about every group commit: its operation (e.g.
// "reports"), how many items it applied, how long it took and how it
// ended.
type CommitObserver interface {
	CommitBatch(op string, items int, d time.Duration, err error)
}

// commitTracerName is the instrumentation scope of commit spans.
const commitTracerName = "github.com/leasehold/leasehold/store"

// Observe reports one flush to the Observer, if any.
func (t CommitTelemetry) Observe(op string, items int, d time.Duration, err error) {
	if t.Observer != nil {
		t.Observer.CommitBatch(op, items, d, err)
	}
}

// StartSpan starts the span of one flush, "leasehold.commit <op>", with
// its batch size. A batch serves many callers, so the span is the root of
// a trace of its own, linked to each caller's span (at most
// commitSpanLinksMax of them); the callers' traces find their commit
// through the link. end records err and ends the span.
func (t CommitTelemetry) StartSpan(ctx context.Context, op string, items int, callers []trace.SpanContext) (_ context.Context, end func(err error)) {
	if t.TracerProvider == nil {
		return ctx, func(error) {}
	}
	links := make([]trace.Link, 0, min(len(callers), commitSpanLinksMax))
	for _, sc := range callers {
		if len(links) == commitSpanLinksMax {
			break
		}
		if sc.IsValid() {
			links = append(links, trace.Link{SpanContext: sc})
		}
	}
	ctx, span := t.TracerProvider.Tracer(commitTracerName).Start(ctx, "leasehold.commit "+op,
		trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("leasehold.commit.op", op), attribute.Int("leasehold.commit.batch_size", items)))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// commitSpanLinksMax bounds the links of one commit span: a batch may
// carry a thousand reports, and a trace backend shows the first few
// anyway.
const commitSpanLinksMax = 128
