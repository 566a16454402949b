package coordinator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/leasehold/leasehold/coordinator/dispatch"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// errReplaced is the cancel cause of a stream replaced by a newer stream of
// the same worker id.
var errReplaced = errors.New("replaced by a newer stream with the same worker id")

// session is one Connect stream after its Hello.
//
// Exactly one goroutine sends on the stream: the handler's, in sendLoop.
// Everything else (the receiver, the dispatcher's Deliver, CancelJob,
// Shutdown) appends to out and signals; the sender drains out in order.
type session struct {
	c           *Coordinator
	tenant      string
	hello       hello
	lease       time.Duration // for heartbeats without a duration
	connectedAt time.Time
	waiter      *dispatch.Waiter
	ctx         context.Context
	untraced    context.Context // ctx without the stream's span: see report
	cancel      context.CancelCauseFunc
	done        chan struct{} // closed when the handler returns

	// reportSlots bounds the reports being committed at once; reports
	// counts their goroutines so the handler waits for them.
	reportSlots chan struct{}
	reports     sync.WaitGroup

	// batches: the worker takes LeaseBatch and ReportResultBatch and the
	// coordinator has them on; see session_batch.go.
	batches bool

	mu         sync.Mutex // guards out…lastBytes, backlogged, leases, unacked…ackTimer, renewing, renewalEnds, closed, draining
	out        []*leaseholdv1.ConnectResponse
	outBytes   int                         // proto size of out
	outItems   int                         // leases and answers in out, each counted as one message
	lastBytes  int                         // proto size of out's last message, to which a batch may grow
	backlogged bool                        // out passed the soft bound: no claims for this stream
	leases     map[string]store.LeaseToken // job id → token held through this stream
	// unacked holds the leases pushed and not yet acknowledged (job id →
	// lease), unackedBytes their encoded size; atAckBound is set when the
	// dispatcher found no room, ackTimer runs while a lease_acks worker
	// has unacknowledged leases. See session_acks.go.
	unacked      map[string]unackedLease
	unackedBytes int
	largestLease int // encoded size of the largest lease pushed here
	atAckBound   bool
	ackTimer     *time.Timer
	// renewing is set while a heartbeat's renewal runs (the receiver runs
	// one at a time), and renewalEnds collects the leases (job id →
	// generation) whose end was applied meanwhile: see heartbeat.
	renewing    bool
	renewalEnds map[string]int64
	closed      bool          // the stream is ending: nothing more is queued
	draining    bool          // Drain was sent: no more leases
	signal      chan struct{} // capacity 1: out has messages
	bound       bool          // the worker id is bound (before the first lease is sent); sendLoop's only
}

// Bounds of a session's outbound queue. Past the soft bounds the
// dispatcher claims nothing more for the stream (its pushes are not being
// read); past the hard bounds — a client that keeps sending but never
// reads — the stream is ended with RESOURCE_EXHAUSTED.
const (
	outSoftMessages = 256
	outSoftBytes    = 4 << 20
	outHardMessages = 4 * CreditsMax
	outHardBytes    = 64 << 20
)

// errNotReading is the cancel cause of a stream whose client stopped
// reading while its queue grew past the hard bounds.
var errNotReading = errors.New("the client is not reading the stream")

// enqueueLocked queues a message for the sender; s.mu held.
func (s *session) enqueueLocked(m *leaseholdv1.ConnectResponse) {
	s.enqueueSizedLocked(m, proto.Size(m))
}

// enqueueSizedLocked queues m, whose encoded size is size: added to the
// batch the last queued message is or becomes when the stream takes
// batches (coalesceLocked), else as a message of its own. The bounds count
// each lease and answer as one message, batched or not. s.mu held.
func (s *session) enqueueSizedLocked(m *leaseholdv1.ConnectResponse, size int) {
	if s.closed {
		return
	}
	if !s.coalesceLocked(m, size) {
		s.out = append(s.out, m)
		s.lastBytes = size
	}
	s.outItems++
	s.outBytes += size
	if !s.backlogged && (s.outItems > outSoftMessages || s.outBytes > outSoftBytes) {
		s.backlogged = true
	}
	if s.outItems > outHardMessages || s.outBytes > outHardBytes {
		s.closed = true
		s.cancel(errNotReading)
		return
	}
	select {
	case s.signal <- struct{}{}:
	default:
	}
}

