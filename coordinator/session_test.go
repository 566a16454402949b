package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// gatedStore orders a Complete of one job against a heartbeat's renewal
// of the same lease: a Complete on the stream waits for reportGo before it
// is applied, and the renewal, once committed, tells renewed and waits for
// renewGo before its answer goes back to the stream.
type gatedStore struct {
	store.Store
	job      string
	reportGo chan struct{}
	renewed  chan struct{}
	renewGo  chan struct{}
	once     sync.Once
}

func newGatedStore(st store.Store, job string) *gatedStore {
	return &gatedStore{Store: st, job: job,
		reportGo: make(chan struct{}), renewed: make(chan struct{}), renewGo: make(chan struct{})}
}

func (g *gatedStore) ApplyReports(ctx context.Context, reports []store.Report) ([]store.ReportResult, error) {
	for _, r := range reports {
		if r.Kind == store.ReportComplete && r.Token.JobID == g.job {
			<-g.reportGo
		}
	}
	return g.Store.ApplyReports(ctx, reports)
}

func (g *gatedStore) Renew(ctx context.Context, p store.RenewParams) ([]store.RenewResult, error) {
	res, err := g.Store.Renew(ctx, p)
	for _, t := range p.Tokens {
		if t.JobID == g.job {
			g.once.Do(func() { close(g.renewed) })
			<-g.renewGo
		}
	}
	return res, err
}

// releaseGatedStore holds the answer of a stream's Release of one job,
// after its commit, until releaseGo: the job is queued again meanwhile.
type releaseGatedStore struct {
	store.Store
	job       string
	released  chan struct{}
	releaseGo chan struct{}
}

func (g *releaseGatedStore) ApplyReports(ctx context.Context, reports []store.Report) ([]store.ReportResult, error) {
	res, err := g.Store.ApplyReports(ctx, reports)
	for _, r := range reports {
		if r.Kind == store.ReportRelease && r.Token.JobID == g.job {
			close(g.released)
			<-g.releaseGo
		}
	}
	return res, err
}

// oneJobStore is a fresh SQLite store holding one job of queue "q", and
// that job's id.
func oneJobStore(ctx context.Context, t *testing.T) (store.Store, string) {
	t.Helper()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	created, err := st.CreateJobs(ctx, store.CreateJobsParams{Tenant: TenantDefault, Requests: []store.CreateRequest{
		{Spec: store.JobSpec{Queue: "q", Kind: "k"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return st, created[0].Job.ID
}

// serveStore serves a coordinator on st that polls every 20 ms.
func serveStore(t *testing.T, st store.Store) (*Coordinator, *grpc.ClientConn) {
	t.Helper()
	c, err := New(Config{Store: st, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c, serve(t, c)
}

// workerStream is the Connect stream of worker "w" (queue "q", capacity 1).
type workerStream struct {
	leaseholdv1.WorkerService_ConnectClient
	t *testing.T
}

// openWorkerStream says Hello and grants one credit: it returns once the
// stream has been pushed a lease, with that lease's token.
func openWorkerStream(ctx context.Context, t *testing.T, conn *grpc.ClientConn) (workerStream, *leaseholdv1.LeaseToken) {
	t.Helper()
	stream, err := leaseholdv1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := workerStream{stream, t}
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w", Queues: []string{"q"}, Capacity: 1}}})
	if _, err := s.Recv(); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	s.credit()
	return s, s.lease()
}

func (s workerStream) send(m *leaseholdv1.ConnectRequest) {
	s.t.Helper()
	if err := s.Send(m); err != nil {
		s.t.Fatal(err)
	}
}

func (s workerStream) credit() {
	s.t.Helper()
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 1}}})
}

func (s workerStream) heartbeat(tok *leaseholdv1.LeaseToken) {
	s.t.Helper()
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{Heartbeat: &leaseholdv1.Heartbeat{
		Tokens: []*leaseholdv1.LeaseToken{tok}}}})
}

// lease reads the next message, which must be a lease, and returns its
// token.
func (s workerStream) lease() *leaseholdv1.LeaseToken {
	s.t.Helper()
	m, err := s.Recv()
	if err != nil || m.GetLease() == nil {
		s.t.Fatalf("want a lease, got %v (%v)", m, err)
	}
	return m.GetLease().GetToken()
}

// wantHeld fails unless every stream of c holds n leases.
func wantHeld(t *testing.T, c *Coordinator, n int, why string) {
	t.Helper()
	for _, w := range c.workers(TenantDefault) {
		if int(w.GetActiveLeases()) != n {
			t.Fatalf("the stream of %s holds %d leases %s, want %d", w.GetWorkerId(), w.GetActiveLeases(), why, n)
		}
	}
}

// TestARenewalCommittedBeforeAReportDoesNotHoldTheLeaseAgain: a worker
// reports a job on its stream and then heartbeats the same lease (its
// report's answer has not come yet, so the lease is still its own). The
// renewal commits first; the report commits and ends the lease before the
// renewal's answer is applied. The stream must hold nothing afterwards:
// counting the lease again would keep it for good and shrink the stream's
// room for leases by one, each time this happens.
func TestARenewalCommittedBeforeAReportDoesNotHoldTheLeaseAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, job := oneJobStore(ctx, t)
	g := newGatedStore(st, job)
	c, conn := serveStore(t, g)
	// Registered after serve, so it runs first: nothing may stay held at
	// the gates when the coordinator shuts down.
	t.Cleanup(func() {
		closeOnce(g.reportGo)
		closeOnce(g.renewGo)
	})
	stream, tok := openWorkerStream(ctx, t, conn)

	// The report, then the heartbeat, in this order on the stream.
	stream.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Complete{Complete: &leaseholdv1.CompleteRequest{Token: tok}}})
	stream.heartbeat(tok)
	waitFor(ctx, t, g.renewed, "the heartbeat's renewal") // committed while the report waits
	close(g.reportGo)
	var sawReport, sawHeartbeat bool
	for !sawReport || !sawHeartbeat {
		if sawReport && !sawHeartbeat {
			// The report has ended the lease (its answer follows its
			// commit); only now does the renewal's answer go back.
			closeOnce(g.renewGo)
		}
		m, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case m.GetReportResult() != nil:
			if code := m.GetReportResult().GetCode(); code != 0 {
				t.Fatalf("the complete was answered with code %d: %s", code, m.GetReportResult().GetMessage())
			}
			sawReport = true
		case m.GetHeartbeatResult() != nil:
			sawHeartbeat = true
		}
	}
	wantHeld(t, c, 0, "after its only job was completed")
}

