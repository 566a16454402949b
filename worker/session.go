package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/backoff"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// errDrained ends a session whose coordinator asked it to drain.
var errDrained = errors.New("coordinator asked to drain the stream")

// sendQueueLen buffers messages for the stream's single sender.
const sendQueueLen = 64

// session is one Connect stream. Exactly one goroutine (sendLoop) sends
// on it; the session's own goroutine receives.
type session struct {
	w      *Worker
	stream leaseholdv1.WorkerService_ConnectClient
	ctx    context.Context
	// sendq carries heartbeats and acks to sendLoop.
	sendq chan *leaseholdv1.ConnectRequest
	// credit (buffered, 1) tells sendLoop that free capacity may have
	// grown; sendLoop computes and grants it.
	credit chan struct{}
	// acks (buffered, 1) tells sendLoop that pushed leases wait to be
	// acknowledged: their job ids are in pendingAcks (guarded by ackMu).
	acks        chan struct{}
	ackMu       sync.Mutex
	pendingAcks []string
	// closing, closed once by closeSend, tells sendLoop to half-close the
	// stream: the coordinator then stops pushing, flushes what it queued
	// and ends the stream, so every lease pushed to us is received (and
	// released) instead of lost in transit.
	closing   chan struct{}
	closeOnce sync.Once
	cancel    context.CancelFunc
	// reports are the reports awaiting answers on this stream; nil when
	// the coordinator does not take reports on the stream.
	reports *streamReports
	// batchReports: the coordinator takes ReportBatch (the
	// report_batches capability); sendLoop packs the reports queued at
	// the same moment into one.
	batchReports bool

	// Guarded by Worker.mu:
	// outstanding is the credits granted on this stream not yet spent by a
	// pushed lease. Running leases plus outstanding never exceed Capacity.
	outstanding int
	// draining: the coordinator sent Drain; no more credits here.
	draining bool
}

// connectLoop keeps a stream up until stop is closed (shutdown) or ctx is
// done, reconnecting with capped exponential backoff and jitter. It
// returns an error only when the coordinator refuses the worker outright.
func (w *Worker) connectLoop(ctx context.Context, stop <-chan struct{}) error {
	b := backoff.Exponential{Min: w.cfg.ReconnectMin, Max: w.cfg.ReconnectMax}
	for {
		welcomed, err := w.runSession(ctx)
		select {
		case <-stop:
			return nil
		default:
		}
		if ctx.Err() != nil {
			return nil
		}
		if isFatalConnectError(err) {
			w.log.ErrorContext(ctx, "coordinator refused the worker", slog.Any("error", err))
			return fmt.Errorf("worker: connect: %w", err)
		}
		if welcomed {
			b.Reset()
		}
		// A refused stream open (RATE_LIMITED) names its own delay.
		delay := max(b.Next(), afterRefusal(retryInfoDelay(err)))
		if errors.Is(err, errDrained) {
			w.log.InfoContext(ctx, "stream drained; reconnecting", slog.Duration("delay", delay))
		} else {
			w.log.WarnContext(ctx, "stream ended; reconnecting", slog.Any("error", err), slog.Duration("delay", delay))
		}
		t := time.NewTimer(delay)
		select {
		case <-stop:
			t.Stop()
			return nil
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// isFatalConnectError reports errors that no reconnect can fix.
func isFatalConnectError(err error) bool {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.Unimplemented:
		return true
	default:
		return false
	}
}

// runSession opens one stream, says Hello, and serves it until it ends.
// welcomed reports whether the coordinator accepted it.
func (w *Worker) runSession(parent context.Context) (welcomed bool, err error) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	caps := w.capabilities(ctx)
	stream, err := w.api.Connect(ctx)
	if err != nil {
		return false, err
	}
	hello := &leaseholdv1.Hello{
		WorkerId:   w.cfg.WorkerID,
		Queues:     w.cfg.Queues,
		Capacity:   int32(w.cfg.Capacity),
		Labels:     w.cfg.Labels,
		SdkName:    sdkName,
		SdkVersion: sdkVersion,
		// Every pushed lease is acknowledged as it arrives (an older
		// coordinator ignores both the feature and the acks).
		Features: []string{featureLeaseAcks},
	}
	if caps[capabilityLeaseBatches] {
		hello.Features = append(hello.Features, featureLeaseBatches)
	}
	if w.cfg.LeaseDuration > 0 {
		hello.LeaseDuration = durationpb.New(w.cfg.LeaseDuration)
	}
	// Nothing else sends yet: sendLoop starts after the Welcome.
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		// Send reports io.EOF when the stream failed; Recv has the status.
		if _, rerr := stream.Recv(); rerr != nil {
			return false, rerr
		}
		return false, err
	}
	first, err := stream.Recv()
	if err != nil {
		return false, err
	}
	welcome := first.GetWelcome()
	if welcome == nil {
		return false, fmt.Errorf("protocol error: first message is %T, want a Welcome", first.GetMsg())
	}

	s := &session{
		w:       w,
		stream:  stream,
		ctx:     ctx,
		cancel:  cancel,
		sendq:   make(chan *leaseholdv1.ConnectRequest, sendQueueLen),
		credit:  make(chan struct{}, 1),
		acks:    make(chan struct{}, 1),
		closing: make(chan struct{}),
	}
	if caps[capabilityStreamReports] {
		s.reports = &streamReports{pending: map[reportKey]chan *leaseholdv1.ReportResult{}}
		s.batchReports = caps[capabilityReportBatches]
	}
	lease := cmp.Or(welcome.GetLeaseDuration().AsDuration(), w.cfg.LeaseDuration, LeaseDurationServerDefault)
	w.mu.Lock()
	w.sess = s
	w.leaseDuration = lease
	stopping := w.stopping
	w.mu.Unlock()
	w.log.InfoContext(ctx, "connected", slog.String("coordinator_id", welcome.GetCoordinatorId()), slog.Duration("lease_duration", lease))
	defer w.detach(s)

	sendDone := make(chan struct{})
	go func() {
		defer close(sendDone)
		s.sendLoop()
	}()
	if stopping {
		// Shutdown began while we were connecting: take nothing here.
		s.closeSend()
	}
	s.wakeCredits()
	err = s.recvLoop()
	cancel()
	<-sendDone
	return true, err
}