func (s *session) enqueue(m *leaseholdv1.ConnectResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.enqueueLocked(m)
}

// deliver is the dispatcher's Deliver: it queues the leases and records
// them as held through this stream. It refuses once the stream is ending
// or draining; the dispatcher then releases the jobs, so a draining
// stream is never pushed a lease.
func (s *session) deliver(jobs []store.ClaimedJob) bool {
	c := s.c
	s.mu.Lock()
	if s.closed || s.draining {
		s.mu.Unlock()
		return false
	}
	now := time.Now()
	for _, j := range jobs {
		s.leases[j.Token.JobID] = j.Token
		m := &leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_Lease{Lease: toLeasedJob(j, c.identity.leases.sign(j.Token))}}
		size := proto.Size(m)
		s.pushedLocked(j.Token, size, now)
		s.enqueueSizedLocked(m, size)
	}
	s.mu.Unlock()
	for _, j := range jobs {
		c.leasePushed(s.tenant, j)
	}
	c.core.activity.leased.Add(int64(len(jobs)))
	for _, j := range jobs {
		c.core.watches.notify(s.tenant, j.Job.ID)
	}
	return true
}

// held is how many leases the stream holds: with the credits it has, never
// more than its declared capacity.
func (s *session) held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.leases)
}

// isBacklogged is the dispatcher's Backlogged.
func (s *session) isBacklogged() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.backlogged
}

// forget stops counting a lease the stream no longer holds. Only that
// generation: the end of an older lease, applied late, must not forget
// the job's newer lease pushed to the same stream meanwhile.
//
// It wakes the dispatcher only when that made room: a lease forgotten
// twice (a stream report forgets its lease before the commit, and the
// commit's leaseEnded again) wakes it once.
func (s *session) forget(jobID string, generation int64) {
	s.mu.Lock()
	room := s.forgetLocked(jobID, generation)
	s.mu.Unlock()
	if room {
		// Room under the capacity may let more credits through.
		s.c.core.dispatcher.Ready(s.waiter)
	}
}

// forgetLocked is forget without waking the dispatcher; it reports whether
// the caller should wake it (the stream held the lease, or its
// acknowledgement made room under the ack bounds). s.mu held.
func (s *session) forgetLocked(jobID string, generation int64) (room bool) {
	if t, ok := s.leases[jobID]; ok && t.Generation == generation {
		delete(s.leases, jobID)
		room = true
	}
	room = s.ackedLocked(jobID, generation) || room
	if s.renewing {
		if s.renewalEnds == nil {
			s.renewalEnds = map[string]int64{}
		}
		s.renewalEnds[jobID] = generation
	}
	return room
}

// drain queues Drain and stops new leases.
func (s *session) drain(grace time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return
	}
	s.draining = true
	s.enqueueLocked(&leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_Drain{Drain: &leaseholdv1.Drain{
		Reason:      "coordinator shutting down: finish or release current leases, then reconnect",
		GracePeriod: durationpb.New(grace),
	}}})
}

// takeOut takes everything queued for the sender. A stream that was
// backlogged is ready again once its queue is taken: the sender is
// writing.
func (s *session) takeOut() []*leaseholdv1.ConnectResponse {
	s.mu.Lock()
	out := s.out
	s.out, s.outBytes, s.outItems, s.lastBytes = nil, 0, 0, 0
	wasBacklogged := s.backlogged
	s.backlogged = false
	s.mu.Unlock()
	if wasBacklogged {
		s.c.core.dispatcher.Ready(s.waiter)
	}
	return out
}

