package e2e

import (
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func isLease(m *leaseholdv1.ConnectResponse) bool { return m.GetLease() != nil }

func TestCancellingALeasedJobReachesTheHolderOverItsStream(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		st := connect(t, ctx, c, &leaseholdv1.Hello{
			WorkerId: "stream-worker", Queues: []string{"reports"}, Capacity: 4,
			SdkName: "e2e", SdkVersion: "1", LeaseDuration: durationpb.New(time.Minute),
		})
		st.credit(1)

		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("reports", "q3")})
		if err != nil {
			t.Fatal(err)
		}
		lease := st.next(isLease).GetLease()
		if lease.GetToken().GetJobId() != created.GetJob().GetId() || lease.GetToken().GetWorkerId() != "stream-worker" {
			t.Fatalf("pushed lease = %v", lease)
		}

		workers, err := c.admin.ListWorkers(ctx, &leaseholdv1.ListWorkersRequest{})
		if err != nil || len(workers.GetWorkers()) != 1 || workers.GetWorkers()[0].GetActiveLeases() != 1 ||
			workers.GetWorkers()[0].GetSdk() != "e2e/1" {
			t.Fatalf("ListWorkers = %v, %v", workers, err)
		}

		// One credit, one lease: a second job is not pushed.
		second, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("reports", "q4")})
		if err != nil {
			t.Fatal(err)
		}

		cancelled, err := c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: created.GetJob().GetId(), Reason: "no longer needed"})
		if err != nil {
			t.Fatal(err)
		}
		if cancelled.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_LEASED || !cancelled.GetJob().GetCancelRequested() {
			t.Fatalf("cancel of a leased job = %v; want LEASED with cancel_requested", cancelled.GetJob())
		}
		notice := st.next(func(m *leaseholdv1.ConnectResponse) bool {
			if m.GetLease() != nil {
				t.Fatalf("a lease was pushed beyond the granted credits: %v", m.GetLease())
			}
			return m.GetCancelRequested() != nil
		}).GetCancelRequested()
		if notice.GetToken().GetJobId() != created.GetJob().GetId() || notice.GetToken().GetLeaseGeneration() != lease.GetToken().GetLeaseGeneration() ||
			notice.GetReason() != "no longer needed" {
			t.Fatalf("cancel notice = %v", notice)
		}

		// The heartbeat says the same, then the holder acknowledges.
		st.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{Heartbeat: &leaseholdv1.Heartbeat{
			Tokens: []*leaseholdv1.LeaseToken{lease.GetToken()},
		}}})
		hb := st.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetHeartbeatResult() != nil }).GetHeartbeatResult()
		if len(hb.GetResults()) != 1 || hb.GetResults()[0].GetStatus() != leaseholdv1.RenewStatus_RENEW_STATUS_CANCEL_REQUESTED {
			t.Fatalf("heartbeat result = %v; want CANCEL_REQUESTED", hb)
		}
		ack, err := c.workers.Cancel(ctx, &leaseholdv1.CancelRequest{Token: lease.GetToken(), Reason: "stopped"})
		if err != nil || ack.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("holder cancel = %v, %v", ack, err)
		}

		// A heartbeat for the lease the holder's own cancel ended says
		// so (REPORTED), and no lease-lost notice follows: the lease was
		// not lost.
		st.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{Heartbeat: &leaseholdv1.Heartbeat{
			Tokens: []*leaseholdv1.LeaseToken{lease.GetToken()},
		}}})
		hb = st.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetHeartbeatResult() != nil }).GetHeartbeatResult()
		if hb.GetResults()[0].GetStatus() != leaseholdv1.RenewStatus_RENEW_STATUS_REPORTED {
			t.Fatalf("heartbeat after the holder's cancel = %v; want REPORTED", hb)
		}

		// A new credit brings the second job, and nothing comes before it.
		st.credit(1)
		if m := st.next(func(*leaseholdv1.ConnectResponse) bool { return true }); m.GetLeaseLost() != nil {
			t.Fatalf("a lease-lost notice for a lease the holder's own cancel ended: %v", m)
		} else if !isLease(m) {
			t.Fatalf("want the second job's lease, got %v", m)
		} else if got := m.GetLease().GetToken().GetJobId(); got != second.GetJob().GetId() {
			t.Fatalf("second push = %s, want %s", got, second.GetJob().GetId())
		}
	})
}

