package worker

import (
	"context"
	"slices"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// capabilityStreamReports is the GetVersion capability of a coordinator
// that takes complete, retry, cancel and release on the Connect stream.
const capabilityStreamReports = "stream_reports"

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

// supportsStreamReports asks the coordinator whether it takes reports on
// the stream. Any failure means no: the unary calls always work.
func (w *Worker) supportsStreamReports(ctx context.Context) bool {
	v, err := w.api.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	return err == nil && slices.Contains(v.GetCapabilities(), capabilityStreamReports)
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
