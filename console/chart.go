package console

import (
	"fmt"
	"html/template"
	"strings"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Size of a throughput chart, in CSS pixels.
const (
	chartWidth  = 160
	chartHeight = 28
)

// throughputChart draws a queue's throughput samples (jobs finished per
// interval, oldest first) as a small inline SVG: a filled line of every
// finished job, the dead ones as a red line over it, its scale and latest
// figure in the accessible label. The SVG is built from numbers only, so
// it is safe to mark as HTML. No sample yet: a dash.
func throughputChart(samples []*leaseholdv1.ThroughputSample) template.HTML {
	if len(samples) == 0 {
		return `<span class="hint" title="no sample yet">—</span>`
	}
	totals, dead := make([]int64, len(samples)), make([]int64, len(samples))
	var peak int64 = 1
	for i, s := range samples {
		totals[i] = s.GetSucceeded() + s.GetFailed() + s.GetDead() + s.GetCancelled()
		dead[i] = s.GetDead()
		peak = max(peak, totals[i])
	}
	width := samples[0].GetWidth().AsDuration()
	span := width * time.Duration(len(samples))
	label := fmt.Sprintf("Jobs finished per %s over the last %s: latest %d, peak %d",
		width, span, totals[len(totals)-1], peak)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="chart" role="img" width="%d" height="%d" viewBox="0 0 %d %d" aria-label="%s"><title>%s</title>`,
		chartWidth, chartHeight, chartWidth, chartHeight, template.HTMLEscapeString(label), template.HTMLEscapeString(label))
	points := func(vs []int64) string {
		var p strings.Builder
		for i, v := range vs {
			x := float64(chartWidth)
			if len(vs) > 1 {
				x = float64(i) * float64(chartWidth) / float64(len(vs)-1)
			}
			y := float64(chartHeight-1) - float64(v)*float64(chartHeight-2)/float64(peak)
			fmt.Fprintf(&p, "%.1f,%.1f ", x, y)
		}
		return strings.TrimSpace(p.String())
	}
	all := points(totals)
	fmt.Fprintf(&b, `<polygon class="area" points="0,%d %s %d,%d"/>`, chartHeight, all, chartWidth, chartHeight)
	fmt.Fprintf(&b, `<polyline class="line" points="%s"/>`, all)
	for _, d := range dead {
		if d > 0 {
			fmt.Fprintf(&b, `<polyline class="dead" points="%s"/>`, points(dead))
			break
		}
	}
	b.WriteString(`</svg>`)
	//nolint:gosec // built from numbers and an escaped label only
	return template.HTML(b.String())
}
