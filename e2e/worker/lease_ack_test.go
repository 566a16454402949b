package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// TestTheWorkerAcknowledgesPushedLeasesAndRunsPastTheUnackedBound: the
// coordinator pushes a stream at most 64 unacknowledged leases (and at
// most 16 MiB). The SDK declares lease_acks and acknowledges every lease
// as it arrives, so a worker of capacity 100 runs 100 long jobs at once
// within seconds. A worker that did not acknowledge would be held at the
// bound until its first heartbeat named the leases (a third of its
// one-minute lease: 20 s), past this test's deadline.
func TestTheWorkerAcknowledgesPushedLeasesAndRunsPastTheUnackedBound(t *testing.T) {
	t.Parallel()
	const capacity = 100
	h := setup(t, setupOptions{})
	var reqs []*leaseholdv1.CreateJobRequest
	for range capacity {
		reqs = append(reqs, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "acks", Kind: "hold"}})
	}
	if _, err := h.client.BatchCreate(context.Background(), reqs); err != nil {
		t.Fatal(err)
	}
	var running atomic.Int64
	all := make(chan struct{})
	release := make(chan struct{})
	h.start(worker.Config{Queues: []string{"acks"}, Capacity: capacity, LeaseDuration: time.Minute}, func(w *worker.Worker) {
		w.Handle("hold", func(ctx context.Context, _ *worker.Job) ([]byte, error) {
			if running.Add(1) == capacity {
				close(all)
			}
			select {
			case <-release:
			case <-ctx.Done():
			}
			return nil, nil
		})
	})
	defer close(release)
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d jobs running after 10s; a worker that acknowledges its leases runs them all at once", running.Load(), capacity)
	}
}
