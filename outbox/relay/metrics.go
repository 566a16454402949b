package relay

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the relay's measurements, as Prometheus collectors.
type Metrics struct {
	relayed   prometheus.Counter
	deadTotal prometheus.Counter
	errors    prometheus.Counter
	lag       prometheus.Histogram
	depth     prometheus.Gauge
	oldest    prometheus.Gauge
	stale     prometheus.Gauge
	deadRows  prometheus.Gauge
}

// NewMetrics makes the relay's collectors and registers them with reg
// (none when reg is nil).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		relayed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_outbox_relayed_total", Help: "Outbox rows this relay turned into jobs and deleted.",
		}),
		deadTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_outbox_dead_total", Help: "Outbox rows this relay moved to outbox_dead because the coordinator refused them for good.",
		}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "leasehold_outbox_relay_errors_total", Help: "Relay rounds that failed and were retried (database or coordinator unavailable).",
		}),
		lag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "leasehold_outbox_relay_lag_seconds",
			Help:    "From an outbox row's insert to its deletion after the job was created (database clock); p50/p99 with histogram_quantile.",
			Buckets: []float64{.001, .0025, .005, .01, .02, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 3600},
		}),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_outbox_depth", Help: "Rows waiting in the outbox (sampled).",
		}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_outbox_oldest_age_seconds", Help: "Age of the oldest row waiting in the outbox (sampled); 0 when empty.",
		}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_outbox_stale_rows",
			Help: "Rows older than half the coordinator's idempotency window (sampled): alert on > 0; past the whole window a row may become a second job.",
		}),
		deadRows: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "leasehold_outbox_dead_rows", Help: "Rows in outbox_dead (sampled).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.relayed, m.deadTotal, m.errors, m.lag, m.depth, m.oldest, m.stale, m.deadRows)
	}
	return m
}
