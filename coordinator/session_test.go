package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// gatedStore orders a Complete of one job against a heartbeat's
// renewal of the same lease: the Complete waits for reportGo before it is
// applied, and the renewal, once committed, tells renewed and waits for
// renewGo before its answer goes back to the stream.
type gatedStore struct {
	store.Store
	job      string
	reportGo chan struct{}
	renewed  chan struct{}
	renewGo  chan struct{}
	once     sync.Once
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
	g := &gatedStore{Store: st, job: created[0].Job.ID,
		reportGo: make(chan struct{}), renewed: make(chan struct{}), renewGo: make(chan struct{})}
	c, err := New(Config{Store: g, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	// Registered after serve, so it runs first: nothing may stay held at
	// the gates when the coordinator shuts down.
	t.Cleanup(func() {
		closeOnce(g.reportGo)
		closeOnce(g.renewGo)
	})

	stream, err := leaseholdv1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *leaseholdv1.ConnectRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w", Queues: []string{"q"}, Capacity: 1}}})
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 1}}})
	m, err := stream.Recv()
	if err != nil || m.GetLease() == nil {
		t.Fatalf("want a lease, got %v (%v)", m, err)
	}
	tok := m.GetLease().GetToken()

	// The report, then the heartbeat, in this order on the stream.
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Complete{Complete: &leaseholdv1.CompleteRequest{Token: tok}}})
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{Heartbeat: &leaseholdv1.Heartbeat{
		Tokens: []*leaseholdv1.LeaseToken{tok}}}})
	select {
	case <-g.renewed: // committed while the report waits
	case <-ctx.Done():
		t.Fatal("the heartbeat's renewal never ran")
	}
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
	for _, w := range c.workers(TenantDefault) {
		if w.GetActiveLeases() != 0 {
			t.Fatalf("the stream of %s holds %d leases after its only job was completed, want 0", w.GetWorkerId(), w.GetActiveLeases())
		}
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

// TestTheEndOfAnOldLeaseDoesNotForgetTheNewOne: a worker releases a job
// on its stream and, before the release's answer is applied, the job is
// pushed to the same stream again under the next generation. The end of
// the old lease must not stop the stream counting the new one, or the
// stream would hold more leases than its capacity says.
func TestTheEndOfAnOldLeaseDoesNotForgetTheNewOne(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
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
	g := &releaseGatedStore{Store: st, job: created[0].Job.ID, released: make(chan struct{}), releaseGo: make(chan struct{})}
	c, err := New(Config{Store: g, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	t.Cleanup(func() { closeOnce(g.releaseGo) })

	stream, err := leaseholdv1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *leaseholdv1.ConnectRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	credit := &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 1}}}
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w", Queues: []string{"q"}, Capacity: 1}}})
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	send(credit)
	m, err := stream.Recv()
	if err != nil || m.GetLease() == nil {
		t.Fatalf("want a lease, got %v (%v)", m, err)
	}
	first := m.GetLease().GetToken()

	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Release{Release: &leaseholdv1.ReleaseRequest{Token: first}}})
	send(credit)
	select {
	case <-g.released: // committed; its answer waits
	case <-ctx.Done():
		t.Fatal("the release never committed")
	}
	m, err = stream.Recv()
	if err != nil || m.GetLease() == nil {
		t.Fatalf("want the job leased again, got %v (%v)", m, err)
	}
	if second := m.GetLease().GetToken(); second.GetJobId() != first.GetJobId() || second.GetLeaseGeneration() != first.GetLeaseGeneration()+1 {
		t.Fatalf("pushed %s generation %d, want %s generation %d", second.GetJobId(), second.GetLeaseGeneration(), first.GetJobId(), first.GetLeaseGeneration()+1)
	}
	close(g.releaseGo)
	m, err = stream.Recv()
	if err != nil || m.GetReportResult() == nil {
		t.Fatalf("want the release's answer, got %v (%v)", m, err)
	}
	if code := m.GetReportResult().GetCode(); code != 0 {
		t.Fatalf("the release was answered with code %d: %s", code, m.GetReportResult().GetMessage())
	}
	for _, w := range c.workers(TenantDefault) {
		if w.GetActiveLeases() != 1 {
			t.Fatalf("the stream of %s holds %d leases while its worker holds generation %d, want 1",
				w.GetWorkerId(), w.GetActiveLeases(), first.GetLeaseGeneration()+1)
		}
	}
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
	g := &gatedStore{Store: st, job: created[0].Job.ID,
		reportGo: make(chan struct{}), renewed: make(chan struct{}), renewGo: make(chan struct{})}
	close(g.reportGo) // only the renewal waits
	c, err := New(Config{Store: g, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	t.Cleanup(func() { closeOnce(g.renewGo) })

	api := leaseholdv1.NewWorkerServiceClient(conn)
	stream, err := api.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	send := func(m *leaseholdv1.ConnectRequest) {
		t.Helper()
		if err := stream.Send(m); err != nil {
			t.Fatal(err)
		}
	}
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w", Queues: []string{"q"}, Capacity: 1}}})
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 1}}})
	m, err := stream.Recv()
	if err != nil || m.GetLease() == nil {
		t.Fatalf("want a lease, got %v (%v)", m, err)
	}
	tok := m.GetLease().GetToken()

	send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{Heartbeat: &leaseholdv1.Heartbeat{
		Tokens: []*leaseholdv1.LeaseToken{tok}}}})
	select {
	case <-g.renewed: // committed; its answer waits
	case <-ctx.Done():
		t.Fatal("the heartbeat's renewal never ran")
	}
	if _, err := api.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	close(g.renewGo)
	if m, err := stream.Recv(); err != nil || m.GetHeartbeatResult() == nil {
		t.Fatalf("want the heartbeat's answer, got %v (%v)", m, err)
	}
	for _, w := range c.workers(TenantDefault) {
		if w.GetActiveLeases() != 0 {
			t.Fatalf("the stream of %s holds %d leases after its only job was completed, want 0", w.GetWorkerId(), w.GetActiveLeases())
		}
	}
}
