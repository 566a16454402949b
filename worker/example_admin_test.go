package worker_test

import (
	"context"
	"fmt"
	"log"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// Replay every dead job of a queue once its dependency is fixed, page by
// page. Replays are idempotent, so running this twice creates nothing new.
func ExampleClient_ReplayDeadJob() {
	ctx := context.Background()
	conn, err := worker.Dial("127.0.0.1:7400", worker.DialConfigFromEnv(nil))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := worker.NewClient(conn)

	req := &leaseholdv1.ListDeadJobsRequest{Queue: "emails"}
	for {
		page, err := client.ListDeadJobs(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		for _, d := range page.GetDeadJobs() {
			job, already, err := client.ReplayDeadJob(ctx, d.GetJob().GetId(), "SMTP relay fixed")
			if err != nil {
				log.Fatal(err)
			}
			fmt.Println(d.GetJob().GetId(), "replayed as", job.GetId(), "already:", already)
		}
		if page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
}