func TestSecondStreamWithTheSameWorkerIDReplacesTheFirst(t *testing.T) {
	t.Parallel()
	_, c := setup(t, false, nil)
	ctx := ctxT(t)
	hello := &leaseholdv1.Hello{WorkerId: "dup", Queues: []string{"q"}, Capacity: 1}
	first := connect(t, ctx, c, hello)
	second := connect(t, ctx, c, hello)
	wantReason(t, first.end(), codes.Aborted, coordinator.ReasonStreamReplaced)

	second.credit(1)
	created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("q", "x")})
	if err != nil {
		t.Fatal(err)
	}
	if got := second.next(isLease).GetLease().GetToken().GetJobId(); got != created.GetJob().GetId() {
		t.Fatalf("replacement stream got %s, want %s", got, created.GetJob().GetId())
	}
}

func TestShutdownDrainsStreamsAndEndsLongPolls(t *testing.T) {
	t.Parallel()
	s, c := setup(t, false, nil)
	ctx := ctxT(t)
	st := connect(t, ctx, c, &leaseholdv1.Hello{WorkerId: "drainee", Queues: []string{"q"}, Capacity: 1})

	polled := make(chan error, 1)
	go func() {
		resp, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "poller", Queues: []string{"idle"}, Wait: durationpb.New(50 * time.Second)})
		if err == nil && len(resp.GetJobs()) != 0 {
			err = errUnexpected
		}
		polled <- err
	}()
	// The long-poll is registered once the dispatcher knows two waiters.
	waitFor(t, func() bool { return len(s.Coordinator.Waiters()) == 2 })

	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	drain := st.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetDrain() != nil }).GetDrain()
	if drain.GetGracePeriod().AsDuration() <= 0 {
		t.Fatalf("drain = %v", drain)
	}
	if err := <-polled; err != nil {
		t.Fatalf("long-poll at shutdown: %v; want an empty answer", err)
	}
	// The worker closes its side after draining; shutdown then completes.
	if err := st.s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if err := st.end(); err != nil && !isEOF(err) {
		t.Fatalf("stream end after drain = %v", err)
	}
	<-stopped
}

func TestWatchJobStreamsLiveEventsAndEndsAfterTheTerminalOne(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		created, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("watched", "x")})
		if err != nil {
			t.Fatal(err)
		}
		ws, err := c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: created.GetJob().GetId()})
		if err != nil {
			t.Fatal(err)
		}
		first, err := ws.Recv()
		if err != nil || first.GetEvent().GetType() != leaseholdv1.EventType_EVENT_TYPE_QUEUED {
			t.Fatalf("first watched event = %v, %v", first, err)
		}
		// Each step happens only after the watcher saw the previous one.
		claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"watched"}})
		if err != nil || len(claim.GetJobs()) != 1 {
			t.Fatalf("claim = %v, %v", claim, err)
		}
		if m, err := ws.Recv(); err != nil || m.GetEvent().GetType() != leaseholdv1.EventType_EVENT_TYPE_LEASED {
			t.Fatalf("second watched event = %v, %v", m, err)
		}
		if _, err := c.workers.Retry(ctx, &leaseholdv1.RetryRequest{
			Token: claim.GetJobs()[0].GetToken(), Error: &leaseholdv1.JobError{Code: "BAD_INPUT", Message: "no"},
		}); err != nil {
			t.Fatal(err)
		}
		var rest []leaseholdv1.EventType
		for {
			m, err := ws.Recv()
			if err != nil {
				if !isEOF(err) {
					t.Fatalf("watch ended with %v", err)
				}
				break
			}
			rest = append(rest, m.GetEvent().GetType())
		}
		if rest[len(rest)-1] != leaseholdv1.EventType_EVENT_TYPE_FAILED {
			t.Fatalf("events after the non-retryable failure = %v; want FAILED last, then the end", rest)
		}
		// Watching a finished job from past its end returns at once.
		ws, err = c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: created.GetJob().GetId(), AfterSequence: 100})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ws.Recv(); !isEOF(err) {
			t.Fatalf("watch past the end = %v; want the stream to end", err)
		}
		missing, err := c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: "00000000-0000-7000-8000-000000000000"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = missing.Recv()
		wantReason(t, err, codes.NotFound, coordinator.ReasonJobNotFound)
		notAnID, err := c.jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: "missing"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = notAnID.Recv()
		wantReason(t, err, codes.InvalidArgument, coordinator.ReasonInvalidArgument)
	})
}

