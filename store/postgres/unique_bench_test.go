package postgres_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// BenchmarkUniqueBatchCreate compares CreateJobs batches of 100 jobs:
// plain (no unique keys), unique (every job has its own unique key: the
// ON CONFLICT insert against the partial unique index) and unique_period
// (a period as well: a unique_keys record per job too). Each iteration
// runs one batch of each, in turn (the order rotating), on one store and
// table, timing each apart, so that the load of a shared machine reaches
// the three alike. It reports the median ns/job of each and the median
// over iterations of each iteration's unique/plain and period/plain: the
// issue bounds unique/plain at 1.2. Medians, because a load spike on a
// shared machine stretches single batches by several times.
func BenchmarkUniqueBatchCreate(b *testing.B) {
	const batch = 100
	modes := []string{"plain", "unique", "unique_period"}
	s, err := postgres.Open(b.Context(), postgres.Config{DatabaseURL: pgtest.MigratedSchema(b), MaxConns: 4})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	b.Cleanup(func() { _ = s.Close() })
	ctx := b.Context()
	spent := make([][]time.Duration, len(modes))
	var uniqueRatio, periodRatio []float64
	reqs := make([]store.CreateRequest, batch)
	n := 0
	b.ReportAllocs()
	for iter := 0; b.Loop(); iter++ {
		took := make([]time.Duration, len(modes))
		for k := range modes {
			m := (iter + k) % len(modes)
			mode := modes[m]
			for i := range reqs {
				reqs[i] = store.CreateRequest{Spec: store.JobSpec{
					Queue: "bench", Kind: "bench.job", Payload: []byte(`{"n":1}`),
					Metadata: map[string]string{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
				}}
				switch mode {
				case "unique":
					reqs[i].Unique = &store.UniqueOptions{Key: fmt.Sprintf("key-%d", n+i)}
				case "unique_period":
					reqs[i].Unique = &store.UniqueOptions{Key: fmt.Sprintf("key-%d", n+i), Period: time.Hour}
				}
			}
			start := time.Now()
			res, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "bench", Requests: reqs})
			took[m] = time.Since(start)
			spent[m] = append(spent[m], took[m])
			if err != nil {
				b.Fatalf("create %d (%s): %v", batch, mode, err)
			}
			if res[batch-1].Duplicate {
				b.Fatal("a fresh key was answered as a duplicate")
			}
			n += batch
		}
		uniqueRatio = append(uniqueRatio, float64(took[1])/float64(took[0]))
		periodRatio = append(periodRatio, float64(took[2])/float64(took[0]))
	}
	for m, mode := range modes {
		b.ReportMetric(float64(median(spent[m]))/batch, mode+"-ns/job")
	}
	b.ReportMetric(median(uniqueRatio), "unique/plain")
	b.ReportMetric(median(periodRatio), "period/plain")
}

func median[T time.Duration | float64](xs []T) T {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}
