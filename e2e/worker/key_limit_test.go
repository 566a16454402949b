package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

// TestKeyLimitHoldsAcrossCoordinators runs two coordinators on one
// PostgreSQL database, each with an SDK worker of capacity 8 on a real
// socket, over a queue that allows 2 jobs per concurrency key at once.
// The handlers count how many jobs of each key run at the same moment:
// never more than 2, although 16 handler slots are free and one key has
// 24 jobs.
func TestKeyLimitHoldsAcrossCoordinators(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{postgres: true})
	second := testserver.Start(t, testserver.Options{DatabaseURL: h.srv.DatabaseURL})
	ctx := t.Context()
	const queue = "exports"
	if _, err := h.admin.UpdateQueuePolicy(ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{
		Queue: queue, KeyConcurrencyLimit: 2,
	}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		running  = map[string]int{}
		most     = map[string]int{}
		finished int
	)
	export := func(ctx context.Context, j *worker.Job) ([]byte, error) {
		key := string(j.Payload)
		mu.Lock()
		running[key]++
		most[key] = max(most[key], running[key])
		mu.Unlock()
		defer func() {
			mu.Lock()
			running[key]--
			mu.Unlock()
		}()
		// The work itself: long enough that claims on both coordinators
		// overlap it.
		select {
		case <-time.After(15 * time.Millisecond):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		mu.Lock()
		finished++
		mu.Unlock()
		return []byte(`"exported"`), nil
	}
	h.start(worker.Config{WorkerID: "exporter-1", Queues: []string{queue}, Capacity: 8},
		func(w *worker.Worker) { w.Handle("export", export) })
	w2, err := worker.New(second.Dial(t), worker.Config{WorkerID: "exporter-2", Queues: []string{queue}, Capacity: 8, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	w2.Handle("export", export)
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w2.Run(runCtx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("second worker: %v", err)
		}
	})

	var ids []string
	for i, key := range append(repeat("big-customer", 24), repeat("small-customer", 8)...) {
		j, _, err := h.client.Create(ctx, queue, "export", []byte(key), &worker.CreateOptions{
			ConcurrencyKey: key, RequestID: fmt.Sprintf("export-%d", i),
		})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.GetId())
	}
	for _, id := range ids {
		if j := h.waitFinal(id); j.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %s ended %s", id, j.GetState())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("most running at once: %v (%d jobs done)", most, finished)
	for key, n := range most {
		if n > 2 {
			t.Errorf("%d jobs of %s ran at once across two coordinators, want at most 2", n, key)
		}
	}
	if most["big-customer"] != 2 {
		t.Errorf("big-customer never ran 2 at once (%d): the limit, not a lack of work, should bound it", most["big-customer"])
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}
