package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/backoff"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Client is the producer and operator side of Leasehold: it creates, reads,
// cancels and watches jobs through JobService, and manages queues, the
// dead-letter queue, circuit breakers and workers through AdminService
// (client_admin.go). It is safe for concurrent use.
type Client struct {
	jobs      leaseholdv1.JobServiceClient
	admin     leaseholdv1.AdminServiceClient
	schedules leaseholdv1.ScheduleServiceClient
	ops       leaseholdv1.OperationServiceClient
}

// NewClient returns a Client over conn (typically a *grpc.ClientConn,
// which the Client never closes). Dial it with DialOptions so that each
// call is a client span and the coordinator's CreateJob span joins the
// caller's trace.
func NewClient(conn grpc.ClientConnInterface) *Client {
	return &Client{
		jobs:      leaseholdv1.NewJobServiceClient(conn),
		admin:     leaseholdv1.NewAdminServiceClient(conn),
		schedules: leaseholdv1.NewScheduleServiceClient(conn),
		ops:       leaseholdv1.NewOperationServiceClient(conn),
	}
}

// CreateOptions are the optional parts of a job. A nil *CreateOptions
// means all defaults.
type CreateOptions struct {
	// RequestID makes the create idempotent: repeating it with an equal
	// request returns the original job (replayed = true); with a different
	// request it fails with ALREADY_EXISTS, reason IDEMPOTENCY_CONFLICT.
	RequestID string
	// Priority in [-1000, 1000]; higher is claimed first.
	Priority int32
	// RunAt delays the job until then; RunAfter (which wins) until now + it.
	RunAt    time.Time
	RunAfter time.Duration
	// MaxAttempts overrides the queue's attempt budget (0 = the queue's).
	MaxAttempts int32
	// Metadata for the handler. The caller's trace context is added to a
	// copy under "traceparent"/"tracestate" unless already present.
	Metadata map[string]string
	// Dependency names the external system the job needs (circuit breakers).
	Dependency string
	// ConcurrencyKey groups the job for the queue's per-key limits (e.g. a
	// customer id).
	ConcurrencyKey string
	// Unique makes the job unique (docs/unique-jobs.md): while a job with
	// its key is live (or within its period) the create answers that job
	// instead of making another; CreateJob's answer says so (duplicate).
	Unique *leaseholdv1.UniqueOptions
}

// Create submits one job and reports whether it is a replay of an earlier
// create with the same RequestID. The caller's span context (if any) is
// injected into the job's metadata with the W3C trace-context format, so
// the worker's handler span links to it.
func (c *Client) Create(ctx context.Context, queue, kind string, payload []byte, opts *CreateOptions) (job *leaseholdv1.Job, replayed bool, err error) {
	resp, err := c.CreateJob(ctx, queue, kind, payload, opts)
	if err != nil {
		return nil, false, err
	}
	return resp.GetJob(), resp.GetReplayed(), nil
}

// CreateJob is Create with the whole answer: the job, whether it is a
// replay of an earlier create with the same RequestID, and whether it is
// the existing job that holds the unique key (duplicate).
func (c *Client) CreateJob(ctx context.Context, queue, kind string, payload []byte, opts *CreateOptions) (*leaseholdv1.CreateJobResponse, error) {
	if opts == nil {
		opts = &CreateOptions{}
	}
	spec := &leaseholdv1.JobSpec{
		Queue:          queue,
		Kind:           kind,
		Payload:        payload,
		Metadata:       withTraceContext(ctx, opts.Metadata),
		Priority:       opts.Priority,
		MaxAttempts:    opts.MaxAttempts,
		Dependency:     opts.Dependency,
		ConcurrencyKey: opts.ConcurrencyKey,
	}
	if !opts.RunAt.IsZero() {
		spec.RunAt = timestamppb.New(opts.RunAt)
	}
	if opts.RunAfter != 0 {
		spec.RunAfter = durationpb.New(opts.RunAfter)
	}
	resp, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec, RequestId: opts.RequestID, Unique: opts.Unique})
	if err != nil {
		return nil, fmt.Errorf("leasehold: create %s job on queue %q: %w", kind, queue, err)
	}
	return resp, nil
}

// BatchCreate submits up to 1,000 jobs in one transaction (all or none).
// The caller's trace context is injected into each job's metadata; reqs
// themselves are not modified.
func (c *Client) BatchCreate(ctx context.Context, reqs []*leaseholdv1.CreateJobRequest) ([]*leaseholdv1.CreateJobResponse, error) {
	batch := make([]*leaseholdv1.CreateJobRequest, len(reqs))
	for i, r := range reqs {
		cp := proto.CloneOf(r)
		if cp.GetJob() != nil {
			cp.Job.Metadata = withTraceContext(ctx, cp.GetJob().GetMetadata())
		}
		batch[i] = cp
	}
	resp, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: batch})
	if err != nil {
		return nil, fmt.Errorf("leasehold: batch create %d jobs: %w", len(reqs), err)
	}
	return resp.GetResponses(), nil
}

// Get returns one job.
func (c *Client) Get(ctx context.Context, id string) (*leaseholdv1.Job, error) {
	resp, err := c.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: id})
	if err != nil {
		return nil, fmt.Errorf("leasehold: get job %s: %w", id, err)
	}
	return resp.GetJob(), nil
}

