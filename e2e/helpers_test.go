package e2e

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// clients bundles the three service clients of one connection.
type clients struct {
	jobs    leaseholdv1.JobServiceClient
	workers leaseholdv1.WorkerServiceClient
	admin   leaseholdv1.AdminServiceClient
}

func newClients(conn *grpc.ClientConn) clients {
	return clients{
		jobs:    leaseholdv1.NewJobServiceClient(conn),
		workers: leaseholdv1.NewWorkerServiceClient(conn),
		admin:   leaseholdv1.NewAdminServiceClient(conn),
	}
}

// setup starts a coordinator of the given engine and returns it with its
// clients.
func setup(t *testing.T, postgres bool, configure func(*coordinator.Config)) (*testserver.Server, clients) {
	t.Helper()
	s := testserver.Start(t, testserver.Options{Postgres: postgres, Configure: configure})
	return s, newClients(s.Dial(t))
}

// engines runs f once per storage engine, as parallel subtests, and
// marks the calling test parallel too: each subtest has a coordinator and
// a database of its own, and a sequential parent would hold back every
// parallel test of the package until it ended.
func engines(t *testing.T, f func(t *testing.T, postgres bool)) {
	t.Parallel()
	for _, e := range []struct {
		name     string
		postgres bool
	}{{"sqlite", false}, {"postgres", true}} {
		t.Run(e.name, func(t *testing.T) {
			t.Parallel()
			f(t, e.postgres)
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// errorInfo returns the status code and ErrorInfo reason of err.
func errorInfo(err error) (codes.Code, string) {
	st, ok := status.FromError(err)
	if !ok {
		return codes.Unknown, ""
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return st.Code(), info.GetReason()
		}
	}
	return st.Code(), ""
}

// wantReason fails unless err has code and ErrorInfo reason.
func wantReason(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	gotCode, gotReason := errorInfo(err)
	if gotCode != code || gotReason != reason {
		t.Fatalf("error = %v; want code %v reason %s (got code %v reason %q)", err, code, reason, gotCode, gotReason)
	}
}

// fieldViolations returns the BadRequest field names of err.
func fieldViolations(err error) []string {
	st, _ := status.FromError(err)
	var out []string
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				out = append(out, v.GetField())
			}
		}
	}
	return out
}

// clock is an injectable clock for Config.Now: tests move it to cross lease
// expiry and retry backoff without sleeping.
type clock struct {
	mu sync.Mutex // guards t
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Now().UTC().Truncate(time.Millisecond)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// stream is a raw Connect stream for tests: one goroutine receives into a
// channel so tests can wait for specific messages with a timeout.
type stream struct {
	t    *testing.T
	s    leaseholdv1.WorkerService_ConnectClient
	msgs chan *leaseholdv1.ConnectResponse
	err  chan error
	sent sync.Mutex // guards Send: grpc allows one sender at a time
}

func connect(t *testing.T, ctx context.Context, c clients, hello *leaseholdv1.Hello) *stream {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	cs, err := c.workers.Connect(ctx)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	st := &stream{t: t, s: cs, msgs: make(chan *leaseholdv1.ConnectResponse, 4096), err: make(chan error, 1)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			m, err := cs.Recv()
			if err != nil {
				st.err <- err
				close(st.msgs)
				return
			}
			st.msgs <- m
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	st.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: hello}})
	w := st.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetWelcome() != nil })
	if w.GetWelcome().GetCoordinatorId() == "" {
		t.Fatalf("welcome without coordinator id: %v", w)
	}
	return st
}

func (s *stream) send(m *leaseholdv1.ConnectRequest) {
	s.t.Helper()
	s.sent.Lock()
	defer s.sent.Unlock()
	if err := s.s.Send(m); err != nil {
		s.t.Fatalf("stream send: %v", err)
	}
}

func (s *stream) credit(n int32) {
	s.t.Helper()
	s.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: n}}})
}

// next returns the next message matching want, failing after 30s or when
// the stream ends. Messages that do not match are dropped.
func (s *stream) next(want func(*leaseholdv1.ConnectResponse) bool) *leaseholdv1.ConnectResponse {
	s.t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case m, ok := <-s.msgs:
			if !ok {
				s.t.Fatalf("stream ended: %v", <-s.err)
			}
			if want(m) {
				return m
			}
		case <-timeout.C:
			s.t.Fatalf("no matching stream message within 30s")
		}
	}
}

// end waits for the stream to end and returns its error.
func (s *stream) end() error {
	s.t.Helper()
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case _, ok := <-s.msgs:
			if !ok {
				err := <-s.err
				s.err <- err
				return err
			}
		case <-timeout.C:
			s.t.Fatalf("stream did not end within 30s")
			return errors.New("unreachable")
		}
	}
}

var errUnexpected = errors.New("unexpected answer")

func isEOF(err error) bool { return errors.Is(err, io.EOF) }

// waitFor waits until cond holds, checking every few milliseconds, and
// fails after 10s. It waits for a state, never for a duration.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within 10s")
		}
		<-tick.C
	}
}
