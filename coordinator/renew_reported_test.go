package coordinator

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// nextHeartbeatResult reads the stream up to the next HeartbeatResult and
// returns it with the message that follows it, which the test provokes by
// sending a second heartbeat: a LeaseLostNotice for the first one would
// come between them.
func (s workerStream) heartbeatAndNext(tok *leaseholdv1.LeaseToken) (*leaseholdv1.HeartbeatResult, *leaseholdv1.ConnectResponse) {
	s.t.Helper()
	s.heartbeat(tok)
	var first *leaseholdv1.HeartbeatResult
	for first == nil {
		m, err := s.Recv()
		if err != nil {
			s.t.Fatalf("want the heartbeat's answer: %v", err)
		}
		first = m.GetHeartbeatResult()
	}
	s.heartbeat(tok)
	m, err := s.Recv()
	if err != nil {
		s.t.Fatalf("want the second heartbeat's answer: %v", err)
	}
	return first, m
}

// TestAHeartbeatAfterTheWorkersOwnReportIsNotALostLease: a worker sends
// Complete on its stream and, before the answer comes back, a heartbeat
// that still names the lease. The heartbeat reaches the store after the
// Complete committed. Its answer is RENEW_STATUS_REPORTED, with no
// LeaseLostNotice: the lease was not lost (expired, reclaimed or finished
// elsewhere), the worker's own report ended it. Before the fix the answer
// was RENEW_STATUS_LOST followed by a LeaseLostNotice, and the SDK logged
// "lease lost" for a job its Complete then finished.
func TestAHeartbeatAfterTheWorkersOwnReportIsNotALostLease(t *testing.T) {
	t.Parallel()
	for _, unary := range []bool{false, true} {
		name := "stream complete"
		if unary {
			name = "unary complete"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			st, _ := oneJobStore(ctx, t)
			_, conn := serveStore(t, st)
			stream, tok := openWorkerStream(ctx, t, conn)

			if unary {
				if _, err := leaseholdv1.NewWorkerServiceClient(conn).Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok}); err != nil {
					t.Fatalf("complete: %v", err)
				}
			} else {
				stream.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Complete{Complete: &leaseholdv1.CompleteRequest{Token: tok}}})
				m, err := stream.Recv()
				if err != nil || m.GetReportResult() == nil || m.GetReportResult().GetCode() != 0 {
					t.Fatalf("want the complete answered OK, got %v (%v)", m, err)
				}
			}
			// The heartbeat the worker built before the answer came back.
			hb, next := stream.heartbeatAndNext(tok)
			if got := hb.GetResults()[0].GetStatus(); got != leaseholdv1.RenewStatus_RENEW_STATUS_REPORTED {
				t.Errorf("heartbeat after the worker's own complete: %v, want RENEW_STATUS_REPORTED", got)
			}
			if next.GetLeaseLost() != nil {
				t.Errorf("a LeaseLostNotice followed the heartbeat for a lease the worker's own complete ended")
			}
		})
	}
}

// TestAHeartbeatAfterExpiryIsStillALostLease: the notice keeps its
// meaning: a lease that expired and was taken by another worker is
// answered RENEW_STATUS_LOST with a LeaseLostNotice.
func TestAHeartbeatAfterExpiryIsStillALostLease(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	st, _ := oneJobStore(ctx, t)
	clock := &testClock{t: time.Now()}
	c, err := New(Config{Store: st, PollInterval: 20 * time.Millisecond, ShutdownGrace: time.Second,
		Now: clock.Now, ReapIntervalMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	stream, tok := openWorkerStream(ctx, t, conn)
	clock.Add(time.Hour) // past any lease
	res, err := leaseholdv1.NewWorkerServiceClient(conn).Claim(ctx, &leaseholdv1.ClaimRequest{
		WorkerId: "other", Queues: []string{"q"}, Wait: durationpb.New(30 * time.Second)})
	if err != nil || len(res.GetJobs()) != 1 {
		t.Fatalf("another worker's claim after expiry: %v, %v", res, err)
	}
	stream.heartbeat(tok)
	m, err := stream.Recv()
	if err != nil || m.GetHeartbeatResult() == nil {
		t.Fatalf("want the heartbeat's answer, got %v (%v)", m, err)
	}
	if got := m.GetHeartbeatResult().GetResults()[0].GetStatus(); got != leaseholdv1.RenewStatus_RENEW_STATUS_LOST {
		t.Errorf("heartbeat of an expired, reclaimed lease: %v, want RENEW_STATUS_LOST", got)
	}
	if m, err = stream.Recv(); err != nil || m.GetLeaseLost() == nil {
		t.Errorf("want a LeaseLostNotice, got %v (%v)", m, err)
	}
}

// testClock is an injected clock that tests move forward.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
