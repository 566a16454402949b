package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testserver"
)

// fakeCollector is an OTLP/gRPC trace receiver on a real socket that keeps
// everything it is sent.
type fakeCollector struct {
	coltracepb.UnimplementedTraceServiceServer
	addr string

	mu       sync.Mutex // guards received
	received []*tracepb.ResourceSpans
}

func startFakeCollector(t *testing.T) *fakeCollector {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &fakeCollector{addr: lis.Addr().String()}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, c)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-served
	})
	return c
}

func (c *fakeCollector) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received = append(c.received, req.GetResourceSpans()...)
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// receivedSpan is one span with the resource it was reported under.
type receivedSpan struct {
	resource map[string]string
	span     *tracepb.Span
}

func (c *fakeCollector) spans() []receivedSpan {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []receivedSpan
	for _, rs := range c.received {
		res := stringAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out = append(out, receivedSpan{resource: res, span: s})
			}
		}
	}
	return out
}

func stringAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = kv.GetValue().GetStringValue()
	}
	return m
}

// TestServeExportsTracesOverOTLP runs the real binary with the standard
// OTLP environment pointing at a fake collector, makes one call carrying a
// W3C trace context, and stops the process. Exit comes after the final
// flush, so the spans must have arrived by then: no polling.
func TestServeExportsTracesOverOTLP(t *testing.T) {
	t.Parallel()
	col := startFakeCollector(t)
	p := testserver.StartProcessEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + col.addr,
		"OTEL_EXPORTER_OTLP_INSECURE=true",
		"OTEL_BSP_SCHEDULE_DELAY=100",
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

	p.Signal(syscall.SIGTERM)
	if code, err := p.Wait(); code != exitOK || err != nil {
		t.Fatalf("leasehold serve exited %d (%v) after SIGTERM:\n%s", code, err, p.Output())
	}
	if want := `msg="exporting traces over OTLP/gRPC" endpoint=http://` + col.addr; !strings.Contains(p.Output(), want) {
		t.Errorf("output lacks %q:\n%s", want, p.Output())
	}

	var found *receivedSpan
	var names []string
	for _, s := range col.spans() {
		names = append(names, s.span.GetName())
		if s.span.GetName() == "leasehold.v1.JobService/CreateJob" && s.span.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			found = &s
		}
	}
	if found == nil {
		t.Fatalf("collector got no server span leasehold.v1.JobService/CreateJob; got %v\n%s", names, p.Output())
	}
	if got := found.resource["service.name"]; got != "leasehold" {
		t.Errorf("service.name = %q, want leasehold", got)
	}
	if got := found.resource["service.version"]; got != Version {
		t.Errorf("service.version = %q, want %s", got, Version)
	}
	// The server continued the caller's trace: the propagator is installed.
	if got := hex.EncodeToString(found.span.GetTraceId()); got != traceID {
		t.Errorf("span trace id = %s, want the caller's %s", got, traceID)
	}
	if got := found.span.GetParentSpanId(); !bytes.Equal(got, mustHex(t, parentID)) {
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
