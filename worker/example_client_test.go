package worker_test

import (
	"context"
	"fmt"
	"log"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// Create a job idempotently, then watch its events until it finishes.
func ExampleClient_Create() {
	ctx := context.Background()
	conn, err := worker.Dial("127.0.0.1:7400", worker.DialConfigFromEnv(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := worker.NewClient(conn)

	job, replayed, err := client.Create(ctx, "emails", "send-welcome", []byte("ada@example.com"),
		&worker.CreateOptions{RequestID: "signup-42", MaxAttempts: 5})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("job", job.GetId(), "replayed:", replayed)

	err = client.Watch(ctx, job.GetId(), func(ev *leaseholdv1.Event) error {
		fmt.Println(ev.GetSequence(), ev.GetType())
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
}
