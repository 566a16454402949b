package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// SDK identity sent in Hello.
const (
	sdkName    = "leasehold-go"
	sdkVersion = "0.1.0"
	tracerName = "github.com/leasehold/leasehold/worker"
)

// renewBatchMax is the most tokens one Heartbeat or Renew may carry.
const renewBatchMax = 1000

// streamCloseTimeout bounds how long shutdown waits for the coordinator to
// end a half-closed stream.
const streamCloseTimeout = 5 * time.Second

// heartbeatIntervalMin keeps a tiny configured lease from turning the
// heartbeat into a busy loop.
const heartbeatIntervalMin = 50 * time.Millisecond

// Handler runs one job. The context is cancelled, with a cause readable by
// context.Cause, when the lease is lost (ErrLeaseLost), the job's
// cancellation is requested (ErrCancelRequested) or shutdown's grace period
// ends (ErrShutdown).
//
// Returning a nil error completes the job with result. A returned error is
// retryable unless wrapped by NonRetryable; see Retryable, RetryAfter and
// WithCode. A panic is a retryable failure with code "PANIC".
type Handler func(ctx context.Context, job *Job) (result []byte, err error)

// Worker runs handlers for jobs leased from a coordinator over
// WorkerService.Connect. Create it with New, register handlers, then Run.
type Worker struct {
	cfg    Config
	api    leaseholdv1.WorkerServiceClient
	log    *slog.Logger
	tracer trace.Tracer

	// workCtx parents every handler context; Run cancels it with cause
	// ErrShutdown when the grace period ends. Set by Run before any
	// goroutine that reads it starts.
	workCtx context.Context

	// mu guards the fields below. Lock order: Worker.mu, then
	// execution.mu; never hold mu across a network call or a channel send
	// that can block.
	mu        sync.Mutex
	handlers  map[string]Handler
	fallback  Handler
	handleErr error
	started   bool
	// stopping: Run's context is done. No credits are granted and leases
	// still pushed against earlier credits are released at once.
	stopping bool
	// running holds every lease a handler is working on (or reporting for).
	running map[leaseKey]*execution
	// leasesOf counts running's leases per job ID, so that a new lease
	// looks for an older generation of its job (to fence it off) only when
	// one is held, not through every running lease.
	leasesOf map[string]int
	// handoff passes a lease to a handler goroutine waiting for one
	// (runHandler); unbuffered, so a send succeeds only when one waits.
	handoff chan *execution
	// busy counts the handlers still running: Capacity bounds it. A lease
	// whose handler returned no longer takes capacity while its outcome is
	// being committed, so the next job need not wait for that commit; the
	// leases being reported (len(running) - busy) are bounded by Capacity
	// too.
	busy int
	// active counts goroutines that may still publish for a lease
	// (handlers and releases); activeChanged is closed and replaced each
	// time it drops, so waiters can watch it without polling.
	active        int
	activeChanged chan struct{}
	// sess is the stream currently welcomed by a coordinator, or nil.
	sess *session
	// leaseDuration is the lease pushed leases get (from the last Welcome).
	leaseDuration time.Duration
}

// New returns a Worker that talks to the coordinator through conn. The
// configuration is copied with defaults applied; an invalid one is an
// error. conn is typically a *grpc.ClientConn, dialled with DialOptions so
// its calls are traced; the Worker never closes it.
func New(conn grpc.ClientConnInterface, cfg Config) (*Worker, error) {
	if conn == nil {
		return nil, errors.New("worker: New needs a connection (grpc.NewClient)")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tp := cfg.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Worker{
		cfg:           cfg,
		api:           leaseholdv1.NewWorkerServiceClient(conn),
		log:           cfg.Logger.With(slog.String("worker_id", cfg.WorkerID)),
		tracer:        tp.Tracer(tracerName, trace.WithInstrumentationVersion(sdkVersion)),
		handlers:      map[string]Handler{},
		running:       map[leaseKey]*execution{},
		leasesOf:      map[string]int{},
		handoff:       make(chan *execution),
		activeChanged: make(chan struct{}),
		leaseDuration: cmp.Or(cfg.LeaseDuration, LeaseDurationServerDefault),
	}, nil
}

// ID returns the worker identity leases are granted to.
func (w *Worker) ID() string { return w.cfg.WorkerID }

// Handle registers h for jobs of kind. Register every handler before Run;
// registering the same kind twice, an empty kind or a nil handler makes
// Run fail.
func (w *Worker) Handle(kind string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case kind == "":
		w.handleErr = errors.Join(w.handleErr, errors.New("worker: Handle needs a kind"))
	case h == nil:
		w.handleErr = errors.Join(w.handleErr, fmt.Errorf("worker: Handle(%q) got a nil handler", kind))
	case w.handlers[kind] != nil:
		w.handleErr = errors.Join(w.handleErr, fmt.Errorf("worker: a handler for kind %q is already registered", kind))
	default:
		w.handlers[kind] = h
	}
}

