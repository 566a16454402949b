package console

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// TestThroughputChart: the chart is an SVG whose label gives the scale
// (interval, span, latest, peak), whose line reaches the top at the peak
// and the bottom at zero, with a red line only when jobs died; no samples
// draw a dash.
func TestThroughputChart(t *testing.T) {
	if got := string(throughputChart(nil)); strings.Contains(got, "<svg") {
		t.Fatalf("no samples drew %q, want a dash", got)
	}
	start := time.Date(2026, 12, 3, 7, 0, 0, 0, time.UTC)
	sample := func(i int, succeeded, dead int64) *leaseholdv1.ThroughputSample {
		return &leaseholdv1.ThroughputSample{Start: timestamppb.New(start.Add(time.Duration(i) * 10 * time.Second)),
			Width: durationpb.New(10 * time.Second), Succeeded: succeeded, Dead: dead}
	}
	got := string(throughputChart([]*leaseholdv1.ThroughputSample{sample(0, 0, 0), sample(1, 40, 0), sample(2, 20, 0)}))
	for _, want := range []string{
		`<svg class="chart" role="img"`,
		`aria-label="Jobs finished per 10s over the last 30s: latest 20, peak 40"`,
		`<polyline class="line" points="0.0,27.0 80.0,1.0 160.0,14.0"/>`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("chart lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, `class="dead"`) {
		t.Errorf("a chart without dead jobs has a dead line:\n%s", got)
	}
	got = string(throughputChart([]*leaseholdv1.ThroughputSample{sample(0, 1, 1), sample(1, 0, 0)}))
	if !strings.Contains(got, `<polyline class="dead" points="0.0,14.0 160.0,27.0"/>`) {
		t.Errorf("dead jobs draw no dead line:\n%s", got)
	}
}
