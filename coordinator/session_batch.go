package coordinator

import (
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Stream batches (docs/streams.md). A worker that declares the
// lease_batches feature is sent the leases, and the report answers, that
// are queued for it at the same moment in one LeaseBatch (or
// ReportResultBatch) message rather than one message each: nothing waits
// for a batch to fill, the sender simply finds several queued. A stream
// with the report_batches capability takes several reports in one
// ReportBatch, each validated, applied and answered exactly as if sent
// alone.

// Bounds of one batched message. batchBytesMax keeps a batch well under
// the 4 MiB that gRPC clients accept by default; a lease or answer larger
// than what is left goes in the next message (alone if need be).
const (
	leaseBatchMax        = 64
	reportResultBatchMax = 256
	batchBytesMax        = 1 << 20
)

// coalesceLocked adds m, of encoded size size, to the last queued message
// when the stream takes batches, both are leases (or both report
// answers), and the batch stays within its bounds: a single lease (or
// answer) turns into a batch of two. It reports whether m was added. The
// last queued message is the session's until the sender takes it. s.mu
// held.
func (s *session) coalesceLocked(m *leaseholdv1.ConnectResponse, size int) bool {
	if !s.batches || len(s.out) == 0 || s.lastBytes+size > batchBytesMax {
		return false
	}
	last := s.out[len(s.out)-1]
	switch x := m.GetMsg().(type) {
	case *leaseholdv1.ConnectResponse_Lease:
		switch l := last.GetMsg().(type) {
		case *leaseholdv1.ConnectResponse_Lease:
			last.Msg = &leaseholdv1.ConnectResponse_LeaseBatch{LeaseBatch: &leaseholdv1.LeaseBatch{
				Leases: append(make([]*leaseholdv1.LeasedJob, 0, 8), l.Lease, x.Lease),
			}}
		case *leaseholdv1.ConnectResponse_LeaseBatch:
			if len(l.LeaseBatch.GetLeases()) >= leaseBatchMax {
				return false
			}
			l.LeaseBatch.Leases = append(l.LeaseBatch.Leases, x.Lease)
		default:
			return false
		}
	case *leaseholdv1.ConnectResponse_ReportResult:
		switch l := last.GetMsg().(type) {
		case *leaseholdv1.ConnectResponse_ReportResult:
			last.Msg = &leaseholdv1.ConnectResponse_ReportResults{ReportResults: &leaseholdv1.ReportResultBatch{
				Results: append(make([]*leaseholdv1.ReportResult, 0, 8), l.ReportResult, x.ReportResult),
			}}
		case *leaseholdv1.ConnectResponse_ReportResults:
			if len(l.ReportResults.GetResults()) >= reportResultBatchMax {
				return false
			}
			l.ReportResults.Results = append(l.ReportResults.Results, x.ReportResult)
		default:
			return false
		}
	default:
		return false
	}
	s.lastBytes += size
	return true
}

// reportBatch takes a ReportBatch. Every item is decoded and validated
// first: an item that holds no report breaks the protocol (the stream
// ends, as for an unknown message, before any item is applied); an
// invalid report is answered at once. Then, as for a report sent alone,
// each valid one takes a slot and stops counting against the stream's
// capacity; those with a sampled trace context commit alone under their
// own span (report), the others together in one ApplyReports call.
func (s *session) reportBatch(b *leaseholdv1.ReportBatch) (stop bool, err error) {
	c := s.c
	if c.cfg.StreamBatchesOff {
		return true, invalidArgument("report_batch", "this coordinator takes no report batches: send each report alone")
	}
	items := b.GetReports()
	if len(items) == 0 || len(items) > store.BatchMaxItems {
		return true, invalidArgument("report_batch.reports", fmt.Sprintf("must have 1-%d items", store.BatchMaxItems))
	}
	rs := make([]streamReport, len(items))
	for i, it := range items {
		r, ok := s.decodeReport(it)
		if !ok {
			return true, invalidArgument(fmt.Sprintf("report_batch.reports[%d]", i), "must hold a complete, retry, cancel or release")
		}
		rs[i] = r
	}
	var invalid []*leaseholdv1.ConnectResponse
	together := make([]streamReport, 0, len(rs))
	for _, r := range rs {
		if r.err != nil {
			out := &leaseholdv1.ReportResult{Token: withoutSecret(r.tok), Kind: r.kind}
			setReportError(out, toStatus(s.ctx, c.log, r.err))
			invalid = append(invalid, &leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_ReportResult{ReportResult: out}})
			continue
		}
		select {
		case s.reportSlots <- struct{}{}:
		case <-s.ctx.Done():
			for range together {
				<-s.reportSlots
			}
			return true, nil
		}
		if r.parent.IsValid() {
			s.forget(r.rep.Token.JobID, r.rep.Token.Generation)
			s.reports.Add(1)
			go s.report(r)
			continue
		}
		together = append(together, r)
	}
	if len(invalid) > 0 {
		s.mu.Lock()
		for _, m := range invalid {
			s.enqueueLocked(m)
		}
		s.mu.Unlock()
	}
	s.applyTogether(together)
	return false, nil
}

// applyTogether stops counting rs against the stream's capacity and
// commits them in one ApplyReports call on a goroutine of its own; each
// holds a report slot, given back when it is answered.
func (s *session) applyTogether(rs []streamReport) {
	if len(rs) == 0 {
		return
	}
	room := false
	s.mu.Lock()
	for _, r := range rs {
		room = s.forgetLocked(r.rep.Token.JobID, r.rep.Token.Generation) || room
	}
	s.mu.Unlock()
	if room {
		s.c.core.dispatcher.Ready(s.waiter)
	}
	s.reports.Add(1)
	go s.reportMany(rs)
}

// reportMany commits the reports of one ReportBatch together, through
// the entry every report takes (Coordinator.reports), and queues their
// answers at once (so they leave in one ReportResultBatch when the stream
// takes batches). Each report gets its own answer, exactly as if sent
// alone.
func (s *session) reportMany(rs []streamReport) {
	defer func() {
		for range rs {
			<-s.reportSlots
		}
		s.reports.Done()
	}()
	reps := make([]store.Report, len(rs))
	for i := range rs {
		reps[i] = rs[i].rep
	}
	jobs, errs := s.c.reports(s.untraced, reps)
	answers := make([]*leaseholdv1.ConnectResponse, 0, len(rs))
	for i, r := range rs {
		if m, ok := s.answer(r, jobs[i], errs[i]); ok {
			answers = append(answers, m)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, m := range answers {
		s.enqueueAnswerLocked(m)
	}
}
