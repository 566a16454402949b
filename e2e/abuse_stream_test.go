package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// A Connect stream that grants credits for everything and never reads
// (grpc-go's Send returns once a message is queued, and this client opens
// its HTTP/2 windows wide, so flow control never pushes back), against 250
// jobs of 1 MB on one-hour leases. Two of them, on connections of their
// own: one an old-style worker that declares no features, one that
// declares "lease_acks" and then acknowledges nothing.
//
//   - each holds at most its bound of unacknowledged leases: 64 leases
//     or 16 MiB, here the bytes (17 leases of 1 MB);
//   - the one that declared lease_acks is ended after the ack timeout with
//     RESOURCE_EXHAUSTED, STREAM_NOT_ACKNOWLEDGING, and its leases are
//     released;
//   - an honest worker (unary Claim + Complete on its own connection) gets
//     every other job: 250 less what the old-style hoarder still holds;
//   - the coordinator's peak resident set (VmHWM) stays under 300 MB and a
//     probe GetJob is answered throughout (its p99 is logged, not
//     asserted: a loaded 2-core machine).
//
// The jobs are created before anything is measured.
func TestAbuseStreamHoardersHoldAtMostTheirBound(t *testing.T) {
	const (
		jobs, payload = 250, 1_000_000
		rssMaxMB      = 300
		queue         = "hoard"
	)
	// The bytes bound (16 MiB) is the tighter one for 1 MB jobs.
	bound := min(coordinator.StreamUnackedLeasesDefault, coordinator.StreamUnackedBytesDefault/payload+1)
	p, c, probeID := abuseServe(t)
	pid := p.Cmd.Process.Pid
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Fixtures, outside anything measured.
	var (
		next    atomic.Int64
		created sync.WaitGroup
		failed  atomic.Value
	)
	for range 8 {
		created.Go(func() {
			for i := next.Add(1) - 1; i < jobs; i = next.Add(1) - 1 {
				body := make([]byte, payload)
				body[0], body[1] = byte(i), byte(i>>8)
				if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: queue, Kind: "k", Payload: body}}); err != nil {
					failed.Store(err)
					return
				}
			}
		})
	}
	created.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("create the jobs: %v", err)
	}
	hwmBefore := rssKB(t, pid, "VmHWM")

	rss := sampleRSS(t, pid)
	probe := startProbe(t, p.Addr, probeID)
	legacy := openHoarder(ctx, t, p.Addr, "hoarder-legacy", nil)
	acking := openHoarder(ctx, t, p.Addr, "hoarder-acks", []string{"lease_acks"})

	// Peak leases held by each hoarder, as the coordinator reports them.
	peaks := watchHeld(ctx, t, c.admin)

	// Let dispatch push them what it will before the honest worker
	// starts: both hoarders hold leases, then a second more.
	for deadline := time.Now().Add(time.Minute); peaks.peak("hoarder-legacy") == 0 || peaks.peak("hoarder-acks") == 0; {
		if time.Now().After(deadline) {
			t.Fatalf("the hoarders were pushed nothing within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)

	// The honest worker: claims and completes until the queue is empty
	// and the acking hoarder's released leases are done too.
	honest := runHonestWorker(ctx, t, p.Addr, queue, func(done int) bool {
		return done+peaks.current("hoarder-legacy") >= jobs
	})
	ackEnd := acking.end(ctx)
	legacyHeld := peaks.current("hoarder-legacy")
	peaks.stop()
	peak := rss.Stop()
	hwm := rssKB(t, pid, "VmHWM")
	p50, p99, n, probeErrs := probeFigures(probe)

	code, reason := errorInfo(ackEnd)
	t.Logf("hoarders against %d jobs of %d bytes (bound %d unacknowledged leases): old-style hoarder held at most %d (%d at the end), "+
		"lease_acks hoarder held at most %d and was ended with %v %s; honest worker completed %d; "+
		"coordinator VmRSS peak %.1f MB while measured, VmHWM %.1f MB (%.1f MB after creating the jobs; bound %d MB); "+
		"probe GetJob p50 %v p99 %v over %d calls, %d errors",
		jobs, payload, bound, peaks.peak("hoarder-legacy"), legacyHeld, peaks.peak("hoarder-acks"), code, reason,
		honest, peak, float64(hwm)/1024, float64(hwmBefore)/1024, rssMaxMB, p50, p99, n, probeErrs)

	if got := peaks.peak("hoarder-legacy"); got > bound {
		t.Errorf("the old-style hoarder held %d leases; want at most %d", got, bound)
	}
	if got := peaks.peak("hoarder-acks"); got > bound {
		t.Errorf("the lease_acks hoarder held %d leases; want at most %d", got, bound)
	}
	if code != codes.ResourceExhausted || reason != coordinator.ReasonStreamNotAcknowledging {
		t.Errorf("the lease_acks hoarder's stream ended with %v; want RESOURCE_EXHAUSTED %s", ackEnd, coordinator.ReasonStreamNotAcknowledging)
	}
	if honest+legacyHeld != jobs {
		t.Errorf("the honest worker completed %d jobs and the old-style hoarder holds %d; want %d together", honest, legacyHeld, jobs)
	}
	if float64(hwm)/1024 > rssMaxMB {
		t.Errorf("coordinator VmHWM %.1f MB; want at most %d MB", float64(hwm)/1024, rssMaxMB)
	}
	if probeErrs > 0 {
		t.Errorf("%d probe GetJobs failed while the hoarders held their leases", probeErrs)
	}
	legacy.close()
}

// hoarder is a raw Connect stream that never reads.
type hoarder struct {
	stream leaseholdv1.WorkerService_ConnectClient
	conn   *grpc.ClientConn
}

// openHoarder opens a stream on a connection of its own whose HTTP/2
// windows are as wide as grpc-go allows, says Hello (capacity 10,000,
// one-hour leases, the given features) and grants 10,000 credits.
func openHoarder(ctx context.Context, t *testing.T, addr, id string, features []string) *hoarder {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(1<<30), grpc.WithInitialConnWindowSize(1<<30),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	stream, err := leaseholdv1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &leaseholdv1.Hello{WorkerId: id, Queues: []string{"hoard"}, Capacity: 10_000,
		LeaseDuration: durationpb.New(time.Hour), Features: features}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 10_000}}}); err != nil {
		t.Fatal(err)
	}
	return &hoarder{stream: stream, conn: conn}
}

