package worker

import (
	"context"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// BenchmarkStartSpan is the handler span of every job, under the global
// (unconfigured) tracer provider: a job without a producer's trace context,
// and one with it.
func BenchmarkStartSpan(b *testing.B) {
	w := &Worker{tracer: otel.GetTracerProvider().Tracer(tracerName, trace.WithInstrumentationVersion(sdkVersion))}
	for _, bc := range []struct {
		name     string
		metadata map[string]string
	}{
		{"no trace context", map[string]string{"tenant_user": "ada"}},
		{"traceparent", map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	} {
		e := &execution{ctx: context.Background(), job: &Job{ID: "j", Kind: "noop", Queue: "q", Metadata: bc.metadata}}
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				// A new goroutine per job, as the worker runs each handler.
				done := make(chan struct{})
				go func() {
					_, span := w.startSpan(e)
					span.End()
					close(done)
				}()
				<-done
			}
		})
	}
}

// TestStartSpanLinksTheProducer: the handler's span links the producer's
// span when the job carries its trace context, and nothing otherwise.
func TestStartSpanLinksTheProducer(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	w := &Worker{tracer: tp.Tracer(tracerName)}
	const traceID, spanID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	for _, md := range []map[string]string{
		{"traceparent": "00-" + traceID + "-" + spanID + "-01", "tenant_user": "ada"},
		{"tenant_user": "ada"},
		nil,
	} {
		e := &execution{ctx: context.Background(), job: &Job{ID: "j", Kind: "noop", Queue: "q", Metadata: md}}
		_, span := w.startSpan(e)
		span.End()
	}
	ended := spans.Ended()
	if len(ended) != 3 {
		t.Fatalf("%d spans ended, want 3", len(ended))
	}
	if l := ended[0].Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != traceID || l[0].SpanContext.SpanID().String() != spanID {
		t.Fatalf("the span of a job with a traceparent has links %+v, want the producer's span", l)
	}
	for _, s := range ended[1:] {
		if s.Name() != "leasehold.job noop" || len(s.Links()) != 0 || s.Parent().IsValid() {
			t.Fatalf("the span of a job without a traceparent: name %q, links %+v, parent %v", s.Name(), s.Links(), s.Parent())
		}
	}
}
