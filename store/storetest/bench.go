package storetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Bench runs the store benchmarks against one engine. open returns a fresh,
// migrated, empty store for each benchmark and closes it when b ends.
//
// Each benchmark measures one store operation end to end (validation, SQL,
// commit) on the engine's own clock. Numbers are per job, so the batch
// variants compare directly with the single ones: run `make bench` and feed
// bench.txt to benchstat for medians and confidence intervals.
func Bench(b *testing.B, open func(b *testing.B) store.Store) {
	b.Run("CreateJob", func(b *testing.B) {
		s := open(b)
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			benchCreate(b, ctx, s, 1, "")
		}
	})
	b.Run("CreateJobIdempotent", func(b *testing.B) {
		s := open(b)
		ctx := context.Background()
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			benchCreate(b, ctx, s, 1, fmt.Sprintf("req-%d", i))
		}
	})
	b.Run("BatchCreate100PerJob", func(b *testing.B) {
		s := open(b)
		ctx := context.Background()
		b.ReportAllocs()
		n := 0
		for b.Loop() {
			benchCreate(b, ctx, s, 100, "")
			n += 100
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/job")
	})
	for _, batch := range []int{1, 10} {
		b.Run(fmt.Sprintf("ClaimComplete/batch=%d", batch), func(b *testing.B) {
			benchClaimed(b, open, batch, func(ctx context.Context, s store.Store, claimed []store.ClaimedJob) {
				for _, c := range claimed {
					if _, err := s.Complete(ctx, store.CompleteParams{Tenant: "bench", Token: c.Token}); err != nil {
						b.Fatalf("complete: %v", err)
					}
				}
			})
		})
	}
	// ClaimReports/batch=n is the shape of a drain under load: a claim of
	// n jobs, then their n completions in one ApplyReports batch (what the
	// group committer makes of concurrent reports).
	for _, batch := range []int{8, 32} {
		b.Run(fmt.Sprintf("ClaimReports/batch=%d", batch), func(b *testing.B) {
			benchClaimed(b, open, batch, func(ctx context.Context, s store.Store, claimed []store.ClaimedJob) {
				reports := make([]store.Report, len(claimed))
				for i, c := range claimed {
					reports[i] = store.Report{Kind: store.ReportComplete, Tenant: "bench", Token: c.Token}
				}
				res, err := s.ApplyReports(ctx, reports)
				if err != nil {
					b.Fatalf("apply reports: %v", err)
				}
				for _, r := range res {
					if r.Err != nil {
						b.Fatalf("complete: %v", r.Err)
					}
				}
			})
		})
	}
	b.Run("Renew100Leases", func(b *testing.B) {
		s := open(b)
		ctx := context.Background()
		benchCreate(b, ctx, s, 100, "")
		claimed, err := s.Claim(ctx, store.ClaimParams{
			Tenant: "bench", Worker: "bench-worker", Queues: []string{"bench"}, Max: 100, LeaseDuration: time.Hour,
		})
		if err != nil || len(claimed) != 100 {
			b.Fatalf("claim 100: got %d, %v", len(claimed), err)
		}
		tokens := make([]store.LeaseToken, len(claimed))
		for i, c := range claimed {
			tokens[i] = c.Token
		}
		b.ReportAllocs()
		for b.Loop() {
			res, err := s.Renew(ctx, store.RenewParams{Tenant: "bench", Tokens: tokens, LeaseDuration: time.Hour})
			if err != nil {
				b.Fatalf("renew: %v", err)
			}
			if res[0].Status != store.RenewRenewed {
				b.Fatalf("renew status %s", res[0].Status)
			}
		}
	})
}

// benchClaimed times claims of batch jobs, each followed by complete, on
// jobs created outside the timer (in big batches), so the measured loop is
// the claims and the completions only; every job must be claimed.
func benchClaimed(b *testing.B, open func(*testing.B) store.Store, batch int, complete func(context.Context, store.Store, []store.ClaimedJob)) {
	s := open(b)
	ctx := context.Background()
	b.StopTimer()
	total := b.N * batch
	for created := 0; created < total; created += store.BatchMaxItems {
		benchCreate(b, ctx, s, min(store.BatchMaxItems, total-created), "")
	}
	b.StartTimer()
	b.ReportAllocs()
	done := 0
	for range b.N {
		claimed, err := s.Claim(ctx, store.ClaimParams{
			Tenant: "bench", Worker: "bench-worker", Queues: []string{"bench"},
			Max: batch, LeaseDuration: time.Minute,
		})
		if err != nil {
			b.Fatalf("claim: %v", err)
		}
		complete(ctx, s, claimed)
		done += len(claimed)
	}
	if done != total {
		b.Fatalf("completed %d jobs, want %d", done, total)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(done), "ns/job")
}

func benchCreate(b *testing.B, ctx context.Context, s store.Store, n int, requestID string) {
	reqs := make([]store.CreateRequest, n)
	for i := range reqs {
		reqs[i] = store.CreateRequest{
			RequestID: requestID,
			Spec: store.JobSpec{
				Queue: "bench", Kind: "bench.job",
				Payload:  []byte(`{"n":1}`),
				Metadata: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
			},
		}
	}
	if _, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "bench", Requests: reqs}); err != nil {
		b.Fatalf("create %d: %v", n, err)
	}
}