// Connect runs one worker stream: Hello → Welcome, then credits, leases,
// heartbeats, cancel and lease-lost notices, and Drain at shutdown.
func (w *workerService) Connect(stream leaseholdv1.WorkerService_ConnectServer) error {
	c := w.c
	ctx := stream.Context()
	tenant := tenantFrom(ctx)

	first, err := stream.Recv()
	if err != nil {
		return recvStatus(err)
	}
	h, err := c.v.Hello(first.GetHello())
	if err != nil {
		return toStatus(ctx, c.log, err)
	}
	// Checking the worker id reads the store; the first lease binds it.
	if err := c.defences.shedder.write(ctx, leaseholdv1.WorkerService_Connect_FullMethodName, func() error {
		return c.checkClaim(ctx, h.workerID, h.queues)
	}); err != nil {
		return err
	}

	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	s := &session{
		c: c, tenant: tenant, hello: h,
		lease:       h.lease,
		connectedAt: c.wallNow(),
		ctx:         sctx, cancel: cancel,
		untraced:    withoutSpan(sctx),
		batches:     h.batches && !c.cfg.StreamBatchesOff,
		done:        make(chan struct{}),
		leases:      make(map[string]store.LeaseToken),
		unacked:     make(map[string]unackedLease),
		signal:      make(chan struct{}, 1),
		reportSlots: make(chan struct{}, streamReportsMax),
	}
	if s.lease == 0 {
		s.lease = c.cfg.DefaultLeaseDuration
	}
	defer close(s.done)
	s.waiter = &dispatch.Waiter{
		Tenant: tenant, Worker: h.workerID, Queues: h.queues,
		LeaseDuration: h.lease, Capacity: int(h.capacity),
		Deliver: s.deliver, Held: s.held, Room: s.room, Backlogged: s.isBacklogged,
	}
	if err := c.register(s); err != nil {
		return err
	}
	defer c.unregister(s)

	welcome := &leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_Welcome{Welcome: &leaseholdv1.Welcome{
		CoordinatorId:     c.cfg.ID,
		LeaseDuration:     durationpb.New(s.lease),
		HeartbeatInterval: durationpb.New(s.lease / 3),
	}}}
	if err := stream.Send(welcome); err != nil {
		return err
	}
	c.log.DebugContext(ctx, "worker stream connected", slog.String("worker_id", h.workerID))
	if !c.core.dispatcher.Add(s.waiter, 0) {
		s.drain(c.cfg.ShutdownGrace)
	}
	defer c.core.dispatcher.Remove(s.waiter)

	recvDone := make(chan error, 1)
	go func() { recvDone <- s.recvLoop(stream) }()
	err = s.sendLoop(stream, recvDone)
	// End the receiver (it returns once the handler returns and the stream
	// context ends) and the reports in flight before the deferred cleanup.
	cancel(nil)
	s.reports.Wait()
	s.stopAckTimer()
	if cause := context.Cause(sctx); errors.Is(cause, errNotAcknowledging) || errors.Is(cause, errNotReading) || errors.Is(cause, errWorkerTaken) {
		// No round may claim for the stream again (the released leases
		// make room under its bound): its Deliver would refuse them.
		c.core.dispatcher.Remove(s.waiter)
		s.releaseUnacked(ctx)
	}
	return err
}

// sendLoop is the only sender on the stream.
func (s *session) sendLoop(stream leaseholdv1.WorkerService_ConnectServer, recvDone <-chan error) error {
	flush := func() error {
		out := s.takeOut()
		if err := s.bindOnce(out); err != nil {
			return err
		}
		for _, m := range out {
			if err := stream.Send(m); err != nil {
				return connectionGone(err)
			}
		}
		return nil
	}
	for {
		select {
		case <-s.signal:
			if err := flush(); err != nil {
				return err
			}
		case err := <-recvDone:
			// The worker closed its side (or broke the protocol): send
			// what is queued — answers to its last heartbeat — and end.
			s.close()
			if ferr := flush(); ferr != nil && err == nil {
				err = ferr
			}
			return err
		case <-s.ctx.Done():
			s.close()
			switch cause := context.Cause(s.ctx); {
			case errors.Is(cause, errReplaced):
				return statusError(codes.Aborted, ReasonStreamReplaced, errReplaced.Error())
			case errors.Is(cause, errShuttingDown):
				return statusError(codes.Unavailable, ReasonShuttingDown, "coordinator shut down: reconnect")
			case errors.Is(cause, errNotReading):
				return statusError(codes.ResourceExhausted, ReasonStreamNotReading,
					"the stream's outbound queue passed its bound because the client stopped reading it")
			case errors.Is(cause, errNotAcknowledging):
				return statusError(codes.ResourceExhausted, ReasonStreamNotAcknowledging, fmt.Sprintf(
					"a pushed lease stayed unacknowledged for %v; its leases were released: acknowledge each pushed lease with a LeaseAck as it arrives",
					s.c.cfg.StreamAckTimeout))
			default:
				return toStatus(s.ctx, s.c.log, s.ctx.Err())
			}
		}
	}
}

// errWorkerTaken ends a stream whose worker id another principal bound
// before the stream's first lease: its leases, never sent, are released.
var errWorkerTaken = errors.New("the worker id belongs to another principal")