// TestAUnaryReportDuringARenewalDoesNotHoldTheLeaseAgain: a worker that
// holds its leases through a stream but reports through the unary calls
// (the SDK's fallback, and any worker whose language has no stream
// reports) completes a job while a heartbeat renews the same lease. The
// renewal commits first; the Complete commits and ends the lease before the
// renewal's answer is applied. The stream must hold nothing afterwards.
func TestAUnaryReportDuringARenewalDoesNotHoldTheLeaseAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, job := oneJobStore(ctx, t)
	g := newGatedStore(st, job)
	close(g.reportGo) // only the renewal waits
	c, conn := serveStore(t, g)
	t.Cleanup(func() { closeOnce(g.renewGo) })
	stream, tok := openWorkerStream(ctx, t, conn)

	stream.heartbeat(tok)
	waitFor(ctx, t, g.renewed, "the heartbeat's renewal") // committed; its answer waits
	if _, err := leaseholdv1.NewWorkerServiceClient(conn).Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	close(g.renewGo)
	if m, err := stream.Recv(); err != nil || m.GetHeartbeatResult() == nil {
		t.Fatalf("want the heartbeat's answer, got %v (%v)", m, err)
	}
	wantHeld(t, c, 0, "after its only job was completed")
}

// TestTheEndOfAnOldLeaseDoesNotForgetTheNewOne: a worker releases a job
// on its stream and, before the release's answer is applied, the job is
// pushed to the same stream again under the next generation. The end of
// the old lease must not stop the stream counting the new one, or the
// stream would hold more leases than its capacity says.
func TestTheEndOfAnOldLeaseDoesNotForgetTheNewOne(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, job := oneJobStore(ctx, t)
	g := &releaseGatedStore{Store: st, job: job, released: make(chan struct{}), releaseGo: make(chan struct{})}
	c, conn := serveStore(t, g)
	t.Cleanup(func() { closeOnce(g.releaseGo) })
	stream, first := openWorkerStream(ctx, t, conn)

	stream.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Release{Release: &leaseholdv1.ReleaseRequest{Token: first}}})
	stream.credit()
	waitFor(ctx, t, g.released, "the release's commit") // its answer waits
	second := stream.lease()
	if second.GetJobId() != first.GetJobId() || second.GetLeaseGeneration() != first.GetLeaseGeneration()+1 {
		t.Fatalf("pushed %s generation %d, want %s generation %d",
			second.GetJobId(), second.GetLeaseGeneration(), first.GetJobId(), first.GetLeaseGeneration()+1)
	}
	close(g.releaseGo)
	m, err := stream.Recv()
	if err != nil || m.GetReportResult() == nil {
		t.Fatalf("want the release's answer, got %v (%v)", m, err)
	}
	if code := m.GetReportResult().GetCode(); code != 0 {
		t.Fatalf("the release was answered with code %d: %s", code, m.GetReportResult().GetMessage())
	}
	wantHeld(t, c, 1, "while its worker holds the job's newer lease")
}

// waitFor fails the test unless ch is closed before ctx ends.
func waitFor(ctx context.Context, t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatalf("%s never happened", what)
	}
}

// closeOnce closes ch unless it is closed already.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
