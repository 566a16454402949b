package worker_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// TestBreakerHoldsJobsThroughAnOutage is the payment-API scenario end to
// end, with a real coordinator on PostgreSQL, two SDK workers on real
// sockets and a fake payment provider that answers 503 until the test
// lets it recover:
//
//  1. Jobs fail with HTTP_503 until the breaker's window trips it: the
//     breaker opens.
//  2. While it is open no worker is handed a job of the dependency; the
//     jobs wait QUEUED, spending no attempt, although their queue allows
//     only 5 attempts and the outage lasts ten times longer than those
//     retries (20ms to 100ms apart) would.
//  3. Half-open lets one probe through; while the provider is down it
//     fails and the breaker re-opens for longer.
//  4. The provider recovers; the next probe succeeds, the breaker closes
//     and every job succeeds. None is DEAD.
//
// The timeline is logged (go test -v) for the closing note.
func TestBreakerHoldsJobsThroughAnOutage(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{postgres: true})
	ctx := t.Context()
	start := time.Now()
	rel := func(t time.Time) string { return fmt.Sprintf("+%.3fs", t.Sub(start).Seconds()) }
	const (
		dep    = "payments-api"
		queue  = "payments"
		jobs   = 40
		outage = 3500 * time.Millisecond
	)
	_, err := h.admin.UpdateQueuePolicy(ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
		Queue: queue,
		Retry: &leaseholdv1.RetryPolicy{
			MaxAttempts: 5, InitialDelay: durationpb.New(20 * time.Millisecond),
			MaxDelay: durationpb.New(100 * time.Millisecond), Multiplier: 2, JitterFraction: proto.Float64(0),
		},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.UpdateBreakerPolicy(ctx, &leaseholdv1.BreakerPolicy{
		Dependency: dep, CountedErrorCodes: []string{"HTTP_503"},
		WindowSize: 10, MinimumVolume: 5, FailureRateThreshold: 0.5,
		OpenDuration: durationpb.New(time.Second), MaxOpenDuration: durationpb.New(4 * time.Second), BackoffMultiplier: 2,
		HalfOpenProbes: 1,
	}); err != nil {
		t.Fatal(err)
	}

	// The fake provider and a log of every call a handler made to it.
	type call struct {
		at      time.Time
		job     string
		attempt int32
		ok      bool
	}
	var (
		down   atomic.Bool
		mu     sync.Mutex
		calls  []call
		charge = func(_ context.Context, j *worker.Job) ([]byte, error) {
			ok := !down.Load()
			mu.Lock()
			calls = append(calls, call{at: time.Now(), job: j.ID, attempt: j.Attempt, ok: ok})
			mu.Unlock()
			if !ok {
				return nil, worker.WithCode("HTTP_503", errors.New("payment provider: 503 Service Unavailable"))
			}
			return []byte(`"charged"`), nil
		}
	)
	down.Store(true)
	for i := range 2 {
		h.start(worker.Config{WorkerID: fmt.Sprintf("pay-worker-%d", i), Queues: []string{queue}, Capacity: 4},
			func(w *worker.Worker) { w.Handle("charge", charge) })
	}
	ids := make([]string, jobs)
	for i := range jobs {
		j, _, err := h.client.Create(ctx, queue, "charge", fmt.Appendf(nil, `{"order":%d}`, i), &worker.CreateOptions{Dependency: dep})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = j.GetId()
	}
	// The provider recovers after the outage, whatever the breaker does.
	recovered := make(chan time.Time, 1)
	timer := time.AfterFunc(outage, func() { down.Store(false); recovered <- time.Now() })
	defer timer.Stop()

	for _, id := range ids {
		if j := h.waitFinal(id); j.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Errorf("job %s ended %s after %d attempts (last error %v), want SUCCEEDED", id, j.GetState(), j.GetAttempts(), j.GetLastError())
		}
	}
	upAt := <-recovered

	evs, err := h.client.BreakerEvents(ctx, dep)
	if err != nil {
		t.Fatal(err)
	}
	var (
		opened, closed []time.Time
		lines          []string
	)
	for _, e := range evs {
		at := e.GetTime().AsTime()
		typ := strings.TrimPrefix(e.GetType().String(), "BREAKER_EVENT_TYPE_")
		lines = append(lines, fmt.Sprintf("  %s %-14s %s", rel(at), typ, e.GetData()))
		switch e.GetType() {
		case leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_OPENED:
			opened = append(opened, at)
		case leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_CLOSED:
			closed = append(closed, at)
		default: // half-open and the operator's events mark no boundary here
		}
	}
	if len(opened) == 0 || len(closed) != 1 {
		t.Fatalf("breaker events:\n%s\nwant at least one OPENED and exactly one CLOSED", strings.Join(lines, "\n"))
	}

	// The attempts each job spent, and the calls made while the breaker was
	// not closed (from the first opening to the close): only in-flight
	// stragglers leased before it opened and the half-open probes.
	mu.Lock()
	defer mu.Unlock()
	sort.Slice(calls, func(i, k int) bool { return calls[i].at.Before(calls[k].at) })
	var (
		before, during, after, failed int
		perJob                        = map[string]int{}
		held                          []string
	)
	for _, c := range calls {
		perJob[c.job]++
		if !c.ok {
			failed++
		}
		switch {
		case c.at.Before(opened[0]):
			before++
		case c.at.Before(closed[0]):
			during++
			held = append(held, fmt.Sprintf("  %s job %s attempt %d ok=%v", rel(c.at), c.job[len(c.job)-6:], c.attempt, c.ok))
		default:
			after++
		}
	}
	probes := 0
	for _, e := range evs {
		if e.GetType() == leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_HALF_OPENED {
			probes++
		}
	}
	most := 0
	for _, n := range perJob {
		most = max(most, n)
	}
	t.Logf("breaker timeline (t=0 when the workers started; provider down until %s):\n%s", rel(upAt), strings.Join(lines, "\n"))
	t.Logf("provider calls: %d in all (%d failed); %d before the breaker first opened at %s, %d while it was open or half-open "+
		"(%d half-open periods), %d after it closed at %s; most attempts spent by one job: %d of 5\ncalls while not closed:\n%s",
		len(calls), failed, before, rel(opened[0]), during, probes, after, rel(closed[0]), most, strings.Join(held, "\n"))

	// While not closed, the only calls are stragglers and one probe per
	// half-open period. Stragglers are the leases held when the breaker
	// opened (at most the capacity, 8 handlers) and those of a claim that
	// was in flight then and did not see the opening commit (at most the
	// capacity again).
	if limit := 2*8 + probes; during > limit {
		t.Errorf("%d provider calls while the breaker was open or half-open, want at most %d (in-flight stragglers and probes)", during, limit)
	}
	if most >= 5 {
		t.Errorf("a job spent %d attempts: the breaker did not hold it back", most)
	}
	if closed[0].Before(upAt) {
		t.Errorf("the breaker closed at %s, before the provider recovered at %s", rel(closed[0]), rel(upAt))
	}
	if len(opened) < 2 {
		t.Errorf("the breaker opened %d times: a probe during the outage should have re-opened it", len(opened))
	}
	if b, err := h.client.GetBreaker(ctx, dep); err != nil || b.GetState() != leaseholdv1.BreakerState_BREAKER_STATE_CLOSED {
		t.Errorf("breaker at the end: %v, %v; want CLOSED", b, err)
	}
	if dead, err := h.client.ListDeadJobs(ctx, &leaseholdv1.ListDeadJobsRequest{Queue: queue}); err != nil || len(dead.GetDeadJobs()) != 0 {
		t.Errorf("dead jobs: %v (%v), want none", dead, err)
	}
}
