package coordinator

import (
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The per-job counters (leases granted, jobs finished) are recorded with
// the same few label sets over and over; building a set sorts and copies
// its attributes, an allocation per job. labelSets keeps the sets built
// so far, so a job's measurement allocates nothing. The labels are
// bounded (tenant, queue, outcome: no per-job label), and so is the
// cache: past labelSetsMax sets are built per call again.

// labelKey names one label set: tenant and queue, and outcome when set.
type labelKey struct{ tenant, queue, outcome string }

// labelSetsMax bounds the cached label sets.
const labelSetsMax = 4096

// labelSets is the cache; the sets are values, shared by every Metrics.
var labelSets = struct {
	mu   sync.RWMutex
	sets map[labelKey]metric.MeasurementOption
}{sets: map[labelKey]metric.MeasurementOption{}}

// labels is the measurement option of tenant and queue (and outcome,
// unless empty).
func labels(tenant, queue, outcome string) metric.MeasurementOption {
	k := labelKey{tenant, queue, outcome}
	labelSets.mu.RLock()
	o, ok := labelSets.sets[k]
	labelSets.mu.RUnlock()
	if ok {
		return o
	}
	attrs := []attribute.KeyValue{attrTenant(tenant), attrQueue(queue)}
	if outcome != "" {
		attrs = append(attrs, attribute.String("outcome", outcome))
	}
	o = metric.WithAttributeSet(attribute.NewSet(attrs...))
	labelSets.mu.Lock()
	if len(labelSets.sets) < labelSetsMax {
		labelSets.sets[k] = o
	}
	labelSets.mu.Unlock()
	return o
}
