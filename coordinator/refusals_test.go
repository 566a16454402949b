package coordinator

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
)

// wantRefusal checks that err is a refusal with reason and a RetryInfo
// delay in (0, maxDelay].
func wantRefusal(t *testing.T, err error, code codes.Code, reason string, maxDelay time.Duration) {
	t.Helper()
	st := status.Convert(err)
	var gotReason string
	var delay time.Duration
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			gotReason = d.GetReason()
		case *errdetails.RetryInfo:
			delay = d.GetRetryDelay().AsDuration()
		}
	}
	if st.Code() != code || gotReason != reason || delay <= 0 || delay > maxDelay {
		t.Fatalf("err = %v (reason %q, retry after %v); want %v %s with a RetryInfo delay in (0, %v]", err, gotReason, delay, code, reason, maxDelay)
	}
}

func TestUnaryCallsAreRateLimitedPerConnectionWithRetryInfo(t *testing.T) {
	t.Parallel()
	conn, logs := setup(t, func(cfg *Config) { cfg.UnaryRate, cfg.UnaryBurst = 1, 2 })
	ctx := context.Background()
	workers := leaseholdv1.NewWorkerServiceClient(conn)
	for range 2 {
		if _, err := workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	wantRefusal(t, err, codes.ResourceExhausted, ReasonRateLimited, time.Second)

	// Another connection (another peer with --auth none) has its own bucket.
	other, err := grpc.NewClient(conn.Target(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := leaseholdv1.NewWorkerServiceClient(other).GetVersion(ctx, &leaseholdv1.GetVersionRequest{}); err != nil {
		t.Fatalf("another connection is limited too: %v", err)
	}
	// The refusal's call line is at Debug; the Warn summary counts it.
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "ResourceExhausted") && !strings.Contains(line, "level=DEBUG") {
			t.Fatalf("a refused call was logged above Debug: %s", line)
		}
	}
}

func TestStreamOpensAreRateLimited(t *testing.T) {
	t.Parallel()
	conn, _ := setup(t, func(cfg *Config) { cfg.StreamOpenRate, cfg.StreamOpenBurst = 0.5, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	jobs := leaseholdv1.NewJobServiceClient(conn)
	first, err := jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: "0191d9c8-3f1e-7a2b-9c4d-5e6f7a8b9c0d"})
	if err != nil {
		t.Fatal(err)
	}
	// faultyStore's GetJob panics: the first watch reaches the handler.
	if _, err := first.Recv(); status.Code(err) != codes.Internal {
		t.Fatalf("the first watch = %v; want the handler's INTERNAL", err)
	}
	second, err := jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: "0191d9c8-3f1e-7a2b-9c4d-5e6f7a8b9c0d"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	wantRefusal(t, err, codes.ResourceExhausted, ReasonRateLimited, 2*time.Second)
}

// A read lane of one is full while one read runs: the next read is shed
// after ShedWait with OVERLOADED and a RetryInfo delay, while writes (their
// own lane) and claims (not counted) go on.
func TestStoreWorkBeyondTheInFlightBoundIsShed(t *testing.T) {
	t.Parallel()
	counts := &overloadCounts{}
	shed := newLoadShedder(1, 1, 20*time.Millisecond, counts, nil).unary()
	ctx := withCallNote(context.Background())
	entered, release := make(chan struct{}), make(chan struct{})
	held := make(chan error, 1)
	go func() {
		_, err := shed(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/leasehold.v1.JobService/ListJobs"},
			func(context.Context, any) (any, error) {
				close(entered)
				<-release
				return "held", nil
			})
		held <- err
	}()
	<-entered
	ok := func(context.Context, any) (any, error) { return "ok", nil }
	_, err := shed(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/leasehold.v1.JobService/GetJob"}, ok)
	wantRefusal(t, err, codes.Unavailable, ReasonOverloaded, shedRetryDelay)
	if !refused(ctx) || counts.shedReads.Load() != 1 {
		t.Fatalf("the shed call is not noted (%v) or counted (%d)", refused(ctx), counts.shedReads.Load())
	}
	for _, m := range []string{"/leasehold.v1.JobService/CreateJob", "/leasehold.v1.WorkerService/Claim", "/leasehold.v1.WorkerService/GetVersion"} {
		if _, err := shed(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: m}, ok); err != nil {
			t.Fatalf("%s while the read lane is full: %v", m, err)
		}
	}
	close(release)
	if err := <-held; err != nil {
		t.Fatal(err)
	}
	if _, err := shed(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/leasehold.v1.JobService/GetJob"}, ok); err != nil {
		t.Fatalf("a read once the lane is free: %v", err)
	}
}

func TestOverloadIsSummarisedAtWarnOncePerInterval(t *testing.T) {
	t.Parallel()
	logs := &testlog.Buffer{}
	r := &overloadReporter{interval: time.Second, log: logs.Logger(slog.LevelInfo), counts: &overloadCounts{}}
	ctx := context.Background()
	last := r.runOnce(ctx, overloadReading{})
	if logs.String() != "" {
		t.Fatalf("a quiet interval logged: %s", logs.String())
	}
	r.counts.rateLimitedCalls.Add(7)
	r.counts.shedWrites.Add(3)
	last = r.runOnce(ctx, last)
	out := logs.String()
	if strings.Count(out, "\n") != 1 || !strings.Contains(out, "level=WARN") ||
		!strings.Contains(out, "rate_limited_calls=7") || !strings.Contains(out, "shed_writes=3") {
		t.Fatalf("summary = %q; want one Warn line with the counts", out)
	}
	r.counts.rateLimitedCalls.Add(1)
	r.runOnce(ctx, last)
	if out := logs.String(); !strings.Contains(out, "rate_limited_calls=1 ") {
		t.Fatalf("the second summary does not count the interval only: %q", out)
	}
}

// With authentication a caller's bucket is its principal's, whatever
// connection it calls on; with --auth none (no principal) it is the
// connection's.
func TestRateKeyIsThePrincipalOrTheConnection(t *testing.T) {
	t.Parallel()
	a := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1000}})
	b := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2000}})
	if rateKey(withCaller(a, anonymous("t"))) == rateKey(withCaller(b, anonymous("t"))) {
		t.Fatal("two connections without a principal share a bucket")
	}
	p := &caller{tenant: "t", id: "principal-1"}
	if rateKey(withCaller(a, p)) != rateKey(withCaller(b, p)) {
		t.Fatal("one principal on two connections has two buckets")
	}
	l := newRateLimiter(1, 1, "calls")
	ctx := withCallNote(withCaller(a, p))
	if err := l.Limit(ctx); err != nil {
		t.Fatal(err)
	}
	other := withCallNote(withCaller(b, p))
	if err := l.Limit(other); err == nil || !refusedBy(other, refusalRateLimited) {
		t.Fatalf("the principal's second call, on another connection, = %v; want it rate limited", err)
	}
}
