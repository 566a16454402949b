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

// gatedStore orders a stream's Complete of one job against a heartbeat's
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
