package e2e

import (
	"context"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// BenchmarkRoundTrip measures one job's whole life over gRPC on a real
// loopback socket: CreateJob, Claim, Complete — three unary calls, each a
// store transaction. It is what a producer plus a unary worker (grpcurl, the
// Node example) pay per job; compare with BenchmarkStore for the gRPC
// overhead.
func BenchmarkRoundTrip(b *testing.B) {
	for _, e := range []struct {
		name     string
		postgres bool
	}{{"sqlite", false}, {"postgres", true}} {
		b.Run(e.name, func(b *testing.B) {
			s := testserver.Start(b, testserver.Options{Postgres: e.postgres})
			c := newClients(s.Dial(b))
			ctx := context.Background()
			claim := &leaseholdv1.ClaimRequest{
				WorkerId: "bench-worker", Queues: []string{"bench"}, LeaseDuration: durationpb.New(time.Minute),
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{
					Job: &leaseholdv1.JobSpec{Queue: "bench", Kind: "bench.job", Payload: []byte(`{"n":1}`)},
				}); err != nil {
					b.Fatalf("create: %v", err)
				}
				res, err := c.workers.Claim(ctx, claim)
				if err != nil || len(res.GetJobs()) != 1 {
					b.Fatalf("claim: %d jobs, %v", len(res.GetJobs()), err)
				}
				if _, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: res.GetJobs()[0].GetToken()}); err != nil {
					b.Fatalf("complete: %v", err)
				}
			}
		})
	}
}
