package coordinator

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/telemetry"
	"github.com/leasehold/leasehold/store"
)

// TestDashboardUsesOnlyExportedMetrics records every instrument once, scrapes
// the Prometheus handler and checks that each metric the Grafana dashboard
// (deploy/grafana/leasehold.json) queries exists under that name, so a
// renamed instrument cannot leave the dashboard empty.
func TestDashboardUsesOnlyExportedMetrics(t *testing.T) {
	t.Parallel()
	tel, err := telemetry.Setup(context.Background(), telemetry.Options{Getenv: func(string) string { return "" }, Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	o := newObservedWith(t, func(c *Config) { c.MeterProvider = tel.MeterProvider })
	ctx := withCaller(context.Background(), anonymous(TenantDefault))
	m := o.c.core.metrics
	m.CommitBatch("reports", 3, time.Millisecond, nil)
	m.DispatchRound(time.Millisecond, 2)
	m.BreakerState(TenantDefault, "payments", BreakerOpen)
	m.RateLimited(ctx, TenantDefault, "/leasehold.v1.JobService/CreateJob")
	m.Shed(ctx, "/leasehold.v1.WorkerService/Claim")
	m.jobEnded(ctx, TenantDefault, &store.Job{Queue: "q", State: store.JobStateSucceeded})
	if _, err := (&jobService{c: o.c}).CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := (&workerService{c: o.c}).Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"q"}}); err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	tel.MetricsHandler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}

	dash, err := os.ReadFile("../deploy/grafana/leasehold.json")
	if err != nil {
		t.Fatal(err)
	}
	used := regexp.MustCompile(`\b(leasehold_[a-z_]+|rpc_server_[a-z_]+)`).FindAllString(string(dash), -1)
	if len(used) == 0 {
		t.Fatal("the dashboard queries no leasehold metric")
	}
	for _, name := range used {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && fams[base] != nil {
				family = base
			}
		}
		if strings.HasPrefix(family, "rpc_server_") {
			continue // otelgrpc's, recorded by the stats handler of a served call
		}
		if fams[family] == nil {
			t.Errorf("the dashboard queries %s, which the coordinator does not export", name)
		}
	}
}
