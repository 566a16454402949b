package main

// Tracing of the commands that talk to a coordinator. When the OTEL_*
// environment asks for export (see internal/telemetry), a command is one
// span named after it ("leasehold job create"), its calls are gRPC client
// spans under it, and the coordinator continues the trace; a job it
// creates carries the command's span in its metadata. The span continues
// the trace in TRACEPARENT/TRACESTATE (the OpenTelemetry environment
// carrier), so a traced script that runs the CLI stays one trace; without
// export the command still passes that trace context on to the jobs it
// creates.

import (
	"context"
	"log/slog"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/internal/telemetry"
)

// Default service.name of the CLI's telemetry; OTEL_SERVICE_NAME wins.
const (
	serviceNameCLI    = "leasehold-cli"
	serviceNameWorker = "leasehold-worker"
)

// cliTracerName is the instrumentation scope of the command spans.
const cliTracerName = "github.com/leasehold/leasehold/cmd/leasehold"

// envTraceContext reads the trace context handed down in TRACEPARENT and
// TRACESTATE into ctx, as a remote parent.
func (c *cli) envTraceContext(ctx context.Context) context.Context {
	carrier := propagation.MapCarrier{}
	for k, env := range map[string]string{"traceparent": "TRACEPARENT", "tracestate": "TRACESTATE"} {
		if v := c.getenv(env); v != "" {
			carrier[k] = v
		}
	}
	if len(carrier) == 0 {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, carrier)
}

// traceCommand sets up telemetry for one command (a no-op unless the
// environment asks for export) and starts the command's span. end ends the
// span and flushes, bounded by telemetryShutdownTimeout; export failures
// are reported on stderr but never change the command's outcome.
func (c *cli) traceCommand(cmd *cobra.Command, serviceName string) (ctx context.Context, end func(), err error) {
	ctx = c.envTraceContext(cmd.Context())
	tel, err := telemetry.Setup(ctx, telemetry.Options{Getenv: c.getenv, ServiceName: serviceName, ServiceVersion: Version})
	if err != nil {
		return nil, nil, usagef("%v", err)
	}
	ctx, span := tel.TracerProvider.Tracer(cliTracerName).Start(ctx, cmd.CommandPath(), trace.WithSpanKind(trace.SpanKindClient))
	return ctx, func() {
		span.End()
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), telemetryShutdownTimeout)
		defer cancel()
		if err := tel.Shutdown(fctx); err != nil {
			slog.New(slog.NewTextHandler(c.stderr, nil)).Warn("flushing telemetry", slog.String("error", err.Error()))
		}
	}, nil
}
