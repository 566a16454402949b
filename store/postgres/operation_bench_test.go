package postgres_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// BenchmarkReplayChunk measures one replay chunk alone: its transaction's
// time and the WAL it writes per replayed job (the burst that live commits
// queue behind). LEASEHOLD_BENCH_OPERATION_CHUNK sets the chunk (1,000).
// The WAL position is the cluster's, so another client's writes can only
// add to a chunk's figure: the smallest and the median are reported.
func BenchmarkReplayChunk(b *testing.B) {
	chunk := 1000
	if v := os.Getenv("LEASEHOLD_BENCH_OPERATION_CHUNK"); v != "" {
		var err error
		if chunk, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	const chunks = 20
	url := pgtest.MigratedSchema(b)
	s, err := postgres.Open(b.Context(), postgres.Config{DatabaseURL: url, MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	pool := postgres.Pool(s)
	ctx := b.Context()
	if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO jobs (tenant, id, queue, kind, payload, priority, state, attempts,
		max_attempts, created_at, available_at, finished_at, last_error_code, last_error_message, last_error_retryable)
	SELECT 'default', gen_random_uuid()::text, 'poisoned', 'bench.poisoned', '\x7b7d', 0, 'dead', 1, 1,
		now() - interval '1 hour', now() - interval '1 hour', now() - interval '30 minutes', 'UPSTREAM_DOWN', 'upstream unavailable', true
	FROM generate_series(1, %d)`, chunk*chunks*(b.N+1))); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		b.Fatal(err)
	}
	f, err := store.ParseJobFilter("queue = poisoned")
	if err != nil {
		b.Fatal(err)
	}
	op, err := s.StartOperation(ctx, store.StartOperationParams{Tenant: "default", Kind: store.OperationReplay,
		Filter: f, FilterText: "queue = poisoned", Reason: "bench", Actor: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := s.ClaimOperation(ctx, store.ClaimOperationParams{Owner: "bench", LeaseTTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	lsn := func() int64 {
		var n int64
		if err := pool.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n
	}
	var took []time.Duration
	var wal []int64
	b.ResetTimer()
	for range b.N {
		for range chunks {
			w, start := lsn(), time.Now()
			res, err := s.RunOperationChunk(ctx, store.RunChunkParams{Tenant: "default", ID: op.ID, Owner: "bench",
				LeaseTTL: time.Hour, Limit: chunk})
			took, wal = append(took, time.Since(start)), append(wal, lsn()-w)
			if err != nil {
				b.Fatal(err)
			}
			if res.Rows.Acted != int64(chunk) {
				b.Fatalf("chunk acted on %d, want %d", res.Rows.Acted, chunk)
			}
		}
	}
	b.StopTimer()
	slices.Sort(took)
	slices.Sort(wal)
	b.ReportMetric(float64(took[len(took)/2])/float64(time.Millisecond), "ms/chunk")
	b.ReportMetric(float64(wal[0])/float64(chunk), "min_wal_B/job")
	b.ReportMetric(float64(wal[len(wal)/2])/float64(chunk), "wal_B/job")
}