func isReport(m *leaseholdv1.ConnectResponse) bool { return m.GetReportResult() != nil }

// Reports on the Connect stream are answered one by one, each as the
// unary call would have been: OK with the state, LEASE_LOST for a stale
// generation, INVALID_ARGUMENT for another worker's token (and the stream
// stays up), the same answer again for a repeated report.
func TestStreamReportsAreAnsweredLikeTheUnaryCalls(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		version, err := c.workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
		if err != nil || !slices.Contains(version.GetCapabilities(), "stream_reports") {
			t.Fatalf("GetVersion = %v, %v; want the stream_reports capability", version, err)
		}
		st := connect(t, ctx, c, &leaseholdv1.Hello{WorkerId: "reporter", Queues: []string{"rep"}, Capacity: 4})
		st.credit(2)
		for _, k := range []string{"a", "b"} {
			if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("rep", k)}); err != nil {
				t.Fatal(err)
			}
		}
		a := st.next(isLease).GetLease().GetToken()
		b := st.next(isLease).GetLease().GetToken()

		complete := func(tok *leaseholdv1.LeaseToken) *leaseholdv1.ReportResult {
			t.Helper()
			st.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Complete{Complete: &leaseholdv1.CompleteRequest{Token: tok, Result: []byte("r")}}})
			return st.next(isReport).GetReportResult()
		}
		later := &leaseholdv1.LeaseToken{JobId: a.GetJobId(), LeaseGeneration: a.GetLeaseGeneration() + 1, WorkerId: "reporter", Secret: a.GetSecret()}
		if r := complete(later); codes.Code(r.GetCode()) != codes.PermissionDenied || r.GetReason() != coordinator.ReasonLeaseSecretMismatch {
			t.Fatalf("a generation the secret is not for: %v; want PERMISSION_DENIED/%s", r, coordinator.ReasonLeaseSecretMismatch)
		}
		foreign := &leaseholdv1.LeaseToken{JobId: a.GetJobId(), LeaseGeneration: a.GetLeaseGeneration(), WorkerId: "someone-else", Secret: a.GetSecret()}
		if r := complete(foreign); codes.Code(r.GetCode()) != codes.PermissionDenied || r.GetKind() != leaseholdv1.ReportKind_REPORT_KIND_COMPLETE ||
			len(r.GetToken().GetSecret()) != 0 {
			t.Fatalf("another worker's id with this lease's secret: %v; want PERMISSION_DENIED, echoed without the secret", r)
		}
		if r := complete(a); r.GetCode() != 0 || r.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || r.GetToken().GetJobId() != a.GetJobId() {
			t.Fatalf("complete: %v; want OK, SUCCEEDED", r)
		}
		if r := complete(a); r.GetCode() != 0 || r.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("repeated complete: %v; want the same answer", r)
		}
		st.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Release{Release: &leaseholdv1.ReleaseRequest{Token: b}}})
		if r := st.next(isReport).GetReportResult(); r.GetCode() != 0 || r.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED ||
			r.GetKind() != leaseholdv1.ReportKind_REPORT_KIND_RELEASE {
			t.Fatalf("release: %v; want OK, QUEUED", r)
		}
		job, err := c.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: a.GetJobId()})
		if err != nil || job.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(job.GetJob().GetResult()) != "r" {
			t.Fatalf("completed job = %v, %v", job, err)
		}
	})
}
