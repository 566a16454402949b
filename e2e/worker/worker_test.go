package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

func TestWorkerCompletesJobsAndLinksTheProducersTrace(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	// The coordinator records into the same provider, so that one recorder
	// sees both sides of the stream.
	h := setup(t, setupOptions{configure: func(c *coordinator.Config) { c.TracerProvider = tp }})

	// The producer creates the job inside its own span.
	ctx, producerSpan := tp.Tracer("producer").Start(context.Background(), "signup")
	job, replayed, err := h.client.Create(ctx, "emails", "welcome", []byte("ada@example.com"),
		&worker.CreateOptions{Metadata: map[string]string{"tenant_user": "ada"}})
	producerSpan.End()
	if err != nil || replayed {
		t.Fatalf("create: replayed=%v err=%v", replayed, err)
	}
	if job.GetMetadata()["traceparent"] == "" {
		t.Fatalf("Create did not inject the trace context into metadata: %v", job.GetMetadata())
	}

	got := make(chan *worker.Job, 1)
	h.start(worker.Config{WorkerID: "w-trace", Queues: []string{"emails"}, TracerProvider: tp}, func(w *worker.Worker) {
		w.Handle("welcome", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			got <- j
			return []byte("sent to " + string(j.Payload)), nil
		})
	})
	j := recv(t, got, "the handler to run")
	final := h.waitFinal(job.GetId())

	if final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "sent to ada@example.com" {
		t.Fatalf("job ended %s with result %q", final.GetState(), final.GetResult())
	}
	if j.ID != job.GetId() || j.Kind != "welcome" || j.Queue != "emails" || j.Attempt != 1 ||
		j.Metadata["tenant_user"] != "ada" || j.Token.WorkerID != "w-trace" || j.Token.Generation != 1 || j.Checkpoint != nil {
		t.Fatalf("handler got an unexpected job view: %+v", j)
	}
	if n := len(h.rec.tokensSent("Complete", job.GetId())); n != 1 {
		t.Fatalf("Complete sent %d times, want 1", n)
	}

	// The handler span ends once the worker has its Complete answered,
	// which can be after the job reads SUCCEEDED here: wait for it.
	var handlerSpan sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); handlerSpan == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range spans.Ended() {
			if s.Name() == "leasehold.job welcome" {
				handlerSpan = s
			}
		}
	}
	if handlerSpan == nil {
		t.Fatalf("no handler span recorded; spans: %d", len(spans.Ended()))
	}
	links := handlerSpan.Links()
	if len(links) != 1 || links[0].SpanContext.TraceID() != producerSpan.SpanContext().TraceID() ||
		links[0].SpanContext.SpanID() != producerSpan.SpanContext().SpanID() || !links[0].SpanContext.IsRemote() {
		t.Fatalf("handler span links %v, want one link to the producer span %v", links, producerSpan.SpanContext())
	}
	if handlerSpan.Parent().IsValid() {
		t.Fatalf("handler span has parent %v; it must start a new trace linked to the producer", handlerSpan.Parent())
	}

	// The Complete is a child of the handler span; sent on the stream, it
	// carries its context, and the coordinator's span of the report (the
	// one its commit links to) is the Complete's child.
	var report, streamReport sdktrace.ReadOnlySpan
	for deadline := time.Now().Add(5 * time.Second); streamReport == nil && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		for _, s := range spans.Ended() {
			switch s.Name() {
			case "leasehold.report Complete":
				report = s
			case "leasehold.stream.report Complete":
				streamReport = s
			}
		}
	}
	if report == nil || report.Parent().SpanID() != handlerSpan.SpanContext().SpanID() {
		t.Fatalf("report span %v, want a child of the handler span", report)
	}
	if streamReport == nil || streamReport.Parent().SpanID() != report.SpanContext().SpanID() ||
		streamReport.SpanContext().TraceID() != handlerSpan.SpanContext().TraceID() {
		t.Fatalf("coordinator's stream report span %v, want a child of the worker's report span %v", streamReport, report.SpanContext())
	}
}