// bindOnce binds the stream's worker id before the first lease in out is
// sent (the Hello only checked it); sendLoop alone calls it.
func (s *session) bindOnce(out []*leaseholdv1.ConnectResponse) error {
	if s.bound || !slices.ContainsFunc(out, func(m *leaseholdv1.ConnectResponse) bool {
		return m.GetLease() != nil || m.GetLeaseBatch() != nil
	}) {
		return nil
	}
	if err := s.c.checkWorker(s.ctx, s.hello.workerID); err != nil {
		s.cancel(errWorkerTaken)
		return err
	}
	s.bound = true
	return nil
}

func (s *session) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
}

// recvLoop reads worker messages until the stream ends. It returns nil
// when the worker closed its side, a status for a protocol violation.
//
// Its goroutine spends an idle stream's life parked in Recv, and a
// goroutine's stack only shrinks at a GC when less than a quarter of it is
// in use, so the loop itself is kept small: the work for a message is in
// handle, whose frame is gone while the loop waits. That keeps the
// receiver of an idle stream in a 4 KiB stack rather than 8 KiB.
func (s *session) recvLoop(stream leaseholdv1.WorkerService_ConnectServer) error {
	for {
		m, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return recvStatus(err)
		}
		if stop, err := s.handle(m); stop || err != nil {
			return err
		}
	}
}

// handle acts on one worker message. stop (with a nil error) means the
// stream is ending.
//
//go:noinline
func (s *session) handle(m *leaseholdv1.ConnectRequest) (stop bool, err error) {
	c := s.c
	if r, ok := s.decodeReport(m); ok {
		if r.err != nil {
			// An invalid report is answered, not fatal: the stream's
			// other leases are fine.
			out := &leaseholdv1.ReportResult{Token: withoutSecret(r.tok), Kind: r.kind}
			setReportError(out, toStatus(s.ctx, c.log, r.err))
			s.enqueue(&leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_ReportResult{ReportResult: out}})
			return false, nil
		}
		select {
		case s.reportSlots <- struct{}{}:
		case <-s.ctx.Done():
			return true, nil
		}
		// The holder is done with the job: it no longer takes one of
		// the stream's capacity while its outcome commits. (If the
		// commit fails the worker reports again, unary; the worker
		// itself never runs more handlers than its capacity.)
		s.forget(r.rep.Token.JobID, r.rep.Token.Generation)
		s.reports.Add(1)
		go s.report(r)
		return false, nil
	}
	switch msg := m.GetMsg().(type) {
	case *leaseholdv1.ConnectRequest_Credit:
		n, err := c.v.CreditGrant(msg.Credit)
		if err != nil {
			return true, toStatus(s.ctx, c.log, err)
		}
		c.core.dispatcher.AddCredits(s.waiter, n)
	case *leaseholdv1.ConnectRequest_Heartbeat:
		if err := s.heartbeat(msg.Heartbeat); err != nil {
			return true, err
		}
	case *leaseholdv1.ConnectRequest_Ack:
		ids, err := c.v.LeaseAck(msg.Ack)
		if err != nil {
			return true, toStatus(s.ctx, c.log, err)
		}
		s.ack(ids)
	case *leaseholdv1.ConnectRequest_ReportBatch:
		return s.reportBatch(msg.ReportBatch)
	case *leaseholdv1.ConnectRequest_Hello:
		return true, invalidArgument("hello", "hello may be sent only once, as the first message")
	default:
		return true, invalidArgument("msg", "unknown message")
	}
	return false, nil
}

