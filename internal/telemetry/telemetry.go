// Package telemetry turns on OpenTelemetry trace export for `leasehold
// serve` when the standard OTEL_* environment asks for it.
//
// The coordinator already records a server span per call through otelgrpc,
// which uses the global TracerProvider and propagator; until Setup installs
// real ones those spans go nowhere. Setup follows the OpenTelemetry
// environment specification rather than inventing flags, so the same
// variables a Kubernetes deployment (or the OpenTelemetry Operator) sets for
// every other service work here too. Only OTLP over gRPC is supported:
// settings that ask for something else are an error at start-up, not a
// silent fallback, so a misconfigured deployment is noticed.
//
// Export never blocks or fails start-up because the collector is down: the
// exporter connects lazily and the batch processor drops spans it cannot
// send, reporting them to otel's error handler.
package telemetry

import (
	"cmp"
	"context"
	"fmt"
	"net/url"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ServiceNameDefault is service.name when OTEL_SERVICE_NAME (or a
// service.name in OTEL_RESOURCE_ATTRIBUTES) does not set one.
const ServiceNameDefault = "leasehold"

// The variables Setup itself reads. The exporter, batch processor, sampler
// and resource detector read the rest of OTEL_* on their own.
const (
	envSDKDisabled    = "OTEL_SDK_DISABLED"
	envTracesExporter = "OTEL_TRACES_EXPORTER"
	envEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envProtocol       = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envServiceName    = "OTEL_SERVICE_NAME"
)

// Setup installs a global TracerProvider exporting over OTLP/gRPC, and the
// W3C TraceContext and Baggage propagators, when OTEL_EXPORTER_OTLP_ENDPOINT
// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set, OTEL_TRACES_EXPORTER is not
// "none" and OTEL_SDK_DISABLED is not "true". Otherwise it changes nothing
// and returns a shutdown that does nothing. It returns an error, and
// changes nothing, when the environment asks for what it cannot do: another
// exporter or protocol, an endpoint that is not a URL, malformed resource
// attributes.
//
// getenv decides whether to export and the default service.name. The
// exporter (OTEL_EXPORTER_OTLP_*), the batch processor (OTEL_BSP_*), the
// sampler (OTEL_TRACES_SAMPLER*) and the resource (OTEL_RESOURCE_ATTRIBUTES)
// read the process environment themselves — the SDK has no hook for
// another source — so production callers pass os.Getenv.
//
// shutdown flushes buffered spans and stops the exporter; bound it with
// ctx, because an unreachable collector is retried until ctx ends.
func Setup(ctx context.Context, getenv func(string) string, serviceVersion string) (shutdown func(context.Context) error, err error) {
	noop := func(context.Context) error { return nil }
	endpoint, err := tracesEndpoint(getenv)
	if err != nil || endpoint == "" {
		return noop, err
	}
	endpoint = redact(endpoint) // only for messages: the exporter reads its own
	// Defaults first, then the environment: OTEL_RESOURCE_ATTRIBUTES and
	// OTEL_SERVICE_NAME override them, as the specification requires.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(
			semconv.ServiceName(cmp.Or(strings.TrimSpace(getenv(envServiceName)), ServiceNameDefault)),
			semconv.ServiceVersion(serviceVersion),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return noop, fmt.Errorf("tracing resource (check OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	// New only builds a lazily connecting gRPC client: it does not wait
	// for the collector.
	exp, err := otlptracegrpc.New(ctx)
	if err != nil {
		return noop, fmt.Errorf("OTLP trace exporter to %s: %w", endpoint, err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithResource(res),
	)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
		propagation.TraceContext{}, propagation.Baggage{},
	))
	return func(ctx context.Context) error {
		// ForceFlush exports under ctx, so the deadline bounds the
		// final export; Shutdown then finds the queue empty. Shutdown
		// runs even after a failed flush, to close the connection.
		flushErr := tp.ForceFlush(ctx)
		shutErr := tp.Shutdown(ctx)
		if flushErr != nil {
			return fmt.Errorf("spans not exported to %s: %w", endpoint, flushErr)
		}
		return shutErr
	}, nil
}

// TracesEndpoint returns where Setup sends traces, with any password in
// the URL masked, for a start-up log line; "" when Setup would not export
// (or would fail).
func TracesEndpoint(getenv func(string) string) string {
	endpoint, err := tracesEndpoint(getenv)
	if err != nil || endpoint == "" {
		return ""
	}
	return redact(endpoint)
}

// redact masks a password in an endpoint URL, so it can be logged.
func redact(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Redacted()
	}
	return endpoint
}

// tracesEndpoint is the endpoint to export to, "" when export is off, or
// an error saying what to change when the environment asks for something
// Setup cannot do.
func tracesEndpoint(getenv func(string) string) (string, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return "", nil
	}
	switch exporter := strings.ToLower(strings.TrimSpace(getenv(envTracesExporter))); exporter {
	case "", "otlp":
	case "none":
		return "", nil
	default:
		return "", fmt.Errorf("%s=%q: leasehold exports traces only over OTLP; set it to otlp or none", envTracesExporter, exporter)
	}
	name := envTracesEndpoint
	endpoint := strings.TrimSpace(getenv(name))
	if endpoint == "" {
		name = envEndpoint
		endpoint = strings.TrimSpace(getenv(name))
	}
	if endpoint == "" {
		return "", nil
	}
	// The exporter silently falls back to localhost:4317 on a URL it
	// cannot parse; refuse instead, so traces go where the log says.
	if _, err := url.Parse(endpoint); err != nil {
		return "", fmt.Errorf("%s=%q is not a URL; use e.g. http://otel-collector:4317", name, endpoint)
	}
	protoName := envTracesProtocol
	protocol := strings.TrimSpace(getenv(protoName))
	if protocol == "" {
		protoName = envProtocol
		protocol = strings.TrimSpace(getenv(protoName))
	}
	if protocol != "" && protocol != "grpc" {
		return "", fmt.Errorf("%s=%q: leasehold exports OTLP over gRPC only; set it to grpc (or unset it) and point %s at the collector's gRPC port (4317)", protoName, protocol, name)
	}
	return endpoint, nil
}