// List returns one page of jobs, newest first.
func (c *Client) List(ctx context.Context, req *leaseholdv1.ListJobsRequest) (*leaseholdv1.ListJobsResponse, error) {
	resp, err := c.jobs.ListJobs(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("leasehold: list jobs: %w", err)
	}
	return resp, nil
}

// Cancel cancels a job: a queued one at once (CANCELLED), a leased one by
// asking its holder (cancel_requested, then CANCELLED when it stops).
func (c *Client) Cancel(ctx context.Context, id, reason string) (*leaseholdv1.Job, error) {
	resp, err := c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: id, Reason: reason})
	if err != nil {
		return nil, fmt.Errorf("leasehold: cancel job %s: %w", id, err)
	}
	return resp.GetJob(), nil
}

// Events returns all of a job's events in sequence order.
func (c *Client) Events(ctx context.Context, id string) ([]*leaseholdv1.Event, error) {
	var out []*leaseholdv1.Event
	var after int64
	for {
		resp, err := c.jobs.ListJobEvents(ctx, &leaseholdv1.ListJobEventsRequest{JobId: id, AfterSequence: after})
		if err != nil {
			return nil, fmt.Errorf("leasehold: list events of job %s: %w", id, err)
		}
		out = append(out, resp.GetEvents()...)
		if !resp.GetHasMore() || len(resp.GetEvents()) == 0 {
			return out, nil
		}
		after = resp.GetEvents()[len(resp.GetEvents())-1].GetSequence()
	}
}

// watchResumes bounds how often Watch resumes after the stream broke
// without any event in between.
const watchResumes = 5

// Watch calls fn with each of the job's events, oldest first, until the
// terminal event has been delivered (then it returns nil), fn returns an
// error (returned as is), or ctx is done. When the stream breaks
// transiently it resumes after the last event delivered, so fn sees each
// event exactly once.
func (c *Client) Watch(ctx context.Context, id string, fn func(*leaseholdv1.Event) error) error {
	var after int64
	b := backoff.Exponential{Min: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		progressed, err := c.watchOnce(ctx, id, &after, fn)
		if err == nil {
			return nil
		}
		var fnErr *callbackError
		if errors.As(err, &fnErr) {
			return fnErr.err
		}
		if !isTransient(err) && !errors.Is(err, errWatchEnded) || ctx.Err() != nil {
			return fmt.Errorf("leasehold: watch job %s: %w", id, err)
		}
		if progressed {
			b.Reset()
		}
		if b.Attempts() >= watchResumes {
			return fmt.Errorf("leasehold: watch job %s: gave up after %d resumes: %w", id, watchResumes, err)
		}
		t := time.NewTimer(max(b.Next(), afterRefusal(retryInfoDelay(err))))
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("leasehold: watch job %s: %w", id, context.Cause(ctx))
		case <-t.C:
		}
	}
}

// errWatchEnded: the stream ended before the job's terminal event.
var errWatchEnded = errors.New("stream ended before the terminal event")

// callbackError marks an error returned by Watch's callback.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }

func (c *Client) watchOnce(ctx context.Context, id string, after *int64, fn func(*leaseholdv1.Event) error) (progressed bool, err error) {
	var terminal bool
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: id, AfterSequence: *after})
	if err != nil {
		return false, err
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The server ends the stream after the terminal event; an end
			// before it (a coordinator shutting down) is resumed.
			if terminal {
				return progressed, nil
			}
			return progressed, errWatchEnded
		}
		if err != nil {
			return progressed, err
		}
		ev := resp.GetEvent()
		if ev.GetSequence() <= *after {
			continue // already delivered before a resume
		}
		if err := fn(ev); err != nil {
			return progressed, &callbackError{err: err}
		}
		*after = ev.GetSequence()
		progressed = true
		terminal = isTerminalEvent(ev.GetType())
	}
}

// withTraceContext returns a copy of md with ctx's span context in W3C
// trace-context form. Keys the caller set explicitly win.
func withTraceContext(ctx context.Context, md map[string]string) map[string]string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if len(carrier) == 0 {
		return md
	}
	out := maps.Clone(md)
	if out == nil {
		out = map[string]string{}
	}
	for k, v := range carrier {
		if _, set := out[k]; !set {
			out[k] = v
		}
	}
	return out
}

func isTerminalEvent(t leaseholdv1.EventType) bool {
	switch t {
	case leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED, leaseholdv1.EventType_EVENT_TYPE_FAILED,
		leaseholdv1.EventType_EVENT_TYPE_CANCELLED, leaseholdv1.EventType_EVENT_TYPE_DEAD:
		return true
	default:
		return false
	}
}

// IsTerminal reports whether a job state is final.
func IsTerminal(s leaseholdv1.JobState) bool {
	switch s {
	case leaseholdv1.JobState_JOB_STATE_SUCCEEDED, leaseholdv1.JobState_JOB_STATE_FAILED,
		leaseholdv1.JobState_JOB_STATE_CANCELLED, leaseholdv1.JobState_JOB_STATE_DEAD:
		return true
	default:
		return false
	}
}