// HandleAny registers h for every kind that has no handler of its own.
func (w *Worker) HandleAny(h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h == nil {
		w.handleErr = errors.Join(w.handleErr, errors.New("worker: HandleAny got a nil handler"))
		return
	}
	w.fallback = h
}

func (w *Worker) handlerFor(kind string) Handler {
	w.mu.Lock()
	defer w.mu.Unlock()
	if h := w.handlers[kind]; h != nil {
		return h
	}
	return w.fallback
}

// Run connects, takes work and runs handlers until ctx is done, then shuts
// down gracefully and returns nil:
//
//  1. It stops taking work: no more credits, no reconnects, and the stream
//     is half-closed; a lease still pushed against an earlier credit is
//     released at once.
//  2. Running handlers get Config.ShutdownGrace to finish; their leases
//     keep being renewed and their outcomes are reported as usual.
//  3. Handlers still running then are cancelled (cause ErrShutdown) and
//     their leases released, except those already lost.
//  4. It waits for every handler to return and every report to finish,
//     closes the stream and returns.
//
// A handler that ignores its context delays step 4, though its lease was
// already released in step 3. Run returns an error only for a bad setup
// (no handlers, Run called twice) or when the coordinator refuses the
// worker outright (an invalid Hello, an unimplemented service), after the
// same graceful shutdown.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	switch {
	case w.started:
		w.mu.Unlock()
		return errors.New("worker: Run was already called; create a new Worker")
	case w.handleErr != nil:
		w.mu.Unlock()
		return w.handleErr
	case len(w.handlers) == 0 && w.fallback == nil:
		w.mu.Unlock()
		return errors.New("worker: no handlers: call Handle or HandleAny before Run")
	}
	w.started = true
	w.mu.Unlock()

	// Handlers, reports and the stream outlive ctx by design (the grace
	// period); they keep its values but not its cancellation.
	base := context.WithoutCancel(ctx)
	workCtx, cancelWork := context.WithCancelCause(base)
	defer cancelWork(ErrShutdown)
	w.workCtx = workCtx
	streamCtx, stopStream := context.WithCancel(base)
	defer stopStream()
	hbCtx, stopHeartbeats := context.WithCancel(base)
	defer stopHeartbeats()

	w.log.InfoContext(ctx, "worker starting", slog.Any("queues", w.cfg.Queues), slog.Int("capacity", w.cfg.Capacity))
	stopConnecting := make(chan struct{})
	connectDone := make(chan error, 1)
	go func() { connectDone <- w.connectLoop(streamCtx, stopConnecting) }()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		w.heartbeatLoop(hbCtx)
	}()

	var runErr error
	select {
	case <-ctx.Done():
	case runErr = <-connectDone:
		connectDone = nil
	}

	// 1. Stop taking work: half-close the stream so the coordinator pushes
	// nothing more; heartbeats go through Renew from now on.
	w.mu.Lock()
	w.stopping = true
	s := w.sess
	w.mu.Unlock()
	close(stopConnecting)
	if s != nil {
		s.closeSend()
	}
	w.log.InfoContext(ctx, "worker stopping: waiting for running handlers", slog.Duration("grace", w.cfg.ShutdownGrace))

	// 2. Let running handlers finish within the grace period.
	grace := time.NewTimer(w.cfg.ShutdownGrace)
	defer grace.Stop()
	if !w.waitIdle(grace.C) {
		// 3. Cancel the rest and give their leases back.
		cancelWork(ErrShutdown)
		n := w.releaseRunning(ctx)
		w.log.WarnContext(ctx, "grace period over: cancelled running handlers and released their leases", slog.Int("released", n))
	}

	// 4. Wait for every handler and report, and for the coordinator to end
	// the half-closed stream (bounded: a stream that does not end is cut).
	// A lease pushed before the stream ended is released by onLease and
	// counted in active, hence the second wait.
	w.waitIdle(nil)
	if connectDone != nil {
		t := time.NewTimer(streamCloseTimeout)
		select {
		case err := <-connectDone:
			connectDone = nil
			runErr = cmp.Or(runErr, err)
		case <-t.C:
		}
		t.Stop()
	}
	stopStream()
	if connectDone != nil {
		runErr = cmp.Or(runErr, <-connectDone)
	}
	w.waitIdle(nil)
	stopHeartbeats()
	<-hbDone
	w.log.InfoContext(ctx, "worker stopped")
	return runErr
}

