package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// The worker takes lease batches and sends report batches when the
// coordinator advertises them, and works exactly as before against one
// that does not (Config.StreamBatchesOff plays a coordinator that
// predates them): every job runs once and every report goes on the
// stream either way.
func TestTheWorkerUsesStreamBatchesOnlyWhenTheCoordinatorHasThem(t *testing.T) {
	t.Parallel()
	for _, off := range []bool{false, true} {
		name := "batches"
		if off {
			name = "coordinator without batches"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, setupOptions{configure: func(c *coordinator.Config) { c.StreamBatchesOff = off }})
			const n, capacity = 120, 16
			ids := make([]string, 0, n)
			for range n {
				ids = append(ids, h.create("batched", "ok", "x").GetId())
			}
			// Handlers finish in groups, so that reports are ready at the
			// same moment (as under load).
			var mu sync.Mutex
			var running []chan struct{}
			runs := map[string]int{}
			h.start(worker.Config{Queues: []string{"batched"}, Capacity: capacity}, func(w *worker.Worker) {
				w.Handle("ok", func(_ context.Context, j *worker.Job) ([]byte, error) {
					release := make(chan struct{})
					mu.Lock()
					runs[j.ID]++
					running = append(running, release)
					if len(running) == capacity/2 {
						for _, r := range running {
							close(r)
						}
						running = nil
					}
					mu.Unlock()
					<-release
					return []byte("done"), nil
				})
			})
			// A group that cannot fill (the last ones) is let go after a
			// while.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				tick := time.NewTicker(50 * time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					mu.Lock()
					for _, r := range running {
						close(r)
					}
					running = nil
					mu.Unlock()
				}
			}()
			for _, id := range ids {
				if final := h.waitFinal(id); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
					t.Fatalf("job %s ended %s", id, final.GetState())
				}
			}
			mu.Lock()
			for id, r := range runs {
				if r != 1 {
					t.Errorf("job %s ran %d times", id, r)
				}
			}
			mu.Unlock()
			onStream, unary := h.rec.sentOnStream("Complete", true), h.rec.sentOnStream("Complete", false)
			if onStream != n || unary != 0 {
				t.Fatalf("%d completes on the stream, %d unary; want %d, 0", onStream, unary, n)
			}
			leaseBatches, reportBatches, resultBatches := h.rec.leaseBatches.Load(), h.rec.reportBatches.Load(), h.rec.resultBatches.Load()
			t.Logf("lease batches %d, report batches %d, answer batches %d", leaseBatches, reportBatches, resultBatches)
			if off {
				if leaseBatches+reportBatches+resultBatches != 0 {
					t.Fatalf("against a coordinator without batches: %d lease, %d report, %d answer batches; want none",
						leaseBatches, reportBatches, resultBatches)
				}
				return
			}
			if leaseBatches == 0 || reportBatches == 0 || resultBatches == 0 {
				t.Fatalf("%d jobs in groups of %d: %d lease, %d report, %d answer batches; want some of each",
					n, capacity/2, leaseBatches, reportBatches, resultBatches)
			}
		})
	}
}

// Reports with large results are not packed past 512 KiB a ReportBatch
// (a coordinator takes its payload limit plus 1 MiB a message): they go
// alone, and every job still completes with its result.
func TestLargeReportsAreNotBatchedPastTheirBound(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	const n = 12
	ids := make([]string, 0, n)
	for range n {
		ids = append(ids, h.create("large-results", "big", "x").GetId())
	}
	result := make([]byte, 200<<10)
	var mu sync.Mutex
	var waiting []chan struct{}
	h.start(worker.Config{Queues: []string{"large-results"}, Capacity: n}, func(w *worker.Worker) {
		w.Handle("big", func(context.Context, *worker.Job) ([]byte, error) {
			// All return at once, so that their reports queue together.
			release := make(chan struct{})
			mu.Lock()
			waiting = append(waiting, release)
			if len(waiting) == n {
				for _, r := range waiting {
					close(r)
				}
			}
			mu.Unlock()
			<-release
			return result, nil
		})
	})
	for _, id := range ids {
		if final := h.waitFinal(id); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || len(final.GetResult()) != len(result) {
			t.Fatalf("job %s ended %s with %d bytes", id, final.GetState(), len(final.GetResult()))
		}
	}
	if largest := h.rec.largestReportBatch.Load(); largest > 512<<10 {
		t.Fatalf("a ReportBatch of %d bytes; want at most 512 KiB", largest)
	}
	t.Logf("%d report batches, largest %d bytes", h.rec.reportBatches.Load(), h.rec.largestReportBatch.Load())
}
