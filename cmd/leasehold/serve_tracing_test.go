package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/otlptest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestServeExportsTracesOverOTLP runs the real binary with the standard
// OTLP environment pointing at a fake collector, makes one call carrying a
// W3C trace context, and stops the process. Exit comes after the final
// flush, so the spans must have arrived by then: no polling.
func TestServeExportsTracesOverOTLP(t *testing.T) {
	t.Parallel()
	col := otlptest.Start(t)
	p := testserver.StartProcessEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.GRPCEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=grpc",
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_METRICS_EXPORTER=none",
	})

	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentID = "00f067aa0ba902b7"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "traceparent", "00-"+traceID+"-"+parentID+"-01")
	if _, err := leaseholdv1.NewJobServiceClient(p.Dial(t)).CreateJob(ctx, &leaseholdv1.CreateJobRequest{
		Job: &leaseholdv1.JobSpec{Queue: "traced", Kind: "k"},
	}); err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	// Probes and reflection are not traced.
	conn := p.Dial(t)
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health check: %v", err)
	}
	refl, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatalf("reflection: %v", err)
	}
	if err := refl.Send(&reflectionpb.ServerReflectionRequest{
		MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{},
	}); err != nil {
		t.Fatalf("reflection send: %v", err)
	}
	if _, err := refl.Recv(); err != nil {
		t.Fatalf("reflection recv: %v", err)
	}
	_ = refl.CloseSend()

	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(); code != exitOK || err != nil {
		t.Fatalf("leasehold serve exited %d (%v) after SIGTERM:\n%s", code, err, p.Output())
	}
	if want := `msg="exporting traces" exporter="otlp grpc ` + col.GRPCEndpoint + `"`; !strings.Contains(p.Output(), want) {
		t.Errorf("output lacks %q:\n%s", want, p.Output())
	}

	var found *otlptest.Span
	var names []string
	for _, s := range col.Spans() {
		names = append(names, s.GetName())
		if strings.HasPrefix(s.GetName(), "grpc.health.") || strings.HasPrefix(s.GetName(), "grpc.reflection.") {
			t.Errorf("span %s exported: health checks and reflection must not be traced", s.GetName())
		}
		if s.GetName() == "leasehold.v1.JobService/CreateJob" && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			found = &s
		}
	}
	if found == nil {
		t.Fatalf("collector got no server span leasehold.v1.JobService/CreateJob; got %v\n%s", names, p.Output())
	}
	if got := found.Resource["service.name"]; got != "leasehold" {
		t.Errorf("service.name = %q, want leasehold", got)
	}
	if got := found.Resource["service.version"]; got != Version {
		t.Errorf("service.version = %q, want %s", got, Version)
	}
	// The server continued the caller's trace: the propagator is installed.
	if got := hex.EncodeToString(found.GetTraceId()); got != traceID {
		t.Errorf("span trace id = %s, want the caller's %s", got, traceID)
	}
	if got := found.GetParentSpanId(); !bytes.Equal(got, mustHex(t, parentID)) {
		t.Errorf("span parent = %x, want the caller's span %s", got, parentID)
	}
}

func mustHex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
