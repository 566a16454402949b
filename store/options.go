package store

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/trace"
)

// EngineOptions are the knobs both engines share. The zero value is the
// production setting.
type EngineOptions struct {
	// Rand returns the jitter factor in [0, 1) for retry backoff.
	// Default: math/rand/v2.Float64. Tests pin it.
	Rand func() float64
	// NewID returns a new job or checkpoint id. Default: UUIDv7 strings,
	// which sort by creation time. Tests use it to force duplicate ids.
	NewID func() string
	// BeforeCommit, when set, runs inside every write transaction just before
	// it commits, with the operation's name ("create", "claim", "complete",
	// ...). An error aborts the transaction. It exists for fault-injection
	// tests; production leaves it nil.
	BeforeCommit func(op string) error
	// Queued, when set, is called each time a call joins one of the
	// store's group committers ("report" or "create"), with the number of
	// items then waiting. It exists so that tests can hold a flush and know
	// when the next batch has gathered, without sleeping; production leaves
	// it nil.
	Queued func(committer string, queued int)
	// UniqueHeld, when set, runs inside a create's transaction each time
	// an insert of unique jobs found keys held, before the holders are
	// read, with the keys (PostgreSQL; SQLite's single writer leaves no
	// gap between the two). It exists so that tests can finish a holder
	// in that gap; production leaves it nil.
	UniqueHeld func(keys []string)
	// Commits reports every group commit (a metric and a span per flush).
	// The zero value reports nothing.
	Commits CommitTelemetry
	// Breakers, when set, is told of every breaker transition once it
	// committed, whichever path made it (a report, a probe claim, an
	// operator).
	Breakers BreakerObserver
}

// BreakerObserver is told of committed breaker transitions: the state
// the breaker of (tenant, dependency) is in afterwards.
type BreakerObserver interface {
	BreakerTransition(tenant, dependency string, state BreakerState)
}

// BreakersChanged tells the observer of the committed changes that
// recorded a transition (a change with no event only moved the window).
func (o EngineOptions) BreakersChanged(changes []BreakerChange) {
	if o.Breakers == nil {
		return
	}
	for _, c := range changes {
		if len(c.Events) > 0 {
			o.Breakers.BreakerTransition(c.Breaker.Tenant, c.Breaker.Dependency, c.Breaker.State)
		}
	}
}

// WithDefaults returns a copy with unset fields filled in.
func (o EngineOptions) WithDefaults() EngineOptions {
	if o.Rand == nil {
		o.Rand = rand.Float64
	}
	if o.NewID == nil {
		o.NewID = NewID
	}
	return o
}

// NewID returns a UUIDv7 string.
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// QueuedHook adapts Queued to one committer.
func (o EngineOptions) QueuedHook(committer string) func(int) {
	if o.Queued == nil {
		return nil
	}
	return func(n int) { o.Queued(committer, n) }
}

// CommitHooks are the Observe and Span of the group committer named
// op ("reports", "creates"), from Commits.
func (o EngineOptions) CommitHooks(op string) (
	observe func(items int, d time.Duration, err error),
	span func(ctx context.Context, items int, callers []trace.SpanContext) (context.Context, func(error)),
) {
	t := o.Commits
	observe = func(items int, d time.Duration, err error) { t.Observe(op, items, d, err) }
	if t.TracerProvider != nil {
		span = func(ctx context.Context, items int, callers []trace.SpanContext) (context.Context, func(error)) {
			return t.StartSpan(ctx, op, items, callers)
		}
	}
	return observe, span
}
