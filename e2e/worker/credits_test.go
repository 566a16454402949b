package worker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// TestIdleStreamsHaveTheirWholeCapacityBackAfterADrain: two workers drain
// jobs on PostgreSQL with a short lease, so heartbeats cross reports all
// along; once the queue is empty, each stream holds no lease and has its
// whole capacity in credits (ListWorkers). A credit lost to a race (a
// grant capped away while leases were being delivered, a reported lease
// counted as held again by a heartbeat) would show here as fewer credits
// or leftover leases, for good: such a stream is pushed less than it has
// room for until it ends.
func TestIdleStreamsHaveTheirWholeCapacityBackAfterADrain(t *testing.T) {
	t.Parallel()
	const (
		queue    = "drain"
		capacity = 20
		workers  = 2
		jobs     = 2000
		perCall  = 500
	)
	h := setup(t, setupOptions{postgres: true})
	v, err := leaseholdv1.NewWorkerServiceClient(h.conn).GetVersion(context.Background(), &leaseholdv1.GetVersionRequest{})
	if err != nil || !slices.Contains(v.GetCapabilities(), "worker_credits") {
		t.Fatalf("GetVersion = %v, %v; want the worker_credits capability", v, err)
	}
	for i := range workers {
		h.start(worker.Config{
			WorkerID: fmt.Sprintf("drainer-%d", i), Queues: []string{queue}, Capacity: capacity,
			LeaseDuration: 3 * time.Second, // a heartbeat a second
		}, func(w *worker.Worker) {
			w.HandleAny(func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*waitTimeout)
	defer cancel()
	for created := 0; created < jobs; created += perCall {
		reqs := make([]*leaseholdv1.CreateJobRequest, perCall)
		for i := range reqs {
			reqs[i] = &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: queue, Kind: "noop"}}
		}
		if _, err := h.client.BatchCreate(ctx, reqs); err != nil {
			t.Fatalf("create: %v", err)
		}
	}

	var (
		stats *leaseholdv1.QueueStats
		ws    []*leaseholdv1.WorkerInfo
	)
	idle := func() bool {
		q, err := h.admin.GetQueue(ctx, &leaseholdv1.GetQueueRequest{Queue: queue})
		if err != nil {
			t.Fatalf("get queue: %v", err)
		}
		stats = q.GetQueue().GetStats()
		if stats.GetSucceeded() != jobs {
			return false
		}
		got, err := h.admin.ListWorkers(ctx, &leaseholdv1.ListWorkersRequest{})
		if err != nil {
			t.Fatalf("list workers: %v", err)
		}
		ws = got.GetWorkers()
		if len(ws) != workers {
			return false
		}
		for _, w := range ws {
			if w.GetActiveLeases() != 0 || w.GetCredits() != capacity {
				return false
			}
		}
		return true
	}
	for !idle() {
		select {
		case <-ctx.Done():
			t.Fatalf("not idle with every credit back: queue %v; workers:\n%v", stats, ws)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
