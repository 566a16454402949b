package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// A handler that calls a payment provider reports the provider's outages
// with a code the breaker policy of the jobs' dependency counts, and its
// own failures (a declined card) with one it does not: only the first
// kind opens the breaker that holds the other payment jobs back.
func ExampleWithCode_breaker() {
	ctx := context.Background()
	conn, err := worker.Dial("127.0.0.1:7400", worker.DialConfigFromEnv(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := worker.NewClient(conn)

	// Once, by an operator: HTTP_503 and TIMEOUT mean the provider is down.
	if _, err := client.UpdateBreakerPolicy(ctx, &leaseholdv1.BreakerPolicy{
		Dependency:        "payments-api",
		CountedErrorCodes: []string{"HTTP_503", "TIMEOUT"},
		OpenDuration:      durationpb.New(30 * time.Second),
	}); err != nil {
		log.Fatal(err)
	}
	// Producers name the dependency on each job.
	if _, _, err := client.Create(ctx, "payments", "charge", []byte(`{"order":42}`),
		&worker.CreateOptions{Dependency: "payments-api"}); err != nil {
		log.Fatal(err)
	}

	errDeclined := errors.New("card declined")
	charge := func(ctx context.Context, job *worker.Job) ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://payments.example.com/charge", nil)
		if err != nil {
			return nil, worker.NonRetryable(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, worker.WithCode("TIMEOUT", err)
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusServiceUnavailable:
			return nil, worker.WithCode("HTTP_503", fmt.Errorf("payment provider: %s", resp.Status))
		case http.StatusPaymentRequired:
			return nil, worker.NonRetryable(worker.WithCode("DECLINED", errDeclined))
		}
		return []byte(`"charged"`), nil
	}
	_ = worker.Handler(charge)
}