// waitIdle waits until no handler or release is active, or until timeout
// fires (nil: no timeout). It reports whether the worker went idle.
func (w *Worker) waitIdle(timeout <-chan time.Time) bool {
	for {
		w.mu.Lock()
		n, changed := w.active, w.activeChanged
		w.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-changed:
		case <-timeout:
			return false
		}
	}
}

// doneActive marks one active goroutine finished.
func (w *Worker) doneActive() {
	w.mu.Lock()
	w.active--
	close(w.activeChanged)
	w.activeChanged = make(chan struct{})
	w.mu.Unlock()
}

// handlerReturned frees the capacity of a handler that returned: its
// outcome is about to be reported.
func (w *Worker) handlerReturned() {
	w.mu.Lock()
	w.busy--
	s := w.sess
	w.mu.Unlock()
	if s != nil {
		s.wakeCredits()
	}
}

// finished removes a handler's lease from the running set after its
// outcome was reported.
func (w *Worker) finished(e *execution) {
	e.cancel(context.Canceled) // release the context's resources
	w.mu.Lock()
	if w.running[e.key] == e {
		delete(w.running, e.key)
		if w.leasesOf[e.key.jobID]--; w.leasesOf[e.key.jobID] <= 0 {
			delete(w.leasesOf, e.key.jobID)
		}
	}
	s := w.sess
	w.mu.Unlock()
	w.doneActive()
	if s != nil {
		s.wakeCredits()
	}
}

// releaseRunning takes the outcome right of every running handler's lease
// and releases those not lost. It returns how many it releases.
func (w *Worker) releaseRunning(ctx context.Context) int {
	w.mu.Lock()
	execs := slices.Collect(maps.Values(w.running))
	w.mu.Unlock()
	n := 0
	for _, e := range execs {
		right := e.claim(true)
		if !right.ok || right.lost {
			continue
		}
		w.mu.Lock()
		w.active++
		w.mu.Unlock()
		n++
		go w.release(ctx, e.token, "shutdown grace period over")
	}
	return n
}

// onLease takes a lease pushed on session s: it starts the handler, or
// releases the lease when the worker cannot take it.
func (w *Worker) onLease(ctx context.Context, s *session, l *leaseholdv1.LeasedJob) {
	token := l.GetToken()
	key := keyOf(token)
	w.mu.Lock()
	s.outstanding = max(0, s.outstanding-1)
	var why string
	switch {
	case w.stopping:
		why = "worker is shutting down"
	case s.draining:
		why = "stream is draining"
	case w.busy >= w.cfg.Capacity:
		// Only a coordinator pushing beyond the granted credits gets here;
		// capacity is a promise to the handlers, so the lease goes back.
		why = "pushed beyond the granted credits"
	case w.running[key] != nil:
		why = "lease already held"
	}
	w.active++
	if why != "" {
		w.mu.Unlock()
		w.log.WarnContext(ctx, "releasing pushed lease", slog.String("job_id", key.jobID), slog.Int64("generation", key.generation), slog.String("why", why))
		go w.release(ctx, token, why)
		return
	}
	job := jobFromProto(l)
	execCtx, cancel := context.WithCancelCause(w.workCtx)
	e := &execution{w: w, token: token, key: key, job: job, ctx: execCtx, cancel: cancel}
	job.exec = e
	// A newer generation of a job we still run means our older lease
	// expired and was reclaimed: fence the old handler off.
	var stale []*execution
	if w.leasesOf[key.jobID] > 0 {
		for k, old := range w.running {
			if k.jobID == key.jobID && k.generation < key.generation {
				stale = append(stale, old)
			}
		}
	}
	w.running[key] = e
	w.leasesOf[key.jobID]++
	w.busy++
	w.mu.Unlock()
	for _, old := range stale {
		old.markLost()
	}
	w.log.DebugContext(ctx, "lease received", slog.String("job_id", key.jobID), slog.Int64("generation", key.generation), slog.String("kind", job.Kind), slog.Int64("attempt", int64(job.Attempt)))
	w.runHandler(e) //nolint:contextcheck // the handler runs under e.ctx (the worker's work context): it outlives the stream that pushed it
}

