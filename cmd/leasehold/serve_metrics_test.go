package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// scrape reads url and parses it with Prometheus' own text parser, as a
// Prometheus server would.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s\n%s", url, resp.Status, body)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse %s: %v", url, err)
	}
	return fams
}

// sample returns the value of the sample of family name whose labels
// include want, failing the test when there is none.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) float64 {
	t.Helper()
	fam := fams[name]
	if fam == nil {
		t.Fatalf("no metric %s in the scrape", name)
	}
next:
	for _, m := range fam.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		switch {
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetHistogram() != nil:
			return float64(m.GetHistogram().GetSampleCount())
		}
	}
	t.Fatalf("no sample of %s with labels %v in %v", name, want, fam.GetMetric())
	return 0
}

// TestServeMetricsShowQueueDepthAndLag runs the real binary, gives a queue
// jobs (one of them due an hour ago, one not due yet), and scrapes
// /metrics: the queue gauges come from the store, the RPC metrics from
// otelgrpc, the counters from the coordinator.
func TestServeMetricsShowQueueDepthAndLag(t *testing.T) {
	t.Parallel()
	p := testserver.StartProcess(t, "--log-format", "json")
	if p.HTTPAddr == "" {
		t.Fatalf("no HTTP address in the log:\n%s", p.Output())
	}
	conn := p.Dial(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	jobs := leaseholdv1.NewJobServiceClient(conn)
	for _, spec := range []*leaseholdv1.JobSpec{
		{Queue: "metered", Kind: "k", RunAt: timestamppb.New(time.Now().Add(-time.Hour))},
		{Queue: "metered", Kind: "k"},
		{Queue: "metered", Kind: "k", RunAfter: durationpb.New(time.Hour)},
	} {
		if _, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec}); err != nil {
			t.Fatalf("CreateJob: %v", err)
		}
	}
	// A caller mistake, for the RPC error series.
	if _, err := jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: "01890a5d-ac96-774b-bcce-b302099a8057"}); err == nil {
		t.Fatal("GetJob of a missing job succeeded")
	}

	fams := scrape(t, "http://"+p.HTTPAddr+"/metrics")
	q := map[string]string{"tenant": "default", "queue": "metered"}
	with := func(k, v string) map[string]string {
		m := map[string]string{k: v}
		for k, v := range q {
			m[k] = v
		}
		return m
	}
	if got := sample(t, fams, "leasehold_queue_jobs", with("state", "queued")); got != 3 {
		t.Errorf("leasehold_queue_jobs{state=queued} = %v, want 3", got)
	}
	if got := sample(t, fams, "leasehold_queue_jobs", with("state", "leased")); got != 0 {
		t.Errorf("leasehold_queue_jobs{state=leased} = %v, want 0", got)
	}
	if got := sample(t, fams, "leasehold_queue_available", q); got != 2 {
		t.Errorf("leasehold_queue_available = %v, want 2", got)
	}
	if got := sample(t, fams, "leasehold_queue_lag_seconds", q); got < 3600 || got > 3600+300 {
		t.Errorf("leasehold_queue_lag_seconds = %v, want about 3600 (the job due an hour ago)", got)
	}
	if got := sample(t, fams, "leasehold_jobs_created_total", q); got != 3 {
		t.Errorf("leasehold_jobs_created_total = %v, want 3", got)
	}
	if got := sample(t, fams, "rpc_server_call_duration_seconds", map[string]string{
		"rpc_method": "leasehold.v1.JobService/CreateJob", "rpc_response_status_code": "OK",
	}); got != 3 {
		t.Errorf("CreateJob calls = %v, want 3", got)
	}
	sample(t, fams, "rpc_server_call_duration_seconds", map[string]string{
		"rpc_method": "leasehold.v1.JobService/GetJob", "rpc_response_status_code": "NOT_FOUND",
	})
	for _, name := range []string{"leasehold_worker_streams", "go_goroutines", "process_resident_memory_bytes", "target_info"} {
		if fams[name] == nil {
			t.Errorf("no %s in the scrape", name)
		}
	}

	// The probes: HTTP and grpc.health.v1.
	for path, want := range map[string]string{"/healthz": "ok", "/readyz": "ready"} {
		resp, err := http.Get("http://" + p.HTTPAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != want {
			t.Errorf("GET %s = %s %q, want 200 %q", path, resp.Status, body, want)
		}
	}
	health := healthpb.NewHealthClient(conn)
	for _, svc := range []string{"", "liveness", "readiness"} {
		r, err := health.Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || r.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health %q = %v, %v; want SERVING", svc, r.GetStatus(), err)
		}
	}
	// The log is JSON, one object per line.
	for _, line := range strings.Split(strings.TrimSpace(p.Output()), "\n") {
		if !strings.HasPrefix(line, "{") {
			t.Errorf("--log-format json wrote a line that is not JSON: %q", line)
		}
	}
}
