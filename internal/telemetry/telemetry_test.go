package telemetry_test

import (
	"context"
	"io"
	"net"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/internal/testkit/otlptest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a getenv over a fixed map, so tests do not depend on (or change)
// the process environment.
func env(kv map[string]string) func(string) string {
	return func(k string) string { return kv[k] }
}

// globals is what Setup may change, captured to prove it did not.
type globals struct {
	tp     any
	fields []string
}

func snapshot() globals {
	// Sorted: a composite propagator lists its fields from a map.
	fields := otel.GetTextMapPropagator().Fields()
	slices.Sort(fields)
	return globals{tp: otel.GetTracerProvider(), fields: fields}
}

func (g globals) unchanged(t *testing.T) {
	t.Helper()
	if now := snapshot(); now.tp != g.tp || !slices.Equal(now.fields, g.fields) {
		t.Fatalf("globals changed: tracer provider %T → %T, propagator fields %v → %v", g.tp, now.tp, g.fields, now.fields)
	}
}

func TestSetupExportsNothingUnlessTheEnvironmentAsks(t *testing.T) {
	t.Parallel()
	for name, kv := range map[string]map[string]string{
		"no variables":                {},
		"a protocol but no endpoint":  {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_SERVICE_NAME": "x"},
		"both exporters none":         {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none"},
		"metrics exporter prometheus": {"OTEL_METRICS_EXPORTER": "prometheus"},
		"the SDK disabled": {
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317", "OTEL_TRACES_EXPORTER": "otlp", "OTEL_SDK_DISABLED": "TRUE",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			before := snapshot()
			tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: env(kv), ServiceVersion: "1.2.3"})
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			before.unchanged(t)
			if tel.Traces != "" || tel.Metrics != "" || tel.MetricsHandler != nil {
				t.Errorf("Setup exports traces %q, metrics %q, handler %v; want nothing", tel.Traces, tel.Metrics, tel.MetricsHandler)
			}
			if err := tel.Shutdown(context.Background()); err != nil {
				t.Errorf("no-op shutdown: %v", err)
			}
		})
	}
}

func TestSetupRefusesWhatItCannotHonour(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		kv       map[string]string
		mentions string
	}{
		"another traces exporter": {
			kv:       map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "zipkin"},
			mentions: "OTEL_TRACES_EXPORTER",
		},
		"another metrics exporter": {
			kv:       map[string]string{"OTEL_METRICS_EXPORTER": "statsd"},
			mentions: "OTEL_METRICS_EXPORTER",
		},
		"OTLP over HTTP with JSON": {
			kv:       map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			mentions: "OTEL_EXPORTER_OTLP_PROTOCOL",
		},
		"a traces protocol overriding grpc": {
			kv: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
				"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json",
			},
			mentions: "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
		},
		"an endpoint that is not a URL": {
			kv:       map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://[::1"},
			mentions: "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			before := snapshot()
			_, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: env(tc.kv)})
			if err == nil || !strings.Contains(err.Error(), tc.mentions) {
				t.Fatalf("Setup error = %v; want one naming %s", err, tc.mentions)
			}
			before.unchanged(t)
		})
	}
}

// TestSetupServesPrometheus records a counter through the MeterProvider and
// reads it back in the Prometheus text format. It exports no traces, so it
// changes no globals and runs in parallel.
func TestSetupServesPrometheus(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: env(nil), Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, err := tel.MeterProvider.Meter("test").Int64Counter("leasehold.test.things")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3, metric.WithAttributes(attribute.String("queue", "emails")))
	srv := httptest.NewServer(tel.MetricsHandler)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`leasehold_test_things_total{`, `queue="emails"`, `go_goroutines `, `process_resident_memory_bytes `} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
}

