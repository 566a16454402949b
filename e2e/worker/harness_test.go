package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

// waitTimeout bounds every wait for the coordinator or the worker to reach
// a state; reaching it is a failure, never a pass.
const waitTimeout = 30 * time.Second

// harness is one real coordinator on a real socket with a client
// connection that records the worker's unary calls.
type harness struct {
	t      *testing.T
	srv    *testserver.Server
	conn   *grpc.ClientConn
	rec    *recordingConn
	client *worker.Client
	admin  leaseholdv1.AdminServiceClient
	clock  *fakeClock
}

type setupOptions struct {
	postgres bool
	// clock, when set, is the coordinator's clock (Config.Now).
	clock *fakeClock
	// configure, when set, changes the coordinator's config further.
	configure func(*coordinator.Config)
}

func setup(t *testing.T, o setupOptions) *harness {
	t.Helper()
	opts := testserver.Options{Postgres: o.postgres}
	if o.clock != nil {
		// The reaper looks often: the clock jumps past expiries it was not
		// told of.
		opts.Configure = func(c *coordinator.Config) { c.Now, c.ReapIntervalMax = o.clock.Now, 20*time.Millisecond }
	}
	if o.configure != nil {
		prev := opts.Configure
		opts.Configure = func(c *coordinator.Config) {
			if prev != nil {
				prev(c)
			}
			o.configure(c)
		}
	}
	srv := testserver.Start(t, opts)
	// Reconnect quickly after a coordinator restart: grpc's default
	// transport backoff starts at 1s and grows to 2 minutes.
	conn, err := grpc.NewClient(srv.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatalf("dial %s: %v", srv.Addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	rec := &recordingConn{ClientConnInterface: conn}
	return &harness{
		t: t, srv: srv, conn: conn, rec: rec,
		client: worker.NewClient(conn),
		admin:  leaseholdv1.NewAdminServiceClient(conn),
		clock:  o.clock,
	}
}

// fastRetries makes failed attempts of queue come back almost at once, so
// retry tests do not wait on the default 1s backoff.
func (h *harness) fastRetries(queue string) {
	h.t.Helper()
	_, err := h.admin.UpdateQueuePolicy(context.Background(), &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
		Queue: queue,
		Retry: &leaseholdv1.RetryPolicy{
			MaxAttempts:    5,
			InitialDelay:   durationpb.New(10 * time.Millisecond),
			MaxDelay:       durationpb.New(50 * time.Millisecond),
			Multiplier:     2,
			JitterFraction: proto.Float64(0),
		},
	}})
	if err != nil {
		h.t.Fatalf("set fast retry policy on %s: %v", queue, err)
	}
}

func (h *harness) create(queue, kind, payload string) *leaseholdv1.Job {
	h.t.Helper()
	job, _, err := h.client.Create(context.Background(), queue, kind, []byte(payload), nil)
	if err != nil {
		h.t.Fatalf("create %s job: %v", kind, err)
	}
	return job
}

