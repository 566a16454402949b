package worker

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// Defaults for Config fields left at their zero value.
const (
	// CapacityDefault is how many handlers run at once when Config.Capacity
	// is zero.
	CapacityDefault = 10
	// HeartbeatFractionDefault is the fraction of the lease after which the
	// worker renews its leases: three heartbeats per lease, so one lost
	// heartbeat never costs a lease.
	HeartbeatFractionDefault = 1.0 / 3
	// ShutdownGraceDefault is how long running handlers may finish on
	// shutdown before they are cancelled and their leases released.
	ShutdownGraceDefault = 30 * time.Second
	// ReconnectMinDefault is the first reconnect delay.
	ReconnectMinDefault = 100 * time.Millisecond
	// ReconnectMaxDefault caps the reconnect delay.
	ReconnectMaxDefault = 10 * time.Second
	// LeaseDurationServerDefault is the lease the coordinator grants when
	// Config.LeaseDuration is zero and it names no other in its Welcome.
	LeaseDurationServerDefault = 30 * time.Second
)

// Bounds mirrored from the API (the SDK does not import the store): a
// config outside them would be refused by the coordinator on every
// connect, so it is refused up front instead.
const (
	capacityMax      = 10000
	queuesMax        = 32
	labelsMax        = 32
	leaseDurationMin = time.Second
	leaseDurationMax = time.Hour
	nameMaxLen       = 128
)

var workerIDPattern = regexp.MustCompile(`^[A-Za-z0-9._:@/-]{1,128}$`)

// Config configures a Worker. The zero value of every field except Queues
// means its default.
type Config struct {
	// WorkerID identifies this worker to the coordinator: 1–128 characters
	// of [A-Za-z0-9._:@/-]. Leases are fenced by it, so two processes must
	// not share one. Default: hostname-pid.
	WorkerID string
	// Queues to take work from (1–32). Required.
	Queues []string
	// Capacity is the most handlers run at once; the worker never holds more
	// leases than this. Default CapacityDefault (10), at most 10,000.
	Capacity int
	// LeaseDuration asked for each lease, in [1s, 1h]. Zero: the
	// coordinator's default (the queue's, 30s unless configured).
	LeaseDuration time.Duration
	// HeartbeatFraction: all held leases are renewed every
	// LeaseDuration × HeartbeatFraction, in (0, 1). Default 1/3.
	HeartbeatFraction float64
	// ShutdownGrace is how long running handlers get to finish once Run's
	// context is done; after it their contexts are cancelled (cause
	// ErrShutdown) and their leases released. Default 30s.
	ShutdownGrace time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff (with
	// jitter) between stream reconnects. Defaults 100ms and 10s.
	ReconnectMin, ReconnectMax time.Duration
	// Labels are free key/values shown to operators (at most 32).
	Labels map[string]string
	// Logger receives the worker's logs. Nil discards them.
	Logger *slog.Logger
	// TracerProvider starts the handler spans. Nil: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

// WithDefaults returns a copy of c with every zero field set to its default.
// The caller's slices and maps are copied, never shared.
func (c Config) WithDefaults() Config {
	out := c
	out.WorkerID = cmp.Or(c.WorkerID, defaultWorkerID())
	out.Queues = slices.Clone(c.Queues)
	out.Capacity = cmp.Or(c.Capacity, CapacityDefault)
	out.HeartbeatFraction = cmp.Or(c.HeartbeatFraction, HeartbeatFractionDefault)
	out.ShutdownGrace = cmp.Or(c.ShutdownGrace, ShutdownGraceDefault)
	out.ReconnectMin = cmp.Or(c.ReconnectMin, ReconnectMinDefault)
	out.ReconnectMax = cmp.Or(c.ReconnectMax, ReconnectMaxDefault)
	out.Labels = maps.Clone(c.Labels)
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

// Validate reports every problem with c (after defaults) at once.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !workerIDPattern.MatchString(c.WorkerID) {
		bad("worker: WorkerID %q must be 1-128 characters of [A-Za-z0-9._:@/-]", c.WorkerID)
	}
	switch {
	case len(c.Queues) == 0:
		bad("worker: Queues is required: name at least one queue")
	case len(c.Queues) > queuesMax:
		bad("worker: Queues has %d names, at most %d are allowed", len(c.Queues), queuesMax)
	}
	for i, q := range c.Queues {
		if q == "" || len(q) > nameMaxLen {
			bad("worker: Queues[%d] %q must be 1-%d characters", i, q, nameMaxLen)
		}
	}
	if c.Capacity < 0 || c.Capacity > capacityMax {
		bad("worker: Capacity %d must be in [1, %d] (0 = %d)", c.Capacity, capacityMax, CapacityDefault)
	}
	if c.LeaseDuration != 0 && (c.LeaseDuration < leaseDurationMin || c.LeaseDuration > leaseDurationMax) {
		bad("worker: LeaseDuration %s must be in [%s, %s] (0 = server default)", c.LeaseDuration, leaseDurationMin, leaseDurationMax)
	}
	if !(c.HeartbeatFraction > 0 && c.HeartbeatFraction < 1) {
		bad("worker: HeartbeatFraction %v must be in (0, 1)", c.HeartbeatFraction)
	}
	if c.ShutdownGrace < 0 {
		bad("worker: ShutdownGrace %s must not be negative", c.ShutdownGrace)
	}
	if c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin {
		bad("worker: ReconnectMin %s must be positive and at most ReconnectMax %s", c.ReconnectMin, c.ReconnectMax)
	}
	if len(c.Labels) > labelsMax {
		bad("worker: Labels has %d entries, at most %d are allowed", len(c.Labels), labelsMax)
	}
	return errors.Join(errs...)
}

// defaultWorkerID is hostname-pid with characters the API refuses replaced,
// so the default is always a valid identity.
func defaultWorkerID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "worker"
	}
	host = strings.Map(func(r rune) rune {
		if r < 128 && workerIDPattern.MatchString(string(r)) {
			return r
		}
		return '-'
	}, host)
	id := host + "-" + strconv.Itoa(os.Getpid())
	if len(id) > nameMaxLen {
		id = id[len(id)-nameMaxLen:]
	}
	return id
}
