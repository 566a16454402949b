package telemetry_test

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/telemetry"
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

func TestSetupDoesNothingUnlessTheEnvironmentAsksForExport(t *testing.T) {
	t.Parallel()
	for name, kv := range map[string]map[string]string{
		"no variables":                {},
		"an exporter but no endpoint": {"OTEL_TRACES_EXPORTER": "otlp", "OTEL_SERVICE_NAME": "x"},
		"traces exporter none": {
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317", "OTEL_TRACES_EXPORTER": "none",
		},
		"the SDK disabled": {
			"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4317", "OTEL_SDK_DISABLED": "TRUE",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			before := snapshot()
			shutdown, err := telemetry.Setup(context.Background(), env(kv), "1.2.3")
			if err != nil {
				t.Fatalf("Setup: %v", err)
			}
			before.unchanged(t)
			if got := telemetry.TracesEndpoint(env(kv)); got != "" {
				t.Errorf("TracesEndpoint = %q, want empty", got)
			}
			if err := shutdown(context.Background()); err != nil {
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
		"another exporter": {
			kv:       map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_TRACES_EXPORTER": "zipkin"},
			mentions: "OTEL_TRACES_EXPORTER",
		},
		"OTLP over HTTP": {
			kv:       map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
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
			_, err := telemetry.Setup(context.Background(), env(tc.kv), "1.2.3")
			if err == nil || !strings.Contains(err.Error(), tc.mentions) {
				t.Fatalf("Setup error = %v; want one naming %s", err, tc.mentions)
			}
			before.unchanged(t)
		})
	}
}

func TestTracesEndpointSaysWhereTracesGo(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		kv   map[string]string
		want string
	}{
		"the general endpoint": {
			kv:   map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4317"},
			want: "http://collector:4317",
		},
		"the traces endpoint wins": {
			kv: map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT":        "http://collector:4317",
				"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "https://traces.example:4317",
			},
			want: "https://traces.example:4317",
		},
		"a password is masked": {
			kv:   map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "https://user:s3cret@collector:4317"},
			want: "https://user:xxxxx@collector:4317",
		},
		"explicit grpc protocol": {
			kv:   map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
			want: "http://c:4317",
		},
		"a refused configuration": {
			kv:   map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"},
			want: "",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if got := telemetry.TracesEndpoint(env(tc.kv)); got != tc.want {
				t.Errorf("TracesEndpoint = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestSetupDoesNotWaitForTheCollector installs the real provider against an
// address nothing listens on. It changes the process environment and the
// otel globals, so it is not parallel (parallel tests start after it) and
// restores the globals when done. No span is ended, so nothing is queued
// for export and shutdown has nothing to retry.
func TestSetupDoesNotWaitForTheCollector(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + lis.Addr().String()
	lis.Close()
	// The exporter and resource detector read these from the process.
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", dead)
	t.Setenv("OTEL_SERVICE_NAME", "")
	t.Setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment.name=test")
	prevTP, prevProp := otel.GetTracerProvider(), otel.GetTextMapPropagator()
	t.Cleanup(func() {
		otel.SetTracerProvider(prevTP)
		otel.SetTextMapPropagator(prevProp)
	})

	shutdown, err := telemetry.Setup(context.Background(), env(map[string]string{
		"OTEL_EXPORTER_OTLP_ENDPOINT": dead,
		"OTEL_SERVICE_NAME":           "billing-coordinator",
	}), "1.2.3")
	if err != nil {
		t.Fatalf("Setup with an unreachable collector: %v", err)
	}
	if _, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider); !ok {
		t.Fatalf("global tracer provider is %T, want *sdktrace.TracerProvider", otel.GetTracerProvider())
	}

	ctx, span := otel.Tracer("test").Start(context.Background(), "unended")
	ro, ok := span.(sdktrace.ReadOnlySpan)
	if !ok {
		t.Fatalf("span is %T, not recorded by the SDK", span)
	}
	attrs := map[attribute.Key]string{}
	for _, kv := range ro.Resource().Attributes() {
		attrs[kv.Key] = kv.Value.Emit()
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
	if err := shutdown(sctx); err != nil {
		t.Errorf("shutdown with nothing to flush: %v", err)
	}
}