// detach stops using s for heartbeats and credits.
func (w *Worker) detach(s *session) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sess == s {
		w.sess = nil
	}
}

// closeSend stops taking work on s: it is detached (heartbeats go through
// Renew from now on) and half-closed. The receive side keeps reading until
// the coordinator ends the stream; leases it still pushes are released.
func (s *session) closeSend() {
	s.w.detach(s)
	s.closeOnce.Do(func() { close(s.closing) })
}

// sendLoop is the stream's only sender. It grants credits for free
// capacity and forwards queued heartbeats and acks.
func (s *session) sendLoop() {
	for {
		var msg *leaseholdv1.ConnectRequest
		select {
		case <-s.ctx.Done():
			return
		case <-s.closing:
			// Queued heartbeats are dropped: the next one goes through Renew.
			_ = s.stream.CloseSend()
			return
		case msg = <-s.sendq:
			if s.batchReports && isReport(msg) {
				var next *leaseholdv1.ConnectRequest
				msg, next = s.gatherReports(msg)
				if next != nil {
					if err := s.stream.Send(msg); err != nil {
						s.cancel()
						return
					}
					msg = next
				}
			}
		case <-s.acks:
			msg = s.takeAcks()
			if msg == nil {
				continue
			}
		case <-s.credit:
			n := s.w.takeCredits(s)
			if n == 0 {
				continue
			}
			msg = &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: int32(n)}}}
		}
		if err := s.stream.Send(msg); err != nil {
			// The receive side sees why; ending the context wakes it.
			s.cancel()
			return
		}
	}
}

// takeCredits reserves the free capacity for a grant on s.
func (w *Worker) takeCredits(s *session) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopping || s.draining || w.sess != s {
		return 0
	}
	if len(w.running)-w.busy >= w.cfg.Capacity {
		return 0 // as many outcomes are still being reported: wait for them
	}
	free := w.cfg.Capacity - w.busy - s.outstanding
	if free <= 0 {
		return 0
	}
	s.outstanding += free
	return free
}