// handlerIdle is how long a goroutine that ran a handler waits for the
// next lease before it exits.
const handlerIdle = time.Second

// runHandler runs e's handler on an idle handler goroutine, or on a new
// one when none waits: a new goroutine per job cost its creation and the
// growth of its stack, 5-8% of a worker's CPU in a drain profile. The
// goroutines exit after handlerIdle without work, or when Run has
// returned (the work context is done).
func (w *Worker) runHandler(e *execution) {
	select {
	case w.handoff <- e:
	default:
		go w.handlerLoop(e, w.workCtx.Done())
	}
}

// handlerLoop runs e's handler, then the handlers handed to it, until it
// has waited handlerIdle for one or stop is closed.
func (w *Worker) handlerLoop(e *execution, stop <-chan struct{}) {
	idle := time.NewTimer(handlerIdle)
	defer idle.Stop()
	for {
		w.execute(e)
		idle.Reset(handlerIdle)
		select {
		case e = <-w.handoff:
		case <-idle.C:
			return
		case <-stop:
			return
		}
	}
}

// lookup finds the running execution for a token's exact generation.
func (w *Worker) lookup(t *leaseholdv1.LeaseToken) *execution {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.running[keyOf(t)]
}

// applyRenewals acts on per-lease heartbeat or Renew answers.
func (w *Worker) applyRenewals(results []*leaseholdv1.RenewResult) {
	for _, r := range results {
		e := w.lookup(r.GetToken())
		if e == nil {
			continue
		}
		switch r.GetStatus() {
		case leaseholdv1.RenewStatus_RENEW_STATUS_LOST:
			w.log.Info("lease lost", slog.String("job_id", e.key.jobID), slog.Int64("generation", e.key.generation))
			e.markLost()
		case leaseholdv1.RenewStatus_RENEW_STATUS_REPORTED:
			// A report made with this lease's token ended it: ours, sent
			// before this heartbeat's answer came back, whose own answer
			// says how it ended. Without a report of ours the lease is
			// gone all the same (the coordinator released it for us).
			if !e.reporting() {
				w.log.Info("lease lost", slog.String("job_id", e.key.jobID), slog.Int64("generation", e.key.generation),
					slog.String("why", "ended by a report this worker did not make"))
				e.markLost()
			}
		case leaseholdv1.RenewStatus_RENEW_STATUS_CANCEL_REQUESTED:
			e.markCancelRequested("")
		default:
			// RENEWED (and UNSPECIFIED): nothing to do
		}
	}
}

// heartbeatInterval is LeaseDuration × HeartbeatFraction.
func (w *Worker) heartbeatInterval() time.Duration {
	w.mu.Lock()
	lease := w.leaseDuration
	w.mu.Unlock()
	return max(time.Duration(float64(lease)*w.cfg.HeartbeatFraction), heartbeatIntervalMin)
}

// heartbeatLoop renews every held lease each interval until ctx is done.
// It is one loop for the whole worker, not per stream, so leases keep being
// renewed across reconnects.
func (w *Worker) heartbeatLoop(ctx context.Context) {
	for {
		t := time.NewTimer(w.heartbeatInterval())
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		w.heartbeatOnce(ctx)
	}
}

// heartbeatOnce sends one batched renewal for all held leases: on the
// stream when one is up, else through the unary Renew (between streams).
func (w *Worker) heartbeatOnce(ctx context.Context) {
	w.mu.Lock()
	execs := slices.Collect(maps.Values(w.running))
	s := w.sess
	lease := w.leaseDuration
	w.mu.Unlock()
	tokens := make([]*leaseholdv1.LeaseToken, 0, len(execs))
	for _, e := range execs {
		if e.heartbeatable() {
			tokens = append(tokens, e.token)
		}
	}
	for chunk := range slices.Chunk(tokens, renewBatchMax) {
		if s != nil && s.enqueue(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{
			Heartbeat: &leaseholdv1.Heartbeat{Tokens: chunk},
		}}) {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, max(time.Duration(float64(lease)*w.cfg.HeartbeatFraction), time.Second))
		resp, err := w.api.Renew(rctx, &leaseholdv1.RenewRequest{Tokens: chunk, LeaseDuration: durationpb.New(lease)})
		cancel()
		if err != nil {
			w.log.DebugContext(ctx, "renew failed; retrying next heartbeat", slog.Int("leases", len(chunk)), slog.Any("error", err))
			continue
		}
		w.applyRenewals(resp.GetResults())
	}
}