// heartbeat renews every listed lease in one store call and answers with
// per-lease results, followed by a LeaseLostNotice per lost lease.
func (s *session) heartbeat(hb *leaseholdv1.Heartbeat) error {
	c := s.c
	toks, lease, err := c.v.Heartbeat(hb, s.hello.workerID, s.lease)
	if err != nil {
		return toStatus(s.ctx, c.log, err)
	}
	// Naming a lease acknowledges it: the worker has it.
	s.ackTokens(toks)
	// A lease whose end (a report on this stream or a unary one, an
	// expiry) is applied while the renewal runs may have been renewed
	// just before it ended: its end then forgot it before the renewal's
	// answer is applied below, and counting it again would keep it held
	// here for good, shrinking the stream's room for leases (Held) one
	// report at a time. Every end is applied after its commit, so an end
	// that is not applied by the time the renewal returns comes later and
	// forgets the lease itself.
	s.mu.Lock()
	s.renewing = true
	s.mu.Unlock()
	var results []store.RenewResult
	if len(toks) > 0 {
		results, err = c.store.Renew(s.ctx, store.RenewParams{Tenant: s.tenant, Tokens: toks, LeaseDuration: lease, Now: c.now()})
	}
	s.mu.Lock()
	ended := s.renewalEnds
	s.renewing, s.renewalEnds = false, nil
	if err != nil {
		s.mu.Unlock()
		return toStatus(s.ctx, c.log, err)
	}
	defer s.mu.Unlock()
	s.enqueueLocked(&leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_HeartbeatResult{
		HeartbeatResult: &leaseholdv1.HeartbeatResult{Results: toRenewResults(results)},
	}})
	if s.closed {
		return nil // the stream ended meanwhile; nothing to track
	}
	for _, r := range results {
		if r.Status == store.RenewLost || r.Status == store.RenewReported {
			if t, ok := s.leases[r.Token.JobID]; ok && t.Generation == r.Token.Generation {
				delete(s.leases, r.Token.JobID)
			}
			s.ackedLocked(r.Token.JobID, r.Token.Generation)
			// A lease the worker's own report ended (the heartbeat was
			// sent before the report's answer came back) is not lost: the
			// report's answer tells the worker how it ended.
			if r.Status == store.RenewLost {
				s.enqueueLocked(&leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_LeaseLost{
					LeaseLost: &leaseholdv1.LeaseLostNotice{Token: toToken(r.Token)},
				}})
			}
			continue
		}
		// A lease renewed through this stream is held here, even when it
		// was claimed elsewhere (unary Claim, an earlier stream): cancel
		// requests should reach it.
		if g, ok := ended[r.Token.JobID]; !ok || g != r.Token.Generation {
			s.leases[r.Token.JobID] = r.Token
		}
	}
	return nil
}

// register adds s, replacing (and ending) an earlier stream of the same
// worker id, whose leases it takes over.
func (c *Coordinator) register(s *session) error { return c.core.streams.add(s) }

// unregister removes s and forgets the leases it held here (the leases
// themselves live on in the store until they are finished or expire).
func (c *Coordinator) unregister(s *session) {
	held := c.core.streams.remove(s)
	c.log.Debug("worker stream ended", slog.String("worker_id", s.hello.workerID), slog.Int("leases_held", held))
}

// workers lists the streams of tenant on this coordinator. Each session's
// mu is released before the dispatcher's is taken (the dispatcher takes a
// session's mu under its own).
func (c *Coordinator) workers(tenant string) []*leaseholdv1.WorkerInfo {
	sessions := c.core.streams.list(tenant, false)
	out := make([]*leaseholdv1.WorkerInfo, 0, len(sessions))
	for _, s := range sessions {
		s.mu.Lock()
		n, unacked := len(s.leases), len(s.unacked)
		s.mu.Unlock()
		out = append(out, &leaseholdv1.WorkerInfo{
			WorkerId: s.hello.workerID, Queues: s.hello.queues, Capacity: s.hello.capacity,
			ActiveLeases: int32(n), Credits: int32(c.core.dispatcher.Credits(s.waiter)),
			Labels: s.hello.labels, Sdk: s.hello.sdk,
			ConnectedAt: timestamppb.New(s.connectedAt), CoordinatorId: c.cfg.ID,
			UnacknowledgedLeases: int32(unacked), AcknowledgesLeases: s.hello.acks,
		})
	}
	return out
}

// recvStatus turns a Recv error into the handler's return value: the
// client going away is not a server error.
func recvStatus(err error) error {
	if errors.Is(err, io.EOF) {
		return nil
	}
	return connectionGone(err)
}

// connectionGone turns the error of a Recv or Send on a stream whose
// connection went away ("transport is closing": it aged out after
// MaxConnectionAge, or the worker vanished) into CANCELED. Nobody reads
// this status; it is what the access log records, and an ending that is
// not the coordinator's fault logs at Debug, as a cancelled call does,
// rather than at Warn once per worker per connection age.
func connectionGone(err error) error {
	if st, ok := status.FromError(err); ok && st.Code() == codes.Unavailable {
		return status.Error(codes.Canceled, "connection closed: "+st.Message())
	}
	return err
}