// waitJob polls the job until cond holds (a bounded wait on a condition,
// not a sleep for ordering).
func (h *harness) waitJob(id, what string, cond func(*leaseholdv1.Job) bool) *leaseholdv1.Job {
	h.t.Helper()
	deadline := time.Now().Add(waitTimeout)
	var last *leaseholdv1.Job
	for time.Now().Before(deadline) {
		job, err := h.client.Get(context.Background(), id)
		if err == nil {
			last = job
			if cond(job) {
				return job
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.t.Fatalf("job %s never became %s; last seen: %v", id, what, last)
	return nil
}

// waitFinal waits for the job's terminal event through WatchJob.
func (h *harness) waitFinal(id string) *leaseholdv1.Job {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := h.client.Watch(ctx, id, func(*leaseholdv1.Event) error { return nil }); err != nil {
		h.t.Fatalf("watch job %s to its end: %v", id, err)
	}
	job, err := h.client.Get(context.Background(), id)
	if err != nil {
		h.t.Fatalf("get job %s: %v", id, err)
	}
	return job
}

func (h *harness) events(id string) []*leaseholdv1.Event {
	h.t.Helper()
	evs, err := h.client.Events(context.Background(), id)
	if err != nil {
		h.t.Fatalf("events of %s: %v", id, err)
	}
	return evs
}

// runningWorker is a Worker whose Run executes on its own goroutine.
type runningWorker struct {
	*worker.Worker
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// start runs a worker on the recording connection; register adds its
// handlers. The worker is stopped (and must return nil) when the test
// ends, before the coordinator stops.
func (h *harness) start(cfg worker.Config, register func(w *worker.Worker)) *runningWorker {
	h.t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = testLogger(h.t)
	}
	w, err := worker.New(h.rec, cfg)
	if err != nil {
		h.t.Fatalf("new worker: %v", err)
	}
	register(w)
	ctx, cancel := context.WithCancel(context.Background())
	rw := &runningWorker{Worker: w, cancel: cancel, done: make(chan error, 1)}
	go func() { rw.done <- w.Run(ctx) }()
	h.t.Cleanup(func() {
		if err := rw.stop(); err != nil {
			h.t.Errorf("worker Run returned %v, want nil", err)
		}
	})
	return rw
}

// stop cancels Run's context and waits (bounded) for Run to return.
func (rw *runningWorker) stop() error {
	rw.once.Do(func() {
		rw.cancel()
		select {
		case rw.err = <-rw.done:
		case <-time.After(2 * waitTimeout):
			rw.err = errors.New("Run did not return after its context was cancelled")
		}
	})
	return rw.err
}

// recordingConn passes every call through and records the unary worker
// calls, so tests can assert what was (not) published.
type recordingConn struct {
	grpc.ClientConnInterface
	// legacy makes GetVersion answer UNIMPLEMENTED, as an older
	// coordinator without stream reports would.
	legacy atomic.Bool
	// connects counts the Connect streams opened.
	connects atomic.Int32
	// reportBatches counts the ReportBatch messages sent, leaseBatches
	// and resultBatches the LeaseBatch and ReportResultBatch messages
	// received.
	reportBatches, leaseBatches, resultBatches atomic.Int32
	// largestReportBatch is the encoded size of the largest ReportBatch
	// sent.
	largestReportBatch atomic.Int64
	mu                 sync.Mutex
	calls              []recordedCall
}

type recordedCall struct {
	method string
	req    proto.Message
	stream bool // sent on the Connect stream rather than as a unary call
}

func (c *recordingConn) Invoke(ctx context.Context, method string, args, reply any, opts ...grpc.CallOption) error {
	if method == leaseholdv1.WorkerService_GetVersion_FullMethodName && c.legacy.Load() {
		return status.Error(codes.Unimplemented, "unknown method GetVersion")
	}
	if m, ok := args.(proto.Message); ok {
		c.mu.Lock()
		c.calls = append(c.calls, recordedCall{method: method, req: proto.Clone(m)})
		c.mu.Unlock()
	}
	return c.ClientConnInterface.Invoke(ctx, method, args, reply, opts...)
}

// NewStream records the reports a Connect stream carries as calls of the
// unary method they stand for, so tests count a report however it went.
func (c *recordingConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.ClientConnInterface.NewStream(ctx, desc, method, opts...)
	if err != nil {
		return nil, err
	}
	if method == leaseholdv1.WorkerService_Connect_FullMethodName {
		c.connects.Add(1)
	}
	return &recordingStream{ClientStream: cs, c: c}, nil
}

type recordingStream struct {
	grpc.ClientStream
	c *recordingConn
}

func (s *recordingStream) SendMsg(m any) error {
	if r, ok := m.(*leaseholdv1.ConnectRequest); ok {
		if b := r.GetReportBatch(); b != nil {
			s.c.reportBatches.Add(1)
			for size := int64(proto.Size(r)); ; {
				if old := s.c.largestReportBatch.Load(); size <= old || s.c.largestReportBatch.CompareAndSwap(old, size) {
					break
				}
			}
			for _, it := range b.GetReports() {
				s.record(it)
			}
		} else {
			s.record(r)
		}
	}
	return s.ClientStream.SendMsg(m)
}

// record records the report r carries (a ConnectRequest or an item of a
// ReportBatch), if any.
func (s *recordingStream) record(r interface {
	GetComplete() *leaseholdv1.CompleteRequest
	GetRetry() *leaseholdv1.RetryRequest
	GetCancel() *leaseholdv1.CancelRequest
	GetRelease() *leaseholdv1.ReleaseRequest
},
) {
	var method string
	var req proto.Message
	switch {
	case r.GetComplete() != nil:
		method, req = "Complete", r.GetComplete()
	case r.GetRetry() != nil:
		method, req = "Retry", r.GetRetry()
	case r.GetCancel() != nil:
		method, req = "Cancel", r.GetCancel()
	case r.GetRelease() != nil:
		method, req = "Release", r.GetRelease()
	default:
		return
	}
	s.c.mu.Lock()
	s.c.calls = append(s.c.calls, recordedCall{method: "/leasehold.v1.WorkerService/" + method, req: proto.Clone(req), stream: true})
	s.c.mu.Unlock()
}

func (s *recordingStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if r, ok := m.(*leaseholdv1.ConnectResponse); ok && err == nil {
		switch {
		case r.GetLeaseBatch() != nil:
			s.c.leaseBatches.Add(1)
		case r.GetReportResults() != nil:
			s.c.resultBatches.Add(1)
		}
	}
	return err
}

// sentOnStream counts the recorded calls to method that went on the
// Connect stream (stream true) or as unary calls (stream false).
func (c *recordingConn) sentOnStream(method string, stream bool) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, call := range c.calls {
		if call.method == "/leasehold.v1.WorkerService/"+method && call.stream == stream {
			n++
		}
	}
	return n
}

// tokensSent returns the lease tokens of every recorded call to method
// ("Complete", "Retry", "Cancel", "Release") for jobID, whether it went as
// a unary call or on the Connect stream.
func (c *recordingConn) tokensSent(method, jobID string) []*leaseholdv1.LeaseToken {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*leaseholdv1.LeaseToken
	for _, call := range c.calls {
		if call.method != "/leasehold.v1.WorkerService/"+method {
			continue
		}
		r, ok := call.req.(interface {
			GetToken() *leaseholdv1.LeaseToken
		})
		if ok && r.GetToken().GetJobId() == jobID {
			out = append(out, r.GetToken())
		}
	}
	return out
}

// fakeClock is the coordinator's injected clock: real time plus an offset
// the test moves forward to cross lease expiry without sleeping.
type fakeClock struct{ offset atomic.Int64 }

func (c *fakeClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *fakeClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// testLogger is the worker's logger: the test's output, each record
// marked as the worker's (the coordinator logs there too).
func testLogger(t *testing.T) *slog.Logger {
	return testlog.Logger(t).With(slog.String("side", "worker"))
}

// recv waits (bounded) for a value on ch.
func recv[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		var zero T
		return zero
	}
}
