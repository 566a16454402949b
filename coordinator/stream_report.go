package coordinator

import (
	"context"
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// streamReportsMax bounds the reports of one stream being committed at
// once. A worker never has more outstanding reports than leases (at most
// CreditsMax); past the bound the stream's receiver waits, which stops
// reading the stream and so pushes back through HTTP/2 flow control.
const streamReportsMax = CreditsMax

// streamReport is a report sent on the Connect stream, decoded.
type streamReport struct {
	kind leaseholdv1.ReportKind
	rep  store.Report
	tok  *leaseholdv1.LeaseToken // as sent, to correlate the answer
	err  error                   // why the report is invalid
}

// decodeReport decodes m when it is a report; ok is false for any other
// message.
func (s *session) decodeReport(m *leaseholdv1.ConnectRequest) (r streamReport, ok bool) {
	v := s.c.v
	var (
		kind leaseholdv1.ReportKind
		rep  store.Report
		tok  *leaseholdv1.LeaseToken
		err  error
	)
	switch msg := m.GetMsg().(type) {
	case *leaseholdv1.ConnectRequest_Complete:
		kind, tok = leaseholdv1.ReportKind_REPORT_KIND_COMPLETE, msg.Complete.GetToken()
		var p store.CompleteParams
		if p, err = v.Complete(msg.Complete); err == nil {
			rep = store.Report{Kind: store.ReportComplete, Token: p.Token, Result: p.Result}
		}
	case *leaseholdv1.ConnectRequest_Retry:
		kind, tok = leaseholdv1.ReportKind_REPORT_KIND_RETRY, msg.Retry.GetToken()
		var p store.RetryParams
		if p, err = v.Retry(msg.Retry); err == nil {
			rep = store.Report{Kind: store.ReportRetry, Token: p.Token, Error: p.Error, RetryAfter: p.RetryAfter}
		}
	case *leaseholdv1.ConnectRequest_Cancel:
		kind, tok = leaseholdv1.ReportKind_REPORT_KIND_CANCEL, msg.Cancel.GetToken()
		var p store.CancelByHolderParams
		if p, err = v.Cancel(msg.Cancel); err == nil {
			rep = store.Report{Kind: store.ReportCancel, Token: p.Token, Reason: p.Reason}
		}
	case *leaseholdv1.ConnectRequest_Release:
		kind, tok = leaseholdv1.ReportKind_REPORT_KIND_RELEASE, msg.Release.GetToken()
		var p store.ReleaseParams
		if p, err = v.Release(msg.Release); err == nil {
			rep = store.Report{Kind: store.ReportRelease, Token: p.Token}
		}
	default:
		return streamReport{}, false
	}
	if err == nil && rep.Token.WorkerID != s.hello.workerID {
		err = store.Invalid("token.worker_id", "a stream reports only for its own worker_id")
	}
	rep.Tenant = s.tenant
	return streamReport{kind: kind, rep: rep, tok: tok, err: err}, true
}

// report commits one stream report and queues its answer. It runs on its
// own goroutine, so that one stream's reports join the same batches as
// everyone else's instead of waiting for each other's commits.
func (s *session) report(r streamReport) {
	defer func() {
		<-s.reportSlots
		s.reports.Done()
	}()
	c := s.c
	r.rep.Now = c.now()
	res, err := c.store.ApplyReports(s.ctx, []store.Report{r.rep})
	if err == nil {
		err = res[0].Err
	}
	out := &leaseholdv1.ReportResult{Token: withoutSecret(r.tok), Kind: r.kind}
	if err != nil {
		if errors.Is(err, context.Canceled) && s.ctx.Err() != nil {
			return // the stream ended: nobody to answer
		}
		setReportError(out, toStatus(s.ctx, c.log, err))
	} else {
		job := res[0].Job
		out.State = jobStates[job.State]
		c.finished(s.ctx, s.tenant, job)
	}
	s.enqueue(&leaseholdv1.ConnectResponse{Msg: &leaseholdv1.ConnectResponse_ReportResult{ReportResult: out}})
}

// setReportError copies a status (code, message, ErrorInfo reason) into a
// report's answer.
func setReportError(out *leaseholdv1.ReportResult, err error) {
	st := status.Convert(err)
	out.Code, out.Message = int32(st.Code()), st.Message()
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			out.Reason = info.GetReason()
		}
	}
	if out.GetCode() == int32(codes.OK) {
		out.Code = int32(codes.Internal)
	}
}