// end reads what the transport buffered until the stream ends (bounded by
// ctx) and returns how it ended.
func (h *hoarder) end(ctx context.Context) error {
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := h.stream.Recv(); err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("the stream did not end: %w", ctx.Err())
	}
}

func (h *hoarder) close() { h.conn.Close() }

// heldWatcher samples ListWorkers every 100ms and keeps each worker's
// current and peak leases held.
type heldWatcher struct {
	mu       sync.Mutex
	cur, max map[string]int
	cancel   context.CancelFunc
	done     chan struct{}
}

func watchHeld(ctx context.Context, t *testing.T, admin leaseholdv1.AdminServiceClient) *heldWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &heldWatcher{cur: map[string]int{}, max: map[string]int{}, cancel: cancel, done: make(chan struct{})}
	sample := func() {
		res, err := admin.ListWorkers(ctx, &leaseholdv1.ListWorkersRequest{})
		if err != nil {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		clear(w.cur)
		for _, wi := range res.GetWorkers() {
			n := int(wi.GetActiveLeases())
			w.cur[wi.GetWorkerId()] = n
			w.max[wi.GetWorkerId()] = max(w.max[wi.GetWorkerId()], n)
		}
	}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			sample()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *heldWatcher) current(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cur[id]
}

func (w *heldWatcher) peak(id string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.max[id]
}

func (w *heldWatcher) stop() {
	w.cancel()
	<-w.done
}

// runHonestWorker claims (two jobs a call) and completes on a connection
// of its own, four at a time, until enough(completed) holds or two minutes
// pass; it returns how many jobs it completed.
func runHonestWorker(ctx context.Context, t *testing.T, addr, queue string, enough func(done int) bool) int {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	workers := leaseholdv1.NewWorkerServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var (
		completed atomic.Int64
		wg        sync.WaitGroup
		firstErr  atomic.Value
	)
	for range 4 {
		wg.Go(func() {
			for ctx.Err() == nil && !enough(int(completed.Load())) {
				res, err := workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "honest", Queues: []string{queue},
					MaxJobs: 2, Wait: durationpb.New(time.Second)})
				if err != nil {
					if ctx.Err() == nil {
						firstErr.CompareAndSwap(nil, err)
					}
					return
				}
				for _, j := range res.GetJobs() {
					if _, err := workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: j.GetToken()}); err != nil {
						firstErr.CompareAndSwap(nil, err)
						continue
					}
					completed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		t.Errorf("honest worker: %v", err)
	}
	return int(completed.Load())
}

// probeFigures stops the probe and returns its latencies and error count
// without asserting the latency.
func probeFigures(p *prober) (p50, p99 time.Duration, n, errs int) {
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.lat) == 0 {
		return 0, 0, 0, len(p.errs)
	}
	lat := slices.Sorted(slices.Values(p.lat))
	return lat[len(lat)/2], lat[len(lat)*99/100], len(lat), len(p.errs)
}