// TestSetupExportsOverBothProtocols installs the real providers against a
// real receiver, once per OTLP protocol, and checks that a span and a
// metric arrive. It changes the process environment and the otel globals,
// so it is not parallel (parallel tests start after it) and restores the
// globals when done.
func TestSetupExportsOverBothProtocols(t *testing.T) {
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})
	col := otlptest.Start(t)
	for _, tc := range []struct{ protocol, endpoint string }{
		{"grpc", col.GRPCEndpoint},
		{"http/protobuf", col.HTTPEndpoint},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			kv := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": tc.endpoint,
				"OTEL_EXPORTER_OTLP_PROTOCOL": tc.protocol,
				"OTEL_EXPORTER_OTLP_INSECURE": "true",
				"OTEL_SERVICE_NAME":           "svc-" + strings.ReplaceAll(tc.protocol, "/", "-"),
			}
			for k, v := range kv {
				t.Setenv(k, v)
			}
			tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: env(kv), ServiceVersion: "1.2.3"})
			if err != nil {
				t.Fatal(err)
			}
			if want := "otlp " + tc.protocol + " " + tc.endpoint; tel.Traces != want || tel.Metrics != want {
				t.Errorf("Traces %q, Metrics %q; want %q", tel.Traces, tel.Metrics, want)
			}
			_, span := otel.Tracer("test").Start(context.Background(), "span-"+tc.protocol)
			span.End()
			c, _ := tel.MeterProvider.Meter("test").Int64Counter("leasehold.test.pushed")
			c.Add(context.Background(), 1)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if err := tel.Shutdown(ctx); err != nil {
				t.Fatalf("shutdown (final export): %v", err)
			}
			var got *otlptest.Span
			for _, s := range col.Spans() {
				if s.GetName() == "span-"+tc.protocol {
					got = &s
				}
			}
			if got == nil {
				t.Fatalf("the receiver got no span over %s", tc.protocol)
			}
			if got.Resource["service.name"] != kv["OTEL_SERVICE_NAME"] || got.Resource["service.version"] != "1.2.3" {
				t.Errorf("resource %v", got.Resource)
			}
			if svc := col.MetricNames()["leasehold.test.pushed"]; svc != kv["OTEL_SERVICE_NAME"] {
				t.Errorf("metric leasehold.test.pushed from %q, want %q (got %v)", svc, kv["OTEL_SERVICE_NAME"], col.MetricNames())
			}
		})
	}
}

// TestSetupDoesNotWaitForTheCollector installs the real providers against
// an address nothing listens on. Not parallel: it changes the process
// environment and the otel globals. No span is ended and no metric
// recorded, so shutdown has nothing to retry.
func TestSetupDoesNotWaitForTheCollector(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + lis.Addr().String()
	lis.Close()
	// The exporter and resource detector read these from the process.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", dead)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})

	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": dead,
		"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		"OTEL_SERVICE_NAME":           "billing-coordinator",
		"OTEL_METRICS_EXPORTER":       "none",
	}), ServiceVersion: "1.2.3"})
	if err != nil {
		t.Fatalf("Setup with an unreachable collector: %v", err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("global tracer provider is %T, want *sdktrace.TracerProvider", otel.GetTracerProvider())
	}
	if tel.Metrics != "" {
		t.Errorf("metrics pushed to %q with OTEL_METRICS_EXPORTER=none", tel.Metrics)
	}

	ctx, span := otel.Tracer("test").Start(context.Background(), "unended")
	ro, ok := span.(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatalf("span is %T, not recorded by the SDK", span)
	}
	attrs := map[attribute.Key]string{}
	for _, kv := range ro.Resource().Attributes() {
		attrs[kv.Key] = kv.Value.String()
	}
	for k, want := range map[attribute.Key]string{
		"service.name":                "billing-coordinator",
		"service.version":             "1.2.3",
		"deployment.environment.name": "test",
		"telemetry.sdk.language":      "go",
	} {
		if attrs[k] != want {
			t.Errorf("resource %s = %q, want %q (all: %v)", k, attrs[k], want, attrs)
		}
	}

	carrier := propagation.MapCarrier{}
	otel.GetTextMapPropagator().Inject(ctx, carrier)
	if tp := carrier.Get("traceparent"); !strings.Contains(tp, span.SpanContext().TraceID().String()) {
		t.Errorf("injected traceparent %q, want one carrying trace %s", tp, span.SpanContext().TraceID())
	}
	if fields := otel.GetTextMapPropagator().Fields(); !slices.Contains(fields, "baggage") {
		t.Errorf("propagator fields %v lack baggage", fields)
	}

	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tel.Shutdown(sctx); err != nil {
		t.Errorf("shutdown with nothing to flush: %v", err)
	}
}

func TestSetupWarnsOfHTTPToTheGRPCPort(t *testing.T) {
	t.Parallel()
	// Only the warning is looked at; the exporters are built but unused,
	// and none of it is installed globally because traces are off.
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: env(map[string]string{
		"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://127.0.0.1:4317",
		"OTEL_TRACES_EXPORTER":                "none",
	})})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Nothing was recorded; the final push is bounded anyway.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	}()
	if len(tel.Warnings) != 1 || !strings.Contains(tel.Warnings[0], "OTEL_EXPORTER_OTLP_PROTOCOL=grpc") {
		t.Fatalf("warnings %q; want one advising OTEL_EXPORTER_OTLP_PROTOCOL=grpc", tel.Warnings)
	}
	if want := "otlp http/protobuf http://127.0.0.1:4317"; tel.Metrics != want {
		t.Errorf("Metrics %q, want %q", tel.Metrics, want)
	}
}
