package worker_test

import (
	"context"
	"errors"
	"log"
	"os"
	"os/signal"
	"time"

	"github.com/leasehold/leasehold/worker"
)

// The ten-line worker: connect, register a handler per job kind, run until
// interrupted (then running handlers get the grace period to finish).
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	conn, err := worker.Dial("127.0.0.1:7400", worker.DialConfigFromEnv(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	w, err := worker.New(conn, worker.Config{Queues: []string{"emails"}})
	if err != nil {
		log.Fatal(err)
	}
	w.Handle("send-welcome", func(ctx context.Context, job *worker.Job) ([]byte, error) {
		log.Printf("sending welcome email to %s (attempt %d)", job.Payload, job.Attempt)
		return []byte("sent"), nil
	})
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}

// Classify failures: plain errors are retried with backoff, NonRetryable
// ends the job FAILED, RetryAfter honours a provider's Retry-After, and
// WithCode lets queue policies and operators tell failures apart.
func ExampleHandler_errors() {
	var errBadAddress = errors.New("malformed address")
	handler := func(ctx context.Context, job *worker.Job) ([]byte, error) {
		switch string(job.Payload) {
		case "":
			return nil, worker.NonRetryable(worker.WithCode("BAD_INPUT", errBadAddress))
		case "rate-limited@example.com":
			return nil, worker.RetryAfter(worker.WithCode("HTTP_429", errors.New("rate limited")), 30*time.Second)
		}
		return nil, nil
	}
	_ = worker.Handler(handler)
}

// Resume from the last checkpoint and run an external call at most once
// across attempts through the effect ledger.
func ExampleJob_Effect() {
	handler := func(ctx context.Context, job *worker.Job) ([]byte, error) {
		if job.Checkpoint == nil || job.Checkpoint.Phase != "charged" {
			receipt, err := job.Effect(ctx, "charge-card", func(ctx context.Context) (string, []byte, error) {
				// Call the payment provider here; return its operation id.
				return "pi_123", []byte("receipt-123"), nil
			})
			var unknown *worker.UnknownEffectError
			if errors.As(err, &unknown) {
				// An earlier attempt crashed mid-call: ask the provider
				// what happened to unknown.Effect.ProviderOperationID.
				return nil, worker.NonRetryable(err)
			}
			if err != nil {
				return nil, err
			}
			if err := job.SaveCheckpoint(ctx, "charged", receipt); err != nil {
				return nil, err
			}
		}
		return []byte("done"), nil
	}
	_ = worker.Handler(handler)
}

// Tell why a handler's context ended.
func ExampleHandler_cancellation() {
	handler := func(ctx context.Context, job *worker.Job) ([]byte, error) {
		select {
		case <-time.After(time.Minute): // the real work
			return nil, nil
		case <-ctx.Done():
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, worker.ErrCancelRequested):
				// Returning an error acknowledges: the job ends CANCELLED.
				return nil, cause
			case errors.Is(cause, worker.ErrLeaseLost):
				// Someone else may run the job now; nothing is published.
				return nil, cause
			default: // worker.ErrShutdown: the lease is released.
				return nil, cause
			}
		}
	}
	_ = worker.Handler(handler)
}