func TestPanicInHandlerIsRetriedNotCrashed(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	h.fastRetries("q")
	job := h.create("q", "explode", "x")

	secondStarted := make(chan struct{})
	finishSecond := make(chan struct{})
	h.start(worker.Config{Queues: []string{"q"}}, func(w *worker.Worker) {
		w.Handle("explode", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			if j.Attempt == 1 {
				panic(fmt.Sprintf("boom-%d", 42))
			}
			close(secondStarted)
			<-finishSecond
			return []byte("ok"), nil
		})
	})

	// Attempt 2 runs on the same worker: the panic did not crash it.
	recv(t, secondStarted, "the second attempt")
	mid, err := h.client.Get(context.Background(), job.GetId())
	if err != nil {
		t.Fatal(err)
	}
	le := mid.GetLastError()
	if mid.GetState() != leaseholdv1.JobState_JOB_STATE_LEASED || mid.GetAttempts() != 2 ||
		le.GetCode() != "PANIC" || !le.GetRetryable() || !strings.Contains(le.GetMessage(), "boom-42") {
		t.Fatalf("after the panic: state %s attempts %d last error %v", mid.GetState(), mid.GetAttempts(), le)
	}
	if strings.Contains(le.GetMessage(), "goroutine") || strings.Contains(le.GetMessage(), ".go:") {
		t.Fatalf("the reported panic carries a stack trace: %q", le.GetMessage())
	}
	close(finishSecond)
	if final := h.waitFinal(job.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job ended %s, want SUCCEEDED", final.GetState())
	}
}

func TestLeaseLossCancelsTheHandlerAndPublishesNothing(t *testing.T) {
	t.Parallel()
	for _, engine := range []struct {
		name     string
		postgres bool
	}{{"on SQLite", false}, {"on PostgreSQL", true}} {
		t.Run(engine.name, func(t *testing.T) {
			t.Parallel()
			clock := &fakeClock{}
			h := setup(t, setupOptions{postgres: engine.postgres, clock: clock})
			job := h.create("q", "slow", "x")

			firstStarted := make(chan struct{})
			firstCause := make(chan error, 1)
			firstCheckpointErr := make(chan error, 1)
			h.start(worker.Config{WorkerID: "w-lost", Queues: []string{"q"}, Capacity: 1, LeaseDuration: 2 * time.Second},
				func(w *worker.Worker) {
					w.Handle("slow", func(ctx context.Context, j *worker.Job) ([]byte, error) {
						if j.Token.Generation > 1 {
							return []byte("fresh"), nil
						}
						close(firstStarted)
						<-ctx.Done()
						firstCause <- context.Cause(ctx)
						firstCheckpointErr <- j.SaveCheckpoint(context.WithoutCancel(ctx), "too-late", nil)
						// A handler that ignores the loss and "succeeds": the
						// worker must drop this outcome.
						return []byte("stale"), nil
					})
				})

			recv(t, firstStarted, "the first attempt")
			// Cross the lease's expiry on the coordinator's clock: the next
			// heartbeat is answered LOST.
			clock.Advance(time.Hour)
			if cause := recv(t, firstCause, "the handler's context to end"); !errors.Is(cause, worker.ErrLeaseLost) {
				t.Fatalf("handler context cause %v, want ErrLeaseLost", cause)
			}
			if err := recv(t, firstCheckpointErr, "the late checkpoint"); !errors.Is(err, worker.ErrLeaseLost) {
				t.Fatalf("SaveCheckpoint after the loss returned %v, want ErrLeaseLost", err)
			}

			// The job is claimable again; generation 2 completes it.
			final := h.waitFinal(job.GetId())
			if final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "fresh" {
				t.Fatalf("job ended %s with result %q, want SUCCEEDED with the second generation's result", final.GetState(), final.GetResult())
			}
			for _, tok := range h.rec.tokensSent("Complete", job.GetId()) {
				if tok.GetLeaseGeneration() != 2 {
					t.Fatalf("Complete sent for lost generation %d", tok.GetLeaseGeneration())
				}
			}
			for _, m := range []string{"Retry", "Cancel", "Release", "SaveCheckpoint"} {
				if toks := h.rec.tokensSent(m, job.GetId()); len(toks) != 0 {
					t.Fatalf("%s sent for the lost lease: %v", m, toks)
				}
			}
			var succeeded int
			for _, ev := range h.events(job.GetId()) {
				if ev.GetType() != leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED {
					continue
				}
				succeeded++
				// The engines name the field differently (SQLite
				// "lease_generation", PostgreSQL "generation"); accept both.
				var data struct {
					LeaseGeneration int64 `json:"lease_generation"`
					Generation      int64 `json:"generation"`
				}
				if err := json.Unmarshal([]byte(ev.GetDataJson()), &data); err != nil {
					t.Fatalf("succeeded event data %q: %v", ev.GetDataJson(), err)
				}
				if max(data.LeaseGeneration, data.Generation) != 2 {
					t.Fatalf("succeeded event not from generation 2: %s", ev.GetDataJson())
				}
			}
			if succeeded != 1 {
				t.Fatalf("%d succeeded events, want 1", succeeded)
			}
		})
	}
}

