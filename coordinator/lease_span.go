package coordinator

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasehold/leasehold/store"
)

// tracerName is the instrumentation scope of the coordinator's own spans
// (the per-call server spans are otelgrpc's).
const tracerName = "github.com/leasehold/leasehold/coordinator"

// Span names of a granted lease. A pushed lease starts a trace of its own:
// the stream it goes out on lives for hours, and parenting every push to
// it would make one endless trace. A claimed lease is a child of the Claim
// call that asked for it. Both link to the producer's span, carried in the
// job's metadata (worker.Client.Create puts it there), like the handler
// span the worker starts: producer → CreateJob, then (link) lease, then
// (link) handler → its reports.
const (
	spanLeasePush  = "leasehold.lease.push"
	spanLeaseClaim = "leasehold.lease.claim"
)

// leasePushed records a lease pushed to worker on its Connect stream: the
// claims counter and a span in a new trace, linked to the producer's span.
// Call it once per job the dispatcher delivered to a stream (session.deliver),
// after the lease was queued for sending.
func (c *Coordinator) leasePushed(tenant string, j store.ClaimedJob) {
	c.core.metrics.leaseGranted(context.Background(), tenant, j.Job.Queue)
	c.leaseSpan(context.Background(), spanLeasePush, leasePushStart, j)
}

// leasesClaimed records leases handed out by a unary Claim: the claims
// counter and one span per lease, children of the call's span (in ctx) and
// linked to each producer's span.
func (c *Coordinator) leasesClaimed(ctx context.Context, tenant string, jobs []store.ClaimedJob) {
	for _, j := range jobs {
		c.core.metrics.leaseGranted(ctx, tenant, j.Job.Queue)
		c.leaseSpan(ctx, spanLeaseClaim, leaseClaimStart, j)
	}
}

// The start options of the lease spans that do not depend on the lease,
// built once.
var (
	leasePushStart  = []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindProducer)}
	leaseClaimStart = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer)}
)

// leaseSpan records the span of one granted lease, started with opts and
// linked to the producer's span when the job carries one. The lease's
// attributes (no payload, no metadata values) are set only when the span
// records: a lease that is not sampled costs no allocation for them. (A
// sampler therefore decides without them; the standard ones, parent-based
// and trace-id ratio, do not read attributes.)
func (c *Coordinator) leaseSpan(ctx context.Context, name string, opts []trace.SpanStartOption, j store.ClaimedJob) {
	//nolint:contextcheck // producerSpan reads the producer's span from the job alone, deliberately not from ctx
	if producer := producerSpan(j.Job.Metadata); producer.IsValid() {
		opts = append(opts[:len(opts):len(opts)], trace.WithLinks(trace.Link{SpanContext: producer}))
	}
	_, span := c.core.tracer.Start(ctx, name, opts...)
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("leasehold.job.id", j.Job.ID),
			attribute.String("leasehold.job.queue", j.Job.Queue),
			attribute.String("leasehold.job.kind", j.Job.Kind),
			attribute.Int("leasehold.job.attempt", int(j.Job.Attempts)),
			attribute.Int64("leasehold.lease.generation", j.Token.Generation),
			attribute.String("leasehold.worker.id", j.Token.WorkerID),
		)
	}
	span.End()
}

// producerSpan is the span context a producer put into a job's metadata in
// W3C trace-context form, or an invalid one.
func producerSpan(md map[string]string) trace.SpanContext {
	if len(md) == 0 {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(
		propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(md)))
}
