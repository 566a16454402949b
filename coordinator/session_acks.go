package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Acknowledgement accounting of a Connect stream (docs/streams.md).
//
// grpc-go's Send returns once a message is queued in the transport, and a
// client may open its HTTP/2 windows as wide as it likes, so neither the
// session's outbound queue (emptied before Send returns) nor flow control
// tells whether the worker is taking what it is pushed. What the worker
// acknowledges does: a LeaseAck, or a heartbeat or report naming the
// lease (the implicit acknowledgement of workers that predate LeaseAck),
// or the lease's end. The dispatcher pushes a stream no more than
// Config.StreamUnackedLeases unacknowledged leases and nothing while their
// encoded size is at Config.StreamUnackedBytes; a worker that declared
// lease_acks and leaves one unacknowledged past Config.StreamAckTimeout
// has its stream ended and those leases released.

// errNotAcknowledging is the cancel cause of a lease_acks stream that left
// a pushed lease unacknowledged past the ack timeout.
var errNotAcknowledging = errors.New("the worker did not acknowledge its pushed leases")

// releaseUnackedTimeout bounds releasing the unacknowledged leases of an
// ended stream; a lease not released in time simply expires.
const releaseUnackedTimeout = 10 * time.Second

// unackedLease is a lease pushed to the stream and not yet acknowledged.
type unackedLease struct {
	generation int64
	bytes      int
	pushedAt   time.Time
}

// pushedLocked records a lease just queued for the worker; s.mu held.
func (s *session) pushedLocked(tok store.LeaseToken, bytes int, now time.Time) {
	if old, ok := s.unacked[tok.JobID]; ok {
		s.unackedBytes -= old.bytes
	}
	s.unacked[tok.JobID] = unackedLease{generation: tok.Generation, bytes: bytes, pushedAt: now}
	s.unackedBytes += bytes
	s.largestLease = max(s.largestLease, bytes)
	if s.hello.acks && s.ackTimer == nil {
		s.ackTimer = time.AfterFunc(s.c.cfg.StreamAckTimeout, s.checkAcks)
	}
}

// ackedLocked stops counting the lease of jobID as unacknowledged (only
// generation gen, unless gen is negative: a LeaseAck names no generation).
// It reports whether the stream was at its bound and now has room: the
// caller then wakes the dispatcher (outside s.mu). s.mu held.
func (s *session) ackedLocked(jobID string, gen int64) (wake bool) {
	u, ok := s.unacked[jobID]
	if !ok || (gen >= 0 && u.generation != gen) {
		return false
	}
	delete(s.unacked, jobID)
	s.unackedBytes -= u.bytes
	if s.atAckBound && s.roomLocked() > 0 {
		s.atAckBound = false
		return true
	}
	return false
}

// ack handles a LeaseAck.
func (s *session) ack(jobIDs []string) {
	wake := false
	s.mu.Lock()
	for _, id := range jobIDs {
		wake = s.ackedLocked(id, -1) || wake
	}
	s.mu.Unlock()
	if wake {
		s.c.core.dispatcher.Ready(s.waiter)
	}
}

// ackTokens counts the leases a heartbeat names as acknowledged: the
// worker has them.
func (s *session) ackTokens(toks []store.LeaseToken) {
	wake := false
	s.mu.Lock()
	for _, t := range toks {
		wake = s.ackedLocked(t.JobID, t.Generation) || wake
	}
	s.mu.Unlock()
	if wake {
		s.c.core.dispatcher.Ready(s.waiter)
	}
}

