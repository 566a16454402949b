package worker_test

import (
	"context"
	"errors"
	"log"
	"os/signal"
	"syscall"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/leasehold/leasehold/worker"
)

// Trace jobs from the producer to their commit. Install a TracerProvider
// and the W3C propagator before dialling: worker.Dial's gRPC client handler
// and the worker read the global ones (Config.TracerProvider overrides the
// worker's). Create then stores the caller's span context in the job; the
// handler's span links to it, each report is a child of the handler's span,
// and the coordinator's commit of the report links to the report. The
// exporter reads OTEL_EXPORTER_OTLP_ENDPOINT and the other standard
// variables. See docs/tracing.md.
func Example_tracing() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	exporter, err := otlptracehttp.New(ctx)
	if err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter))
	defer func() { _ = tp.Shutdown(context.Background()) }() // flushes buffered spans
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))

	conn, err := worker.Dial("127.0.0.1:7400", worker.DialConfigFromEnv(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()

	// Producer side: the job joins the trace of the span in ctx.
	spanCtx, span := tp.Tracer("signup").Start(ctx, "signup")
	if _, _, err := worker.NewClient(conn).Create(spanCtx, "emails", "welcome", []byte(`{"to":"ada@example.com"}`), nil); err != nil {
		log.Print(err)
	}
	span.End()

	// Worker side: each handler runs in a span of its own ("leasehold.job
	// welcome"), linked to the producer's; spans started from its ctx are
	// its children.
	w, err := worker.New(conn, worker.Config{Queues: []string{"emails"}})
	if err != nil {
		log.Fatal(err)
	}
	w.Handle("welcome", func(ctx context.Context, j *worker.Job) ([]byte, error) {
		return nil, nil
	})
	if err := w.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		log.Print(err)
	}
}
