// Package telemetry sets up OpenTelemetry for the leasehold binary: trace
// and metric export when the standard OTEL_* environment asks for it, and a
// Prometheus scrape of the same metrics for `leasehold serve`'s /metrics.
//
// One instrumentation API serves both ways out: the coordinator and the
// otelgrpc stats handler record to an OpenTelemetry MeterProvider, whose
// readers are the Prometheus exporter (pulled on /metrics) and, when asked
// for, a periodic OTLP reader (pushed). Exporters are chosen by
// go.opentelemetry.io/contrib/exporters/autoexport, which reads the
// OpenTelemetry environment specification (OTEL_TRACES_EXPORTER,
// OTEL_METRICS_EXPORTER, OTEL_EXPORTER_OTLP_*), so the variables a
// Kubernetes deployment (or the OpenTelemetry Operator) sets for every other
// service work here too. OTLP goes over gRPC or http/protobuf; as the
// specification says, http/protobuf is the default when no protocol is set.
// Settings that ask for something it cannot do are an error at start-up, not
// a silent fallback, so a misconfigured deployment is noticed.
//
// Export never blocks or fails start-up because the collector is down: the
// exporters connect lazily and drop what they cannot send, reporting it to
// otel's error handler.
package telemetry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/contrib/exporters/autoexport"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// ServiceNameDefault is service.name of `leasehold serve` when
// OTEL_SERVICE_NAME (or a service.name in OTEL_RESOURCE_ATTRIBUTES) does not
// set one.
const ServiceNameDefault = "leasehold"

// The variables Setup itself reads. The exporters, batch processor, sampler
// and resource detector read the rest of OTEL_* on their own.
const (
	envSDKDisabled     = "OTEL_SDK_DISABLED"
	envTracesExporter  = "OTEL_TRACES_EXPORTER"
	envMetricsExporter = "OTEL_METRICS_EXPORTER"
	envEndpoint        = "OTEL_EXPORTER_OTLP_ENDPOINT"
	envTracesEndpoint  = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	envMetricsEndpoint = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"
	envProtocol        = "OTEL_EXPORTER_OTLP_PROTOCOL"
	envTracesProtocol  = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
	envMetricsProtocol = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL"
	envServiceName     = "OTEL_SERVICE_NAME"
)

// protocolDefault is the OTLP protocol when none is set: the
// specification's default, and autoexport's.
const protocolDefault = "http/protobuf"

// Options configure Setup.
type Options struct {
	// Getenv decides what to export and the default service.name. The
	// exporters, the batch processor (OTEL_BSP_*), the sampler
	// (OTEL_TRACES_SAMPLER*) and the resource (OTEL_RESOURCE_ATTRIBUTES)
	// read the process environment themselves — the SDK has no hook for
	// another source — so production callers pass os.Getenv. Required.
	Getenv func(string) string
	// ServiceName is service.name unless the environment sets one.
	// Default ServiceNameDefault.
	ServiceName string
	// ServiceVersion is service.version.
	ServiceVersion string
	// Prometheus collects metrics for a Prometheus scrape
	// (Telemetry.MetricsHandler), whatever the environment says.
	Prometheus bool
}

// Telemetry is what Setup built. Its providers are no-ops for what is not
// collected; the zero value is not usable, Setup always returns one.
type Telemetry struct {
	// TracerProvider exports spans, or is a no-op when the environment
	// does not ask for trace export.
	TracerProvider trace.TracerProvider
	// MeterProvider feeds the Prometheus handler and the OTLP metric
	// export; a no-op when there is neither.
	MeterProvider metric.MeterProvider
	// MetricsHandler serves the Prometheus text format of every metric;
	// nil unless Options.Prometheus.
	MetricsHandler http.Handler
	// Traces and Metrics say where spans and pushed metrics go ("otlp
	// grpc http://collector:4317", "console"), for a start-up log line;
	// empty when they are not exported.
	Traces, Metrics string
	// Warnings are settings that are valid but probably wrong (an
	// http/protobuf export to the OTLP gRPC port), for the log.
	Warnings []string

	shutdown []func(context.Context) error
}