// roomLocked is how many more leases the stream may be pushed now: the
// count bound less its unacknowledged leases, and as many as fit in the
// bytes bound if each is as large as the largest lease pushed to the
// stream so far (before the first, the payload limit): one claim cannot
// overshoot the bytes bound by much, since a lease's size is known only
// once it is claimed. At least one while the bytes bound is not reached.
// s.mu held.
func (s *session) roomLocked() int {
	free := s.c.cfg.StreamUnackedBytes - s.unackedBytes
	if free <= 0 {
		return 0
	}
	est := s.largestLease
	if est == 0 {
		est = s.c.cfg.PayloadMaxBytes
	}
	return max(min(s.c.cfg.StreamUnackedLeases-len(s.unacked), max(free/est, 1)), 0)
}

// room is the dispatcher's Room. At zero the stream is marked at its
// bound, so that the acknowledgement that makes room wakes the dispatcher.
func (s *session) room() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.roomLocked()
	if n == 0 {
		s.atAckBound = true
	}
	return n
}

// checkAcks runs on the ack timer: it ends the stream when its oldest
// unacknowledged lease is older than the ack timeout, and otherwise sets
// the timer for when it would be.
func (s *session) checkAcks() {
	timeout := s.c.cfg.StreamAckTimeout
	s.mu.Lock()
	var oldest time.Time
	for _, u := range s.unacked {
		if oldest.IsZero() || u.pushedAt.Before(oldest) {
			oldest = u.pushedAt
		}
	}
	now := time.Now()
	switch {
	case s.closed:
		s.mu.Unlock()
	case oldest.IsZero():
		s.ackTimer = nil // the next push sets it again
		s.mu.Unlock()
	case now.Sub(oldest) >= timeout:
		s.closed = true
		n := len(s.unacked)
		s.mu.Unlock()
		s.c.log.Warn("ending a worker stream that does not acknowledge its leases",
			slog.String("worker_id", s.hello.workerID), slog.Int("unacknowledged", n), slog.Duration("ack_timeout", timeout))
		s.cancel(errNotAcknowledging)
	default:
		s.ackTimer.Reset(oldest.Add(timeout).Sub(now))
		s.mu.Unlock()
	}
}

// stopAckTimer stops the ack timer when the stream ends.
func (s *session) stopAckTimer() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ackTimer != nil {
		s.ackTimer.Stop()
	}
}

// releaseUnacked gives back the leases the stream was pushed and never
// acknowledged, once it was ended for not reading or not acknowledging:
// its worker never saw them (or cannot be trusted to work on them), and
// another worker should not wait a whole lease for them. A worker that
// did see one is fenced like any other: its reports get LEASE_LOST.
func (s *session) releaseUnacked(ctx context.Context) {
	c := s.c
	s.mu.Lock()
	reports := make([]store.Report, 0, len(s.unacked))
	for id, u := range s.unacked {
		if tok, ok := s.leases[id]; ok && tok.Generation == u.generation {
			reports = append(reports, store.Report{Kind: store.ReportRelease, Tenant: s.tenant, Token: tok})
		}
	}
	s.mu.Unlock()
	if len(reports) == 0 {
		return
	}
	// Detached from the stream's context, which has ended: releasing now
	// spares the jobs a whole lease of waiting. Bounded, so the handler
	// does not hang on a store that is down; the leases then expire.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseUnackedTimeout)
	defer cancel()
	released := 0
	for len(reports) > 0 {
		batch := reports[:min(len(reports), store.BatchMaxItems)]
		reports = reports[len(batch):]
		now := c.now()
		for i := range batch {
			batch[i].Now = now
		}
		res, err := c.store.ApplyReports(rctx, batch)
		if err != nil {
			c.log.WarnContext(ctx, "release of a stream's unacknowledged leases failed; they will expire",
				slog.String("worker_id", s.hello.workerID), slog.Int("leases", len(batch)), slog.String("error", err.Error()))
			return
		}
		for _, r := range res {
			if r.Err == nil && r.Job != nil {
				released++
				c.finished(rctx, s.tenant, r.Job)
			}
		}
	}
	c.log.InfoContext(ctx, "released the unacknowledged leases of an ended worker stream",
		slog.String("worker_id", s.hello.workerID), slog.Int("released", released))
}
