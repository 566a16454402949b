package coordinator

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// jobsStore is a fresh SQLite store holding n jobs of queue "q".
func jobsStore(ctx context.Context, t *testing.T, n int) (store.Store, []string) {
	t.Helper()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	reqs := make([]store.CreateRequest, n)
	for i := range reqs {
		reqs[i] = store.CreateRequest{Spec: store.JobSpec{Queue: "q", Kind: "k", Payload: []byte("payload")}}
	}
	created, err := st.CreateJobs(ctx, store.CreateJobsParams{Tenant: TenantDefault, Requests: reqs})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i, c := range created {
		ids[i] = c.Job.ID
	}
	return st, ids
}

// openAckStream says Hello as worker "w" (queue "q", capacity 100, the
// given features), reads the Welcome and grants credits.
func openAckStream(ctx context.Context, t *testing.T, conn *grpc.ClientConn, credits int32, features ...string) workerStream {
	t.Helper()
	stream, err := leaseholdv1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := workerStream{stream, t}
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w", Queues: []string{"q"}, Capacity: 100, Features: features}}})
	if _, err := s.Recv(); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: credits}}})
	return s
}

func (s workerStream) ack(toks ...*leaseholdv1.LeaseToken) {
	s.t.Helper()
	ids := make([]string, len(toks))
	for i, t := range toks {
		ids[i] = t.GetJobId()
	}
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Ack{Ack: &leaseholdv1.LeaseAck{JobIds: ids}}})
}

// leasedCount is how many jobs of ids are LEASED in st.
func leasedCount(ctx context.Context, t *testing.T, st store.Store, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		j, err := st.GetJob(ctx, TenantDefault, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == store.JobStateLeased {
			n++
		}
	}
	return n
}

// settle lets the dispatcher run a good number of rounds (it polls every
// 20ms): a bound that did not hold would have pushed more meanwhile.
func settle() { time.Sleep(300 * time.Millisecond) }

// TestAStreamIsPushedNoMoreThanItsBoundOfUnacknowledgedLeases: with a
// bound of 2 and credits for 5, a stream is pushed 2 leases; each
// acknowledgement (a LeaseAck, or for a worker without lease_acks a
// heartbeat naming the leases) makes room for as many more. Before the
// fix all 5 were pushed at once, acknowledged or not.
func TestAStreamIsPushedNoMoreThanItsBoundOfUnacknowledgedLeases(t *testing.T) {
	t.Parallel()
	for _, acks := range []bool{true, false} {
		name := "lease_acks"
		if !acks {
			name = "old-style worker acknowledging by heartbeat"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			st, ids := jobsStore(ctx, t, 5)
			c, err := New(Config{Store: st, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second,
				StreamUnackedLeases: 2, StreamAckTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			conn := serve(t, c)
			var features []string
			if acks {
				features = []string{FeatureLeaseAcks}
			}
			stream := openAckStream(ctx, t, conn, 5, features...)
			acknowledge := func(toks ...*leaseholdv1.LeaseToken) {
				if acks {
					stream.ack(toks...)
					return
				}
				stream.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Heartbeat{Heartbeat: &leaseholdv1.Heartbeat{Tokens: toks}}})
			}
			// The store says what was leased, whether or not it was read.
			wantLeased := func(n int, why string) {
				t.Helper()
				settle()
				if got := leasedCount(ctx, t, st, ids); got != n {
					t.Fatalf("%d jobs leased to the stream %s, want %d", got, why, n)
				}
			}
			wantLeased(2, "before any acknowledgement")
			if ws := c.workers(TenantDefault); len(ws) != 1 || ws[0].GetUnacknowledgedLeases() != 2 || ws[0].GetAcknowledgesLeases() != acks {
				t.Fatalf("ListWorkers: %v; want 2 unacknowledged leases, acknowledges_leases %v", ws, acks)
			}
			first := []*leaseholdv1.LeaseToken{stream.lease(), stream.lease()}
			acknowledge(first[0])
			wantLeased(3, "after one acknowledgement")
			acknowledge(first[1])
			wantLeased(4, "after two acknowledgements")
			var next []*leaseholdv1.LeaseToken
			for len(next) < 2 {
				m, err := stream.Recv()
				if err != nil {
					t.Fatal(err)
				}
				if m.GetLease() != nil {
					next = append(next, m.GetLease().GetToken())
				}
			}
			acknowledge(next...)
			wantLeased(5, "after four acknowledgements")
		})
	}
}