// wakeCredits asks sendLoop to grant whatever capacity is free.
func (s *session) wakeCredits() {
	select {
	case s.credit <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// enqueue hands msg to sendLoop; false when the stream is gone.
func (s *session) enqueue(msg *leaseholdv1.ConnectRequest) bool {
	select {
	case <-s.closing:
		return false
	default:
	}
	select {
	case s.sendq <- msg:
		return true
	case <-s.closing:
		return false
	case <-s.ctx.Done():
		return false
	}
}

// recvLoop dispatches the coordinator's messages until the stream ends.
func (s *session) recvLoop() error {
	w := s.w
	var cutoff *time.Timer
	defer func() {
		if cutoff != nil {
			cutoff.Stop()
		}
	}()
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			w.mu.Lock()
			drained := s.draining
			w.mu.Unlock()
			if drained && errors.Is(err, io.EOF) {
				return errDrained
			}
			if errors.Is(err, io.EOF) {
				err = errors.New("coordinator ended the stream")
			}
			return err
		}
		switch m := msg.GetMsg().(type) {
		case *leaseholdv1.ConnectResponse_Lease:
			// Acknowledged at once, before it runs: the coordinator bounds
			// what it pushes by what is acknowledged, and ends a stream
			// that leaves a lease unacknowledged too long.
			s.queueAcks(m.Lease)
			w.onLease(s.ctx, s, m.Lease)
		case *leaseholdv1.ConnectResponse_LeaseBatch:
			s.queueAcks(m.LeaseBatch.GetLeases()...)
			for _, l := range m.LeaseBatch.GetLeases() {
				w.onLease(s.ctx, s, l)
			}
		case *leaseholdv1.ConnectResponse_ReportResult:
			s.answerReport(m.ReportResult)
		case *leaseholdv1.ConnectResponse_ReportResults:
			for _, r := range m.ReportResults.GetResults() {
				s.answerReport(r)
			}
		case *leaseholdv1.ConnectResponse_HeartbeatResult:
			w.applyRenewals(m.HeartbeatResult.GetResults())
		case *leaseholdv1.ConnectResponse_CancelRequested:
			if e := w.lookup(m.CancelRequested.GetToken()); e != nil {
				w.log.Info("cancel requested", slog.String("job_id", e.key.jobID), slog.String("reason", m.CancelRequested.GetReason()))
				e.markCancelRequested(m.CancelRequested.GetReason())
			}
		case *leaseholdv1.ConnectResponse_LeaseLost:
			if e := w.lookup(m.LeaseLost.GetToken()); e != nil {
				w.log.Info("lease lost", slog.String("job_id", e.key.jobID), slog.Int64("generation", e.key.generation))
				e.markLost()
			}
		case *leaseholdv1.ConnectResponse_Drain:
			w.mu.Lock()
			s.draining = true
			w.mu.Unlock()
			w.log.Info("coordinator is draining the stream", slog.String("reason", m.Drain.GetReason()))
			// Running leases stay ours: they are renewed through Renew until
			// the next stream is up, and reported through unary calls.
			// Half-close and read to the end; a coordinator that never ends
			// the stream is cut off after its announced grace period.
			s.closeSend()
			if cutoff == nil {
				cutoff = time.AfterFunc(m.Drain.GetGracePeriod().AsDuration()+time.Second, s.cancel)
			}
		default:
			w.log.Debug("ignoring unexpected stream message", slog.String("type", fmt.Sprintf("%T", m)))
		}
	}
}

// featureLeaseAcks is the Hello feature of a worker that acknowledges
// every pushed lease as it arrives.
const featureLeaseAcks = "lease_acks"

// queueAcks adds pushed leases to the next LeaseAck and wakes sendLoop.
// Acks of leases received together go in one message.
func (s *session) queueAcks(leases ...*leaseholdv1.LeasedJob) {
	s.ackMu.Lock()
	for _, l := range leases {
		s.pendingAcks = append(s.pendingAcks, l.GetToken().GetJobId())
	}
	s.ackMu.Unlock()
	select {
	case s.acks <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// takeAcks returns a LeaseAck for every lease waiting to be acknowledged,
// nil when none is.
func (s *session) takeAcks() *leaseholdv1.ConnectRequest {
	s.ackMu.Lock()
	ids := s.pendingAcks
	s.pendingAcks = nil
	s.ackMu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	return &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Ack{Ack: &leaseholdv1.LeaseAck{JobIds: ids}}}
}
