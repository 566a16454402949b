package worker

import (
	"context"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// GetVersion capabilities the stream uses.
const (
	// capabilityStreamReports: the coordinator takes complete, retry,
	// cancel and release on the Connect stream.
	capabilityStreamReports = "stream_reports"
	// capabilityLeaseBatches: the coordinator pushes LeaseBatch and
	// ReportResultBatch to a worker that declares featureLeaseBatches.
	capabilityLeaseBatches = "lease_batches"
	// capabilityReportBatches: the coordinator takes ReportBatch.
	capabilityReportBatches = "report_batches"
)

// featureLeaseBatches is the Hello feature of a worker that takes
// LeaseBatch and ReportResultBatch messages.
const featureLeaseBatches = "lease_batches"

// Bounds of one ReportBatch: reportBatchBytesMax stays within what any
// coordinator accepts in one message (its payload limit plus 1 MiB); a
// report that does not fit goes in a message of its own.
const (
	reportBatchMax      = 256
	reportBatchBytesMax = 512 << 10
)

// errorDomain is the ErrorInfo domain of the coordinator's errors.
const errorDomain = "leasehold.dev"

// reportKey correlates a report sent on the stream with its answer: one
// lease makes at most one report of each kind.
type reportKey struct {
	kind       leaseholdv1.ReportKind
	jobID      string
	generation int64
}

// streamReports holds the reports of one session waiting for answers.
type streamReports struct {
	mu      sync.Mutex // guards pending
	pending map[reportKey]chan *leaseholdv1.ReportResult
}

// capabilities asks the coordinator which of the stream's optional
// features it has, before the stream opens. Any failure means none: the
// plain stream and the unary calls always work.
func (w *Worker) capabilities(ctx context.Context) map[string]bool {
	v, err := w.api.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	if err != nil {
		return nil
	}
	caps := make(map[string]bool, len(v.GetCapabilities()))
	for _, c := range v.GetCapabilities() {
		caps[c] = true
	}
	return caps
}

// isReport reports whether m is a report (complete, retry, cancel or
// release).
func isReport(m *leaseholdv1.ConnectRequest) bool {
	switch m.GetMsg().(type) {
	case *leaseholdv1.ConnectRequest_Complete, *leaseholdv1.ConnectRequest_Retry,
		*leaseholdv1.ConnectRequest_Cancel, *leaseholdv1.ConnectRequest_Release:
		return true
	default:
		return false
	}
}

// gatherReports packs the report first and the reports queued behind it
// at this moment into one ReportBatch; it never waits for more. msg is
// what to send: first alone when nothing was queued behind it. next is a
// message taken from the queue that does not go in the batch (not a
// report, or a report that does not fit), to be sent after msg.
func (s *session) gatherReports(first *leaseholdv1.ConnectRequest) (msg, next *leaseholdv1.ConnectRequest) {
	var items []*leaseholdv1.BatchedReport
	size := proto.Size(first)
gather:
	for len(items) < reportBatchMax {
		var m *leaseholdv1.ConnectRequest
		select {
		case m = <-s.sendq:
		default:
			break gather
		}
		n := proto.Size(m)
		if !isReport(m) || size+n > reportBatchBytesMax {
			next = m
			break
		}
		if items == nil {
			items = append(make([]*leaseholdv1.BatchedReport, 0, 8), batchedReport(first))
		}
		items = append(items, batchedReport(m))
		size += n
	}
	if items == nil {
		return first, next
	}
	return &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_ReportBatch{
		ReportBatch: &leaseholdv1.ReportBatch{Reports: items},
	}}, next
}

// batchedReport is the report m as an item of a ReportBatch.
func batchedReport(m *leaseholdv1.ConnectRequest) *leaseholdv1.BatchedReport {
	b := &leaseholdv1.BatchedReport{TraceContext: m.GetTraceContext()}
	switch x := m.GetMsg().(type) {
	case *leaseholdv1.ConnectRequest_Complete:
		b.Report = &leaseholdv1.BatchedReport_Complete{Complete: x.Complete}
	case *leaseholdv1.ConnectRequest_Retry:
		b.Report = &leaseholdv1.BatchedReport_Retry{Retry: x.Retry}
	case *leaseholdv1.ConnectRequest_Cancel:
		b.Report = &leaseholdv1.BatchedReport_Cancel{Cancel: x.Cancel}
	case *leaseholdv1.ConnectRequest_Release:
		b.Report = &leaseholdv1.BatchedReport_Release{Release: x.Release}
	}
	return b
}

// sendReport sends a report on the stream and waits for its answer, the
// lease's status as the unary call would return it. sent is false when the
// stream cannot carry it (the coordinator lacks the capability, or the
// stream is closing or ended before answering); the caller then makes the
// unary call, which is safe even if the report was applied: a repeated
// report gets the same answer.
func (s *session) sendReport(ctx context.Context, kind leaseholdv1.ReportKind, tok *leaseholdv1.LeaseToken, msg *leaseholdv1.ConnectRequest) (sent bool, err error) {
	if s.reports == nil {
		return false, nil
	}
	key := reportKey{kind: kind, jobID: tok.GetJobId(), generation: tok.GetLeaseGeneration()}
	answer := make(chan *leaseholdv1.ReportResult, 1)
	s.reports.mu.Lock()
	s.reports.pending[key] = answer
	s.reports.mu.Unlock()
	defer func() {
		s.reports.mu.Lock()
		delete(s.reports.pending, key)
		s.reports.mu.Unlock()
	}()
	if !s.enqueue(msg) {
		return false, nil
	}
	select {
	case res := <-answer:
		if codes.Code(res.GetCode()) == codes.OK {
			return true, nil
		}
		st := status.New(codes.Code(res.GetCode()), res.GetMessage())
		if res.GetReason() != "" {
			if d, derr := st.WithDetails(&errdetails.ErrorInfo{Reason: res.GetReason(), Domain: errorDomain}); derr == nil {
				st = d
			}
		}
		if isTransient(st.Err()) {
			return false, nil // the unary call retries it
		}
		return true, st.Err()
	case <-s.ctx.Done():
		return false, nil
	case <-ctx.Done():
		return true, context.Cause(ctx)
	}
}

// answerReport hands a ReportResult to the report waiting for it.
func (s *session) answerReport(res *leaseholdv1.ReportResult) {
	if s.reports == nil {
		return
	}
	key := reportKey{kind: res.GetKind(), jobID: res.GetToken().GetJobId(), generation: res.GetToken().GetLeaseGeneration()}
	s.reports.mu.Lock()
	answer := s.reports.pending[key]
	s.reports.mu.Unlock()
	if answer != nil {
		select {
		case answer <- res:
		default:
		}
	}
}