// Setup builds the providers the environment and opts ask for and, when
// trace export is on, installs the TracerProvider and the W3C TraceContext
// and Baggage propagators as otel's globals (the worker SDK and libraries
// find them there). The MeterProvider is never installed globally: callers
// pass it on explicitly, so two coordinators in one process (tests) keep
// their metrics apart.
//
// Trace export is on when OTEL_TRACES_EXPORTER is otlp or console, or is
// unset while an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set; metric export likewise with
// OTEL_METRICS_EXPORTER and the metrics endpoint. "none" turns either
// off, and so does OTEL_SDK_DISABLED=true. OTEL_METRICS_EXPORTER=prometheus
// pushes nothing: the coordinator's /metrics is the Prometheus endpoint.
// Setup returns an error, and changes nothing, when the environment asks
// for what it cannot do: another exporter or protocol, an endpoint that is
// not a URL, malformed resource attributes.
func Setup(ctx context.Context, opts Options) (_ *Telemetry, err error) {
	getenv := opts.Getenv
	t := &Telemetry{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()}
	traces, err := tracesPlan(getenv)
	if err != nil {
		return nil, err
	}
	metrics, err := metricsPlan(getenv)
	if err != nil {
		return nil, err
	}
	if !traces.on && !metrics.on && !opts.Prometheus {
		return t, nil
	}
	defer func() {
		if err != nil {
			_ = t.Shutdown(context.WithoutCancel(ctx))
		}
	}()
	// Defaults first, then the environment: OTEL_RESOURCE_ATTRIBUTES and
	// OTEL_SERVICE_NAME override them, as the specification requires.
	res, err := resource.New(ctx,
		resource.WithSchemaURL(semconv.SchemaURL),
		resource.WithAttributes(
			semconv.ServiceName(cmp.Or(strings.TrimSpace(getenv(envServiceName)), opts.ServiceName, ServiceNameDefault)),
			semconv.ServiceVersion(opts.ServiceVersion),
		),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry resource (check OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}

	var tp *sdktrace.TracerProvider
	if traces.on {
		// The exporter only builds a lazily connecting client: it does not
		// wait for the collector.
		exp, err := autoexport.NewSpanExporter(ctx)
		if err != nil {
			return nil, fmt.Errorf("trace exporter %s: %w", traces, err)
		}
		tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
		t.TracerProvider, t.Traces = tp, traces.String()
		t.Warnings = append(t.Warnings, traces.warnings()...)
		t.shutdown = append(t.shutdown, func(ctx context.Context) error {
			// ForceFlush exports under ctx, so the deadline bounds the
			// final export; Shutdown then finds the queue empty. Shutdown
			// runs even after a failed flush, to close the connection.
			flushErr := tp.ForceFlush(ctx)
			shutErr := tp.Shutdown(ctx)
			if flushErr != nil {
				return fmt.Errorf("spans not exported (%s): %w", traces, flushErr)
			}
			return shutErr
		})
	}

	var readers []sdkmetric.Option
	if opts.Prometheus {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		// Without the otel_scope_* labels: every metric name here has one
		// producer, and the labels would only lengthen every series.
		exp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
		if err != nil {
			return nil, fmt.Errorf("prometheus exporter: %w", err)
		}
		readers = append(readers, sdkmetric.WithReader(exp))
		t.MetricsHandler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	}
	if metrics.on {
		r, err := autoexport.NewMetricReader(ctx)
		if err != nil {
			return nil, fmt.Errorf("metric exporter %s: %w", metrics, err)
		}
		readers = append(readers, sdkmetric.WithReader(r))
		t.Metrics = metrics.String()
		t.Warnings = append(t.Warnings, metrics.warnings()...)
	}
	if len(readers) > 0 {
		mp := sdkmetric.NewMeterProvider(append(readers, sdkmetric.WithResource(res))...)
		t.MeterProvider = mp
		// Shutdown collects and pushes a last time, under ctx.
		t.shutdown = append(t.shutdown, mp.Shutdown)
	}
	if tp != nil {
		otel.SetTracerProvider(tp)
		otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(
			propagation.TraceContext{}, propagation.Baggage{},
		))
	}
	return t, nil
}

// Shutdown flushes buffered spans and metrics and stops the exporters.
// Bound it with ctx: an unreachable collector is retried until ctx ends.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range t.shutdown {
		errs = append(errs, f(ctx))
	}
	t.shutdown = nil
	return errors.Join(errs...)
}