func TestCancelRequestCancelsTheHandlerAndTheJob(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	job := h.create("q", "long", "x")

	started := make(chan struct{})
	cause := make(chan error, 1)
	h.start(worker.Config{Queues: []string{"q"}}, func(w *worker.Worker) {
		w.Handle("long", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		})
	})
	recv(t, started, "the handler to start")
	mid, err := h.client.Cancel(context.Background(), job.GetId(), "customer changed their mind")
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if mid.GetState() != leaseholdv1.JobState_JOB_STATE_LEASED || !mid.GetCancelRequested() {
		t.Fatalf("after CancelJob: state %s cancel_requested %v", mid.GetState(), mid.GetCancelRequested())
	}
	if c := recv(t, cause, "the handler's context to end"); !errors.Is(c, worker.ErrCancelRequested) {
		t.Fatalf("handler context cause %v, want ErrCancelRequested", c)
	}
	if final := h.waitFinal(job.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_CANCELLED {
		t.Fatalf("job ended %s, want CANCELLED", final.GetState())
	}
	if n := len(h.rec.tokensSent("Cancel", job.GetId())); n != 1 {
		t.Fatalf("the worker acknowledged %d times, want once", n)
	}
	if n := len(h.rec.tokensSent("Retry", job.GetId())); n != 0 {
		t.Fatalf("a cancelled attempt was reported as a failure %d times", n)
	}
}

func TestGracefulShutdownFinishesOrReleasesEverything(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	quick := h.create("q", "quick", "x")
	stuck := h.create("q", "stuck", "x")

	started := make(chan string, 2)
	finishQuick := make(chan struct{})
	stuckCause := make(chan error, 1)
	rw := h.start(worker.Config{Queues: []string{"q"}, Capacity: 3, ShutdownGrace: 500 * time.Millisecond}, func(w *worker.Worker) {
		w.Handle("quick", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- "quick"
			<-finishQuick
			return []byte("done"), nil
		})
		w.Handle("stuck", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			started <- "stuck"
			<-ctx.Done()
			stuckCause <- context.Cause(ctx)
			return nil, context.Cause(ctx)
		})
	})
	recv(t, started, "a handler to start")
	recv(t, started, "both handlers to start")

	stopped := make(chan error, 1)
	go func() { stopped <- rw.stop() }()
	// The quick handler finishes within the grace period and is completed;
	// the stuck one is cancelled when the grace period ends.
	close(finishQuick)
	if c := recv(t, stuckCause, "the stuck handler to be cancelled"); !errors.Is(c, worker.ErrShutdown) {
		t.Fatalf("stuck handler's cause %v, want ErrShutdown", c)
	}
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	// Jobs created after the shutdown find no taker.
	late := h.create("q", "quick", "late")

	if j, _ := h.client.Get(context.Background(), quick.GetId()); j.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("quick job is %s, want SUCCEEDED (finished within the grace period)", j.GetState())
	}
	j, _ := h.client.Get(context.Background(), stuck.GetId())
	if j.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED || j.GetAttempts() != 0 {
		t.Fatalf("stuck job is %s with %d attempts, want QUEUED with the attempt given back", j.GetState(), j.GetAttempts())
	}
	if n := len(h.rec.tokensSent("Release", stuck.GetId())); n != 1 {
		t.Fatalf("stuck job released %d times, want once", n)
	}
	resp, err := h.client.List(context.Background(), &leaseholdv1.ListJobsRequest{States: []leaseholdv1.JobState{leaseholdv1.JobState_JOB_STATE_LEASED}})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetJobs()) != 0 {
		t.Fatalf("%d jobs still leased after shutdown: %v", len(resp.GetJobs()), resp.GetJobs())
	}
	if j, _ := h.client.Get(context.Background(), late.GetId()); j.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("a job created after shutdown is %s, want QUEUED", j.GetState())
	}
}

