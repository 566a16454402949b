package worker_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// TestAHeartbeatRacingTheWorkersOwnCompleteIsNotLeaseLost: the worker
// completes a job on its stream, and before the Complete's answer comes
// back its heartbeat still names the lease. The coordinator renews after
// the Complete committed. The answer must not read as a lost lease: no
// "lease lost" in the worker's log, and the job succeeds.
//
// The race is made certain, not waited for: the Complete's ReportResult is
// held back on its way to the worker until a heartbeat answered after the
// commit (any status but RENEWED) has been handed over. Before the fix that
// answer was RENEW_STATUS_LOST (and a LeaseLostNotice), and the worker
// logged "lease lost" for a job its Complete then finished.
func TestAHeartbeatRacingTheWorkersOwnCompleteIsNotLeaseLost(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	job := h.create("race", "ok", "x")
	held := &holdReportConn{ClientConnInterface: h.rec, jobID: job.GetId(), released: make(chan leaseholdv1.RenewStatus, 1)}
	logs := &logRecorder{}
	cfg := worker.Config{
		Queues: []string{"race"}, LeaseDuration: time.Second, // heartbeats every 333ms
		Logger: slog.New(teeHandler{testLogger(t).Handler(), logs}),
	}
	w, err := worker.New(held, cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("ok", func(context.Context, *worker.Job) ([]byte, error) { return []byte("done"), nil })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := recv(t, done, "Run to return"); err != nil {
			t.Errorf("Run returned %v", err)
		}
	})

	status := recv(t, held.released, "a heartbeat answered after the Complete committed")
	if final := h.waitFinal(job.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %s", final.GetState())
	}
	t.Logf("the heartbeat after the worker's own Complete was answered %v", status)
	if n := logs.count("lease lost"); n > 0 {
		t.Errorf("the worker logged \"lease lost\" %d times for a job its own Complete finished (heartbeat answered %v)", n, status)
	}
}

// holdReportConn holds back the ReportResult for jobID on the Connect
// stream until a HeartbeatResult naming that job with a status other than
// RENEWED has been delivered (and sends that status on released).
type holdReportConn struct {
	grpc.ClientConnInterface
	jobID    string
	released chan leaseholdv1.RenewStatus
}

func (c *holdReportConn) NewStream(ctx context.Context, desc *grpc.StreamDesc, method string, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := c.ClientConnInterface.NewStream(ctx, desc, method, opts...)
	if err != nil || method != leaseholdv1.WorkerService_Connect_FullMethodName {
		return cs, err
	}
	return &holdReportStream{ClientStream: cs, c: c}, nil
}

type holdReportStream struct {
	grpc.ClientStream
	c *holdReportConn

	mu       sync.Mutex // RecvMsg is called by one goroutine; the mutex documents the state
	stash    *leaseholdv1.ConnectResponse
	handOver bool // the heartbeat's answer went through: hand the stash over
	done     bool // the stash was handed over
}

func (s *holdReportStream) RecvMsg(m any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out, ok := m.(*leaseholdv1.ConnectResponse)
	if !ok {
		return s.ClientStream.RecvMsg(m)
	}
	if s.handOver && s.stash != nil {
		proto.Merge(out, s.stash)
		s.stash, s.done = nil, true
		return nil
	}
	for {
		msg := new(leaseholdv1.ConnectResponse)
		if err := s.ClientStream.RecvMsg(msg); err != nil {
			return err
		}
		if rr := msg.GetReportResult(); rr != nil && !s.done && rr.GetToken().GetJobId() == s.c.jobID {
			s.stash = msg
			continue
		}
		if hb := msg.GetHeartbeatResult(); hb != nil && s.stash != nil && !s.handOver {
			for _, r := range hb.GetResults() {
				if r.GetToken().GetJobId() == s.c.jobID && r.GetStatus() != leaseholdv1.RenewStatus_RENEW_STATUS_RENEWED {
					s.handOver = true
					s.c.released <- r.GetStatus()
				}
			}
		}
		proto.Merge(out, msg)
		return nil
	}
}

// logRecorder keeps the messages of every record logged.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) count(msg string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, m := range r.msgs {
		if strings.Contains(m, msg) {
			n++
		}
	}
	return n
}

// teeHandler logs through next and records each message in rec.
type teeHandler struct {
	next slog.Handler
	rec  *logRecorder
}

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool { return true }

func (h teeHandler) Handle(ctx context.Context, r slog.Record) error {
	h.rec.mu.Lock()
	h.rec.msgs = append(h.rec.msgs, r.Message)
	h.rec.mu.Unlock()
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h teeHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return teeHandler{h.next.WithAttrs(as), h.rec}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{h.next.WithGroup(name), h.rec}
}