// plan is what one signal's environment asks for.
type plan struct {
	on       bool
	exporter string // otlp or console
	protocol string // OTLP only
	endpoint string // OTLP only, password masked; "" means the exporter's default
}

func (p plan) String() string {
	if p.exporter != "otlp" {
		return p.exporter
	}
	return strings.TrimSpace("otlp " + p.protocol + " " + p.endpoint)
}

// warnings flags an http/protobuf export to port 4317, the OTLP gRPC port:
// before the specification's default took over, leasehold exported over
// gRPC when no protocol was set, and such a setup now fails to export.
func (p plan) warnings() []string {
	if p.exporter != "otlp" || p.protocol != "http/protobuf" {
		return nil
	}
	if u, err := url.Parse(p.endpoint); err == nil && u.Port() == "4317" {
		return []string{fmt.Sprintf("OTLP over http/protobuf to %s, which is the usual OTLP/gRPC port: "+
			"set OTEL_EXPORTER_OTLP_PROTOCOL=grpc, or point the endpoint at the collector's HTTP port (4318)", p.endpoint)}
	}
	return nil
}

// signal names one signal's variables.
type signal struct {
	name                               string // "traces" or "metrics"
	exporterVar, endpointVar, protoVar string
	// extra are exporter names accepted and treated as "push nothing".
	extra []string
}

var (
	tracesSignal  = signal{name: "traces", exporterVar: envTracesExporter, endpointVar: envTracesEndpoint, protoVar: envTracesProtocol}
	metricsSignal = signal{name: "metrics", exporterVar: envMetricsExporter, endpointVar: envMetricsEndpoint, protoVar: envMetricsProtocol,
		extra: []string{"prometheus"}}
)

func tracesPlan(getenv func(string) string) (plan, error)  { return tracesSignal.plan(getenv) }
func metricsPlan(getenv func(string) string) (plan, error) { return metricsSignal.plan(getenv) }

// plan reads the signal's environment, or returns an error saying what to
// change when it asks for something Setup cannot do.
func (s signal) plan(getenv func(string) string) (plan, error) {
	if strings.EqualFold(strings.TrimSpace(getenv(envSDKDisabled)), "true") {
		return plan{}, nil
	}
	endpointVar := s.endpointVar
	endpoint := strings.TrimSpace(getenv(endpointVar))
	if endpoint == "" {
		endpointVar = envEndpoint
		endpoint = strings.TrimSpace(getenv(endpointVar))
	}
	exporter := strings.ToLower(strings.TrimSpace(getenv(s.exporterVar)))
	switch {
	case exporter == "" && endpoint == "":
		return plan{}, nil
	case exporter == "" || exporter == "otlp":
		exporter = "otlp"
	case exporter == "console":
		return plan{on: true, exporter: exporter}, nil
	case exporter == "none":
		return plan{}, nil
	default:
		for _, e := range s.extra {
			if exporter == e {
				return plan{}, nil
			}
		}
		return plan{}, fmt.Errorf("%s=%q: leasehold exports %s over otlp or to the console; set it to otlp, console or none", s.exporterVar, exporter, s.name)
	}
	// The exporters silently fall back to localhost on a URL they cannot
	// parse; refuse instead, so data goes where the log says.
	if endpoint != "" {
		if _, err := url.Parse(endpoint); err != nil {
			return plan{}, fmt.Errorf("%s=%q is not a URL; use e.g. http://otel-collector:4318", endpointVar, endpoint)
		}
	}
	protoVar := s.protoVar
	protocol := strings.TrimSpace(getenv(protoVar))
	if protocol == "" {
		protoVar = envProtocol
		protocol = strings.TrimSpace(getenv(protoVar))
	}
	switch protocol {
	case "":
		protocol = protocolDefault
	case "grpc", "http/protobuf":
	default:
		return plan{}, fmt.Errorf("%s=%q: leasehold exports OTLP over grpc or http/protobuf; set one of them (or unset it for http/protobuf)", protoVar, protocol)
	}
	return plan{on: true, exporter: exporter, protocol: protocol, endpoint: redact(endpoint)}, nil
}

// redact masks a password in an endpoint URL, so it can be logged.
func redact(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Redacted()
	}
	return endpoint
}
