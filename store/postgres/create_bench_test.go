package postgres_test

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// BenchmarkCreateLatency times CreateJobs calls: one job per call from one
// caller (idle), one job per call from 16 callers at once (the create
// committer batches them), and 100 jobs per call from 4 callers
// (throughput). It reports the p50 and p99 of a call and jobs per second.
func BenchmarkCreateLatency(b *testing.B) {
	for _, tc := range []struct {
		name           string
		callers, batch int
	}{
		{"Idle", 1, 1},
		{"Callers16", 16, 1},
		{"Batch100Callers4", 4, 100},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s, err := postgres.Open(b.Context(), postgres.Config{DatabaseURL: pgtest.MigratedSchema(b), MaxConns: 8})
			if err != nil {
				b.Fatalf("open: %v", err)
			}
			b.Cleanup(func() { _ = s.Close() })
			reqs := make([]store.CreateRequest, tc.batch)
			for i := range reqs {
				reqs[i] = store.CreateRequest{Spec: store.JobSpec{Queue: "q", Kind: "k", Payload: []byte(`{"n":1}`)}}
			}
			p := store.CreateJobsParams{Tenant: "t", Requests: reqs}
			if _, err := s.CreateJobs(b.Context(), p); err != nil {
				b.Fatal(err)
			}
			var (
				mu   sync.Mutex
				lats []time.Duration
				wg   sync.WaitGroup
				next = make(chan struct{})
			)
			b.ResetTimer()
			start := time.Now()
			for range tc.callers {
				wg.Go(func() {
					var mine []time.Duration
					for range next {
						t0 := time.Now()
						if _, err := s.CreateJobs(b.Context(), p); err != nil {
							b.Error(err)
						}
						mine = append(mine, time.Since(t0))
					}
					mu.Lock()
					lats = append(lats, mine...)
					mu.Unlock()
				})
			}
			for range b.N {
				next <- struct{}{}
			}
			close(next)
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			slices.Sort(lats)
			b.ReportMetric(float64(lats[len(lats)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lats[len(lats)*99/100].Microseconds()), "p99-µs")
			b.ReportMetric(float64(b.N*tc.batch)/elapsed.Seconds(), "jobs/s")
		})
	}
}