// TestAStreamThatDoesNotAcknowledgeIsEndedAndItsLeasesReleased: a worker
// that declared lease_acks and acknowledges nothing has its stream ended
// after the ack timeout (RESOURCE_EXHAUSTED, STREAM_NOT_ACKNOWLEDGING) and
// the leases it was pushed are released at once, not left to expire. A
// worker without lease_acks is not ended (it acknowledges only with its
// heartbeats, a third of a lease apart), only bounded.
func TestAStreamThatDoesNotAcknowledgeIsEndedAndItsLeasesReleased(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, ids := jobsStore(ctx, t, 3)
	c, err := New(Config{Store: st, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second,
		StreamAckTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	stream := openAckStream(ctx, t, conn, 3, "some_future_feature", FeatureLeaseAcks)
	leases := 0
	var end error
	for end == nil {
		var m *leaseholdv1.ConnectResponse
		if m, end = stream.Recv(); m.GetLease() != nil {
			leases++
		}
	}
	code, reason := statusReason(end)
	if code != codes.ResourceExhausted || reason != ReasonStreamNotAcknowledging {
		t.Fatalf("the stream ended with %v; want RESOURCE_EXHAUSTED %s", end, ReasonStreamNotAcknowledging)
	}
	if leases != 3 {
		t.Errorf("the stream was pushed %d leases, want 3", leases)
	}
	// Released before the stream's status was sent.
	for _, id := range ids {
		j, err := st.GetJob(ctx, TenantDefault, id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State != store.JobStateQueued || j.Attempts != 0 {
			t.Errorf("job %s is %s with %d attempts after the stream that never acknowledged it ended; want QUEUED, attempt refunded", id, j.State, j.Attempts)
		}
	}

	// An old-style stream on the same jobs: bounded, not ended.
	old := openAckStream(ctx, t, conn, 3)
	toks := []*leaseholdv1.LeaseToken{old.lease(), old.lease(), old.lease()}
	time.Sleep(4 * 200 * time.Millisecond) // well past the ack timeout
	old.heartbeat(toks[0])
	if m, err := old.Recv(); err != nil || m.GetHeartbeatResult() == nil {
		t.Fatalf("an old-style stream past the ack timeout: %v (%v); want it open, answering its heartbeat", m, err)
	}
}

// statusReason is the code and ErrorInfo reason of err.
func statusReason(err error) (codes.Code, string) {
	return status.Code(err), reasonOf(err)
}

// Hello's features and LeaseAck's ids are bounded; unknown features are
// ignored and lease_acks is recognised.
func TestValidateHelloFeaturesAndLeaseAck(t *testing.T) {
	base := func(features ...string) *leaseholdv1.Hello {
		return &leaseholdv1.Hello{WorkerId: "w", Queues: []string{"q"}, Capacity: 1, Features: features}
	}
	h, err := testValidator.Hello(base("future", FeatureLeaseAcks))
	if err != nil || !h.acks {
		t.Fatalf("hello with lease_acks: %+v, %v; want acks", h, err)
	}
	if h, err = testValidator.Hello(base("future")); err != nil || h.acks {
		t.Fatalf("hello without lease_acks: %+v, %v; want no acks", h, err)
	}
	_, err = testValidator.Hello(base(make([]string, helloFeaturesMax+1)...))
	wantInvalidField(t, err, "hello.features")
	_, err = testValidator.Hello(base(""))
	wantInvalidField(t, err, "hello.features[0]")
	_, err = testValidator.Hello(base(string(make([]byte, helloFeatureMaxLen+1))))
	wantInvalidField(t, err, "hello.features[0]")
	_, err = testValidator.LeaseAck(&leaseholdv1.LeaseAck{JobIds: make([]string, CreditsMax+1)})
	wantInvalidField(t, err, "ack.job_ids")
	if ids, err := testValidator.LeaseAck(&leaseholdv1.LeaseAck{JobIds: []string{"a", "b"}}); err != nil || len(ids) != 2 {
		t.Fatalf("lease ack of two ids: %v, %v", ids, err)
	}
}