func TestWorkerReconnectsAfterCoordinatorRestart(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	before := h.create("q", "echo", "before")

	inFlight := make(chan struct{})
	finishInFlight := make(chan struct{})
	// A lease long enough to outlive the restart on a loaded machine.
	h.start(worker.Config{Queues: []string{"q"}, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond, LeaseDuration: 10 * time.Second},
		func(w *worker.Worker) {
			w.Handle("echo", func(ctx context.Context, j *worker.Job) ([]byte, error) {
				return j.Payload, nil
			})
			w.Handle("spans-restart", func(ctx context.Context, j *worker.Job) ([]byte, error) {
				close(inFlight)
				select {
				case <-finishInFlight:
					return []byte("survived"), nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
		})
	if final := h.waitFinal(before.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
		t.Fatalf("job before restart ended %s", final.GetState())
	}
	spanning := h.create("q", "spans-restart", "x")
	recv(t, inFlight, "the long job to start")

	h.srv = testserver.Restart(t, h.srv)

	// The lease outlives the restart (it is in the database) and the
	// worker keeps renewing it, then reports through the new coordinator.
	close(finishInFlight)
	if final := h.waitFinal(spanning.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "survived" {
		t.Fatalf("job spanning the restart ended %s with %q", final.GetState(), final.GetResult())
	}
	after := h.create("q", "echo", "after")
	if final := h.waitFinal(after.GetId()); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "after" {
		t.Fatalf("job after restart ended %s with %q", final.GetState(), final.GetResult())
	}
}

// With --max-connection-age (the chart's default) the coordinator ends
// every connection after a while and the worker reconnects: a job running
// across several reconnects keeps its lease (renewed past its duration)
// and completes on its first attempt.
func TestWorkerLeasesSurviveConnectionAge(t *testing.T) {
	t.Parallel()
	serverLog := &testlog.Buffer{}
	h := setup(t, setupOptions{postgres: true, configure: func(c *coordinator.Config) {
		c.MaxConnectionAge = time.Second
		c.MaxConnectionAgeGrace = 300 * time.Millisecond
		c.Logger = serverLog.Logger(slog.LevelInfo)
	}})
	job := h.create("q", "long", "x")

	started := make(chan struct{})
	finish := make(chan struct{})
	h.start(worker.Config{Queues: []string{"q"}, ReconnectMin: 20 * time.Millisecond, ReconnectMax: 200 * time.Millisecond, LeaseDuration: 2 * time.Second},
		func(w *worker.Worker) {
			w.Handle("long", func(ctx context.Context, j *worker.Job) ([]byte, error) {
				close(started)
				select {
				case <-finish:
					return []byte("kept"), nil
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
			})
		})
	recv(t, started, "the job to start")
	first := h.rec.connects.Load()
	// Three more streams: the job has run through at least two aged-out
	// connections and longer than its 2s lease.
	deadline := time.Now().Add(waitTimeout)
	for h.rec.connects.Load() < first+3 {
		if time.Now().After(deadline) {
			t.Fatalf("the worker opened %d streams in %s; want %d (connections age out after 1s)", h.rec.connects.Load(), waitTimeout, first+3)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(finish)
	final := h.waitFinal(job.GetId())
	if final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "kept" || final.GetAttempts() != 1 {
		t.Fatalf("job ended %s with %q after %d attempts; want SUCCEEDED, \"kept\", 1 attempt (its lease survived the reconnects)",
			final.GetState(), final.GetResult(), final.GetAttempts())
	}
	// An aged-out stream is routine: no Warn per worker per connection age.
	for line := range strings.Lines(serverLog.String()) {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			t.Errorf("the coordinator logged an aged-out stream above Info: %s", line)
		}
	}
}

func TestEffectRunsOnceAcrossRetries(t *testing.T) {
	t.Parallel()
	for _, engine := range []struct {
		name     string
		postgres bool
	}{{"on SQLite", false}, {"on PostgreSQL", true}} {
		t.Run(engine.name, func(t *testing.T) {
			t.Parallel()
			h := setup(t, setupOptions{postgres: engine.postgres})
			h.fastRetries("payments")
			job := h.create("payments", "charge", "42.00")

			var charges, lookups atomic.Int32
			type attemptView struct {
				effects  []worker.Effect
				receipt  string
				unknown  *worker.UnknownEffectError
				callErrs []error
			}
			views := make(chan attemptView, 2)
			h.start(worker.Config{Queues: []string{"payments"}}, func(w *worker.Worker) {
				w.Handle("charge", func(ctx context.Context, j *worker.Job) ([]byte, error) {
					v := attemptView{effects: j.Effects}
					receipt, err := j.Effect(ctx, "charge-card", func(ctx context.Context) (string, []byte, error) {
						n := charges.Add(1)
						return fmt.Sprintf("pi_%d", n), []byte(fmt.Sprintf("receipt-%d", n)), nil
					})
					v.receipt = string(receipt)
					v.callErrs = append(v.callErrs, err)
					// A call whose outcome cannot be known is recorded
					// UNKNOWN and must be reconciled, not repeated.
					_, err = j.Effect(ctx, "send-receipt", func(ctx context.Context) (string, []byte, error) {
						lookups.Add(1)
						return "mail-1", nil, fmt.Errorf("smtp timeout: %w", worker.ErrEffectUnknown)
					})
					errors.As(err, &v.unknown)
					if v.unknown == nil && !errors.Is(err, worker.ErrEffectUnknown) {
						v.callErrs = append(v.callErrs, err)
					}
					views <- v
					if j.Attempt == 1 {
						return nil, errors.New("downstream hiccup after charging")
					}
					return receipt, nil
				})
			})

			first := recv(t, views, "attempt 1")
			second := recv(t, views, "attempt 2")
			final := h.waitFinal(job.GetId())

			if final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "receipt-1" {
				t.Fatalf("job ended %s with %q", final.GetState(), final.GetResult())
			}
			if n := charges.Load(); n != 1 {
				t.Fatalf("the card was charged %d times, want once", n)
			}
			if n := lookups.Load(); n != 1 {
				t.Fatalf("the unknown effect was called %d times, want once", n)
			}
			if first.receipt != "receipt-1" || second.receipt != "receipt-1" || first.callErrs[0] != nil || second.callErrs[0] != nil {
				t.Fatalf("receipts %q/%q errors %v/%v", first.receipt, second.receipt, first.callErrs, second.callErrs)
			}
			if first.unknown != nil || len(first.callErrs) != 1 {
				t.Fatalf("attempt 1 got %v / %v from a fresh effect", first.unknown, first.callErrs)
			}
			if second.unknown == nil || second.unknown.Effect.Status != worker.EffectUnknown ||
				second.unknown.Effect.ProviderOperationID != "mail-1" || second.unknown.Effect.Generation != 1 {
				t.Fatalf("attempt 2 did not get the unknown effect for reconciliation: %+v", second.unknown)
			}
			byKey := map[string]worker.Effect{}
			for _, e := range second.effects {
				byKey[e.Key] = e
			}
			if e := byKey["charge-card"]; e.Status != worker.EffectSucceeded || e.ProviderOperationID != "pi_1" || string(e.Result) != "receipt-1" {
				t.Fatalf("attempt 2's Job.Effects lacks the recorded charge: %+v", second.effects)
			}
			if len(first.effects) != 0 {
				t.Fatalf("attempt 1 saw effects %+v", first.effects)
			}
		})
	}
}

func TestCapacityIsNeverExceeded(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	const capacity, jobs = 3, 24
	ids := make([]string, jobs)
	for i := range ids {
		ids[i] = h.create("q", "count", fmt.Sprint(i)).GetId()
	}

	var current, peak atomic.Int32
	firstWave := make(chan struct{}, jobs)
	gate := make(chan struct{})
	h.start(worker.Config{Queues: []string{"q"}, Capacity: capacity}, func(w *worker.Worker) {
		w.Handle("count", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			n := current.Add(1)
			defer current.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			firstWave <- struct{}{}
			<-gate
			return nil, nil
		})
	})
	// Hold the first handlers until capacity is full, so the rest run while
	// completions and new grants interleave.
	for range capacity {
		recv(t, firstWave, "the first wave of handlers")
	}
	close(gate)
	for _, id := range ids {
		if final := h.waitFinal(id); final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("job %s ended %s", id, final.GetState())
		}
	}
	if p := peak.Load(); p != capacity {
		t.Fatalf("peak concurrent handlers %d, want exactly the capacity %d", p, capacity)
	}
}

func TestCheckpointFromAnAttemptIsSeenByTheNext(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	h.fastRetries("q")
	job := h.create("q", "resumable", "x")

	seen := make(chan *worker.Checkpoint, 2)
	h.start(worker.Config{Queues: []string{"q"}}, func(w *worker.Worker) {
		w.Handle("resumable", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			seen <- j.Checkpoint
			if j.Attempt == 1 {
				if err := j.SaveCheckpoint(ctx, "downloaded", []byte("offset=1024")); err != nil {
					return nil, worker.NonRetryable(err)
				}
				return nil, worker.WithCode("TRANSIENT", errors.New("transcoder unavailable"))
			}
			return []byte("resumed from " + j.Checkpoint.Phase), nil
		})
	})
	if c := recv(t, seen, "attempt 1"); c != nil {
		t.Fatalf("attempt 1 saw checkpoint %+v", c)
	}
	c := recv(t, seen, "attempt 2")
	if c == nil || c.Phase != "downloaded" || string(c.State) != "offset=1024" || c.Generation != 1 || c.ID == "" {
		t.Fatalf("attempt 2 saw checkpoint %+v", c)
	}
	final := h.waitFinal(job.GetId())
	if final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(final.GetResult()) != "resumed from downloaded" ||
		final.GetLastError().GetCode() != "TRANSIENT" {
		t.Fatalf("job ended %s with %q, last error %v", final.GetState(), final.GetResult(), final.GetLastError())
	}
}

func TestErrorClassificationReachesTheCoordinator(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	fatal := h.create("q", "fatal", "x")
	orphan := h.create("q", "nobody-handles-this", "x")

	h.start(worker.Config{Queues: []string{"q"}}, func(w *worker.Worker) {
		w.Handle("fatal", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			return nil, worker.NonRetryable(worker.WithCode("BAD_INPUT", errors.New("payload is not an email address")))
		})
	})
	final := h.waitFinal(fatal.GetId())
	if final.GetState() != leaseholdv1.JobState_JOB_STATE_FAILED || final.GetAttempts() != 1 ||
		final.GetLastError().GetCode() != "BAD_INPUT" || final.GetLastError().GetRetryable() ||
		final.GetLastError().GetMessage() != "payload is not an email address" {
		t.Fatalf("non-retryable failure ended %s after %d attempts with %v", final.GetState(), final.GetAttempts(), final.GetLastError())
	}
	// No handler for the kind: a retryable failure (a newer worker may
	// know it), not a crash and not a silent drop.
	j := h.waitJob(orphan.GetId(), "failed once", func(j *leaseholdv1.Job) bool { return j.GetLastError() != nil })
	if j.GetLastError().GetCode() != "NO_HANDLER" || !j.GetLastError().GetRetryable() {
		t.Fatalf("unhandled kind reported %v", j.GetLastError())
	}
}

func TestRunRefusesABadSetup(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	w, err := worker.New(h.conn, worker.Config{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "no handlers") {
		t.Fatalf("Run without handlers returned %v", err)
	}
	w2, err := worker.New(h.conn, worker.Config{Queues: []string{"q"}})
	if err != nil {
		t.Fatal(err)
	}
	w2.Handle("k", func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	w2.Handle("k", func(context.Context, *worker.Job) ([]byte, error) { return nil, nil })
	if err := w2.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "already registered") {
		t.Fatalf("Run with a duplicate handler returned %v", err)
	}
	if _, err := worker.New(h.conn, worker.Config{}); err == nil {
		t.Fatal("New accepted a config without queues")
	}
}

func TestHeartbeatsKeepALongHandlersLease(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	h := setup(t, setupOptions{clock: clock})
	job := h.create("q", "long", "x")

	const lease = 10 * time.Second
	started := make(chan struct{})
	finish := make(chan struct{})
	// Heartbeat every 500ms of real time; the test moves the coordinator's
	// clock by most of a lease after each renewal it observes, so only
	// renewals keep the lease alive, while a slow machine still has seconds
	// of real time to deliver each one.
	h.start(worker.Config{Queues: []string{"q"}, LeaseDuration: lease, HeartbeatFraction: 0.05}, func(w *worker.Worker) {
		w.Handle("long", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			close(started)
			select {
			case <-finish:
				return []byte("done"), nil
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		})
	})
	recv(t, started, "the handler to start")
	for round := range 3 {
		clock.Advance(6 * time.Second)
		renewedFrom := clock.Now()
		h.waitJob(job.GetId(), fmt.Sprintf("renewed after advance %d", round+1), func(j *leaseholdv1.Job) bool {
			return !j.GetLease().GetExpiresAt().AsTime().Before(renewedFrom.Add(lease))
		})
	}
	// 18s of coordinator time have passed on a 10s lease.
	close(finish)
	final := h.waitFinal(job.GetId())
	if final.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || final.GetAttempts() != 1 || final.GetLease().GetGeneration() != 1 {
		t.Fatalf("job ended %s after %d attempts (generation %d), want SUCCEEDED on its first lease",
			final.GetState(), final.GetAttempts(), final.GetLease().GetGeneration())
	}
}

func TestShutdownNeverReleasesALostLease(t *testing.T) {
	t.Parallel()
	clock := &fakeClock{}
	h := setup(t, setupOptions{clock: clock})
	job := h.create("q", "slow", "x")

	graceOver := make(chan struct{}, 1)
	logger := testLogger(t)
	cfg := worker.Config{
		Queues: []string{"q"}, Capacity: 1, LeaseDuration: 2 * time.Second, ShutdownGrace: time.Nanosecond,
		Logger: slog.New(&messageHook{Handler: logger.Handler(), msg: "grace period over", hit: graceOver}),
	}
	started := make(chan struct{})
	lost := make(chan error, 1)
	proceed := make(chan struct{})
	rw := h.start(cfg, func(w *worker.Worker) {
		w.Handle("slow", func(ctx context.Context, j *worker.Job) ([]byte, error) {
			close(started)
			<-ctx.Done()
			lost <- context.Cause(ctx)
			<-proceed
			return nil, context.Cause(ctx)
		})
	})
	recv(t, started, "the handler to start")
	clock.Advance(time.Hour)
	if c := recv(t, lost, "the lease loss"); !errors.Is(c, worker.ErrLeaseLost) {
		t.Fatalf("cause %v, want ErrLeaseLost", c)
	}
	stopped := make(chan error, 1)
	go func() { stopped <- rw.stop() }()
	// The grace period ends while the handler still runs on its lost lease.
	recv(t, graceOver, "the grace period to end")
	close(proceed)
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Fatalf("Run returned %v", err)
	}
	for _, m := range []string{"Release", "Retry", "Complete", "Cancel"} {
		if toks := h.rec.tokensSent(m, job.GetId()); len(toks) != 0 {
			t.Fatalf("%s sent for a lost lease during shutdown: %v", m, toks)
		}
	}
}

// messageHook signals hit when a log record with message msg is handled:
// a barrier on the worker's internal progress that needs no sleeps.
type messageHook struct {
	slog.Handler
	msg string
	hit chan<- struct{}
}

func (m *messageHook) Handle(ctx context.Context, r slog.Record) error {
	if strings.Contains(r.Message, m.msg) {
		select {
		case m.hit <- struct{}{}:
		default:
		}
	}
	return m.Handler.Handle(ctx, r)
}

func (m *messageHook) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &messageHook{Handler: m.Handler.WithAttrs(attrs), msg: m.msg, hit: m.hit}
}

func (m *messageHook) WithGroup(name string) slog.Handler {
	return &messageHook{Handler: m.Handler.WithGroup(name), msg: m.msg, hit: m.hit}
}
