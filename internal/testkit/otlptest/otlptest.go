// Package otlptest is an OTLP receiver for tests: it listens on loopback
// for traces and metrics over gRPC (Collector.GRPCEndpoint) and over
// http/protobuf (Collector.HTTPEndpoint), and keeps everything it is sent,
// so a test can point a real process's OTEL_EXPORTER_OTLP_ENDPOINT at it
// and look at what arrived.
package otlptest

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	metricpb "go.opentelemetry.io/proto/otlp/metrics/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Collector keeps every span and metric it receives. Create it with Start.
type Collector struct {
	// GRPCEndpoint is the OTLP/gRPC endpoint, e.g. http://127.0.0.1:4317.
	GRPCEndpoint string
	// HTTPEndpoint is the OTLP/HTTP base URL (the exporters append
	// /v1/traces and /v1/metrics).
	HTTPEndpoint string

	mu      sync.Mutex // guards spans, metrics, changed
	spans   []*tracepb.ResourceSpans
	metrics []*metricpb.ResourceMetrics
	changed chan struct{} // closed and replaced on every export
}

// Start starts a Collector on two loopback ports and stops it when the
// test ends.
func Start(t testing.TB) *Collector {
	t.Helper()
	c := &Collector{changed: make(chan struct{})}

	glis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceService{c: c})
	colmetricpb.RegisterMetricsServiceServer(srv, metricsService{c: c})
	gdone := make(chan struct{})
	go func() {
		defer close(gdone)
		_ = srv.Serve(glis)
	}()
	c.GRPCEndpoint = "http://" + glis.Addr().String()

	hlis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", func(w http.ResponseWriter, r *http.Request) {
		var req coltracepb.ExportTraceServiceRequest
		if !decode(w, r, &req) {
			return
		}
		c.addSpans(req.GetResourceSpans())
		reply(w, &coltracepb.ExportTraceServiceResponse{})
	})
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		var req colmetricpb.ExportMetricsServiceRequest
		if !decode(w, r, &req) {
			return
		}
		c.addMetrics(req.GetResourceMetrics())
		reply(w, &colmetricpb.ExportMetricsServiceResponse{})
	})
	hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	hdone := make(chan struct{})
	go func() {
		defer close(hdone)
		_ = hsrv.Serve(hlis)
	}()
	c.HTTPEndpoint = "http://" + hlis.Addr().String()

	t.Cleanup(func() {
		srv.Stop()
		_ = hsrv.Close()
		<-gdone
		<-hdone
	})
	return c
}

func decode(w http.ResponseWriter, r *http.Request, m proto.Message) bool {
	body, err := io.ReadAll(r.Body)
	if err == nil {
		err = proto.Unmarshal(body, m)
	}
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return false
	}
	return true
}

func reply(w http.ResponseWriter, m proto.Message) {
	b, _ := proto.Marshal(m)
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(b)
}

type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	c *Collector
}

func (s traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.c.addSpans(req.GetResourceSpans())
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

type metricsService struct {
	colmetricpb.UnimplementedMetricsServiceServer
	c *Collector
}

func (s metricsService) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	s.c.addMetrics(req.GetResourceMetrics())
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

func (c *Collector) addSpans(rs []*tracepb.ResourceSpans) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, rs...)
	close(c.changed)
	c.changed = make(chan struct{})
}

func (c *Collector) addMetrics(rm []*metricpb.ResourceMetrics) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.metrics = append(c.metrics, rm...)
	close(c.changed)
	c.changed = make(chan struct{})
}

// Span is one received span with its resource and scope.
type Span struct {
	// Resource holds the resource's string attributes (service.name, ...).
	Resource map[string]string
	// Scope is the instrumentation scope's name.
	Scope string
	*tracepb.Span
}

// Attr returns a span attribute rendered as a string ("" when absent).
func (s Span) Attr(key string) string { return attrString(s.GetAttributes(), key) }

// Spans returns every span received so far.
func (c *Collector) Spans() []Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Span
	for _, rs := range c.spans {
		res := StringAttrs(rs.GetResource().GetAttributes())
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				out = append(out, Span{Resource: res, Scope: ss.GetScope().GetName(), Span: s})
			}
		}
	}
	return out
}

// MetricNames returns the names of every metric received so far, with
// the service.name they were reported under.
func (c *Collector) MetricNames() map[string]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]string{}
	for _, rm := range c.metrics {
		svc := StringAttrs(rm.GetResource().GetAttributes())["service.name"]
		for _, sm := range rm.GetScopeMetrics() {
			for _, m := range sm.GetMetrics() {
				out[m.GetName()] = svc
			}
		}
	}
	return out
}

// WaitFor calls ok after every export until it returns true or ctx ends;
// it returns ctx's error then. There is no polling: exports wake it.
func (c *Collector) WaitFor(ctx context.Context, ok func() bool) error {
	for {
		c.mu.Lock()
		changed := c.changed
		c.mu.Unlock()
		if ok() {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return errors.Join(errors.New("otlptest: condition not met"), ctx.Err())
		}
	}
}

// StringAttrs renders attributes as strings, keyed by name.
func StringAttrs(kvs []*commonpb.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = valueString(kv.GetValue())
	}
	return m
}

func attrString(kvs []*commonpb.KeyValue, key string) string {
	for _, kv := range kvs {
		if kv.GetKey() == key {
			return valueString(kv.GetValue())
		}
	}
	return ""
}

func valueString(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	}
	return ""
}
