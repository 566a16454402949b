package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/store"
)

type countingObserver struct{ items int }

func (o *countingObserver) CommitBatch(_ string, items int, _ time.Duration, _ error) {
	o.items += items
}

func TestCommitTelemetry(t *testing.T) {
	t.Parallel()
	var zero store.CommitTelemetry
	zero.Observe("reports", 3, time.Millisecond, nil) // nothing configured: no-op
	_, end := zero.StartSpan(context.Background(), "reports", 3, nil)
	end(nil)

	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	obs := &countingObserver{}
	ct := store.CommitTelemetry{Observer: obs, TracerProvider: tp}
	_, caller := tp.Tracer("t").Start(context.Background(), "caller")
	ct.Observe("reports", 5, time.Millisecond, nil)
	_, end = ct.StartSpan(context.Background(), "reports", 5, []trace.SpanContext{caller.SpanContext(), {}})
	end(errors.New("boom"))
	if obs.items != 5 {
		t.Errorf("observer saw %d items, want 5", obs.items)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "leasehold.commit reports" || len(spans[0].Links()) != 1 ||
		spans[0].Links()[0].SpanContext.SpanID() != caller.SpanContext().SpanID() || spans[0].Status().Description != "boom" {
		t.Fatalf("commit spans %+v", spans)
	}
}
