package worker_test

import (
	"context"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// Against a coordinator with the stream_reports capability the worker
// reports on its Connect stream, no unary call per job; against one
// without it (an older coordinator) it reports with the unary calls.
func TestReportsGoOnTheStreamWhenTheCoordinatorTakesThem(t *testing.T) {
	t.Parallel()
	for _, legacy := range []bool{false, true} {
		name := "stream"
		if legacy {
			name = "unary fallback"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, setupOptions{})
			h.rec.legacy.Store(legacy)
			h.fastRetries("mixed")
			var ids []string
			for range 3 {
				ids = append(ids, h.create("mixed", "ok", "x").GetId())
			}
			fail := h.create("mixed", "fail", "y")
			h.start(worker.Config{Queues: []string{"mixed"}}, func(w *worker.Worker) {
				w.Handle("ok", func(context.Context, *worker.Job) ([]byte, error) { return []byte("done"), nil })
				w.Handle("fail", func(context.Context, *worker.Job) ([]byte, error) {
					return nil, worker.NonRetryable(context.DeadlineExceeded)
				})
			})
			for _, id := range ids {
				if final := h.waitFinal(id); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
					t.Fatalf("job %s ended %s", id, final.GetState())
				}
			}
			if final := h.waitFinal(fail.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_FAILED {
				t.Fatalf("failing job ended %s", final.GetState())
			}
			onStream, unary := h.rec.sentOnStream("Complete", true), h.rec.sentOnStream("Complete", false)
			retryStream, retryUnary := h.rec.sentOnStream("Retry", true), h.rec.sentOnStream("Retry", false)
			if legacy {
				if onStream != 0 || unary != 3 || retryStream != 0 || retryUnary != 1 {
					t.Fatalf("legacy coordinator: %d completes and %d retries on the stream, %d and %d unary; want 0, 0, 3, 1",
						onStream, retryStream, unary, retryUnary)
				}
				return
			}
			if onStream != 3 || unary != 0 || retryStream != 1 || retryUnary != 0 {
				t.Fatalf("%d completes and %d retries on the stream, %d and %d unary; want 3, 1, 0, 0",
					onStream, retryStream, unary, retryUnary)
			}
		})
	}
}
