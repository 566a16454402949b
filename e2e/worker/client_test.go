package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func TestClient(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	ctx := context.Background()

	t.Run("create with a request id is idempotent", func(t *testing.T) {
		opts := &worker.CreateOptions{RequestID: "order-7", Priority: 5, MaxAttempts: 3, RunAfter: time.Hour, Metadata: map[string]string{"k": "v"}}
		first, replayed, err := h.client.Create(ctx, "orders", "ship", []byte("7"), opts)
		if err != nil || replayed {
			t.Fatalf("first create: replayed=%v err=%v", replayed, err)
		}
		again, replayed, err := h.client.Create(ctx, "orders", "ship", []byte("7"), opts)
		if err != nil || !replayed || again.GetId() != first.GetId() {
			t.Fatalf("repeat: id %s replayed=%v err=%v, want the original %s replayed", again.GetId(), replayed, err, first.GetId())
		}
		if first.GetPriority() != 5 || first.GetMaxAttempts() != 3 || first.GetMetadata()["k"] != "v" ||
			!first.GetAvailableAt().AsTime().After(first.GetCreatedAt().AsTime().Add(59*time.Minute)) {
			t.Fatalf("options not applied: %v", first)
		}
		_, _, err = h.client.Create(ctx, "orders", "ship", []byte("8"), opts)
		if status.Code(err) != codes.AlreadyExists {
			t.Fatalf("same request id, different payload: %v, want ALREADY_EXISTS", err)
		}
	})

	t.Run("batch create injects trace context without touching the requests", func(t *testing.T) {
		tp := sdktrace.NewTracerProvider()
		defer func() { _ = tp.Shutdown(ctx) }()
		sctx, span := tp.Tracer("producer").Start(ctx, "batch")
		defer span.End()
		reqs := []*leaseholdv1.CreateJobRequest{
			{Job: &leaseholdv1.JobSpec{Queue: "batch", Kind: "a"}},
			{Job: &leaseholdv1.JobSpec{Queue: "batch", Kind: "b", Metadata: map[string]string{"x": "1"}}},
		}
		resps, err := h.client.BatchCreate(sctx, reqs)
		if err != nil || len(resps) != 2 {
			t.Fatalf("batch create: %d responses, err %v", len(resps), err)
		}
		for i, r := range resps {
			if r.GetJob().GetKind() != reqs[i].GetJob().GetKind() || r.GetJob().GetMetadata()["traceparent"] == "" {
				t.Fatalf("response %d: %v", i, r.GetJob())
			}
		}
		if reqs[0].GetJob().GetMetadata() != nil || len(reqs[1].GetJob().GetMetadata()) != 1 {
			t.Fatalf("BatchCreate modified the caller's requests: %v", reqs)
		}
	})

	t.Run("get, list, cancel and watch a queued job", func(t *testing.T) {
		job, _, err := h.client.Create(ctx, "watched", "noop", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := h.client.Get(ctx, job.GetId())
		if err != nil || got.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED {
			t.Fatalf("get: %v %v", got, err)
		}
		page, err := h.client.List(ctx, &leaseholdv1.ListJobsRequest{Queue: "watched"})
		if err != nil || len(page.GetJobs()) != 1 || page.GetJobs()[0].GetId() != job.GetId() {
			t.Fatalf("list: %v %v", page, err)
		}
		cancelled, err := h.client.Cancel(ctx, job.GetId(), "not needed")
		if err != nil || cancelled.GetState() != leaseholdv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("cancel: %v %v", cancelled, err)
		}
		var types []leaseholdv1.EventType
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		err = h.client.Watch(wctx, job.GetId(), func(ev *leaseholdv1.Event) error {
			types = append(types, ev.GetType())
			return nil
		})
		if err != nil {
			t.Fatalf("watch: %v", err)
		}
		want := []leaseholdv1.EventType{leaseholdv1.EventType_EVENT_TYPE_QUEUED, leaseholdv1.EventType_EVENT_TYPE_CANCELLED}
		if len(types) != len(want) || types[0] != want[0] || types[1] != want[1] {
			t.Fatalf("watched %v, want %v", types, want)
		}
		if _, err := h.client.Cancel(ctx, job.GetId(), "again"); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("cancelling a final job: %v, want FAILED_PRECONDITION", err)
		}
	})

	t.Run("watch returns the callback's error as is", func(t *testing.T) {
		job, _, err := h.client.Create(ctx, "watched", "noop", nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		stop := errors.New("seen enough")
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		defer cancel()
		if err := h.client.Watch(wctx, job.GetId(), func(*leaseholdv1.Event) error { return stop }); err != stop { //nolint:errorlint // Watch returns fn's error as is (its doc): identity is what is tested
			t.Fatalf("watch returned %v, want the callback's error", err)
		}
	})

	t.Run("get of a missing job is NOT_FOUND", func(t *testing.T) {
		if _, err := h.client.Get(ctx, "01900000-0000-7000-8000-000000000000"); status.Code(err) != codes.NotFound {
			t.Fatalf("get missing: %v", err)
		}
	})
}
