package postgres_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// BenchmarkClaimAtDepth times one claim (of one job, as a worker with
// one free slot asks) with a queue holding N queued jobs, and after M jobs
// of the queue went through the table and finished (each a queued row
// updated to succeeded, as a completion does, leaving dead index entries
// for vacuum). docs/scaling.md has the figures.
//
// LEASEHOLD_BENCH_DEPTHS lists the N (default 10000); LEASEHOLD_BENCH_COMPLETED
// lists the M (default none), each measured with 10,000 queued jobs.
// Populating ten million rows takes minutes, so the defaults stay small.
func BenchmarkClaimAtDepth(b *testing.B) {
	// Each table is populated once, outside b.Run, whose function runs
	// again for each b.N the framework tries.
	for _, n := range benchCounts(b, "LEASEHOLD_BENCH_DEPTHS", "10000") {
		s, pool := scaleStore(b)
		insertJobs(b, pool, "q-", "queued", n)
		analyze(b, pool)
		b.Run(fmt.Sprintf("queued=%d", n), func(b *testing.B) { timeClaims(b, s, pool) })
	}
	for _, m := range benchCounts(b, "LEASEHOLD_BENCH_COMPLETED", "") {
		s, pool := scaleStore(b)
		insertJobs(b, pool, "c-", "queued", m)
		completeAll(b, pool)
		insertJobs(b, pool, "q-", "queued", 10_000)
		b.Run(fmt.Sprintf("queued=10000/completed=%d", m), func(b *testing.B) { timeClaims(b, s, pool) })
	}
}

func benchCounts(b *testing.B, env, def string) []int {
	b.Helper()
	v, ok := os.LookupEnv(env)
	if !ok {
		v = def
	}
	var out []int
	for f := range strings.SplitSeq(v, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			b.Fatalf("%s: %q is not a positive count", env, f)
		}
		out = append(out, n)
	}
	return out
}

func scaleStore(b *testing.B) (*postgres.Store, *pgxpool.Pool) {
	b.Helper()
	s, err := postgres.Open(b.Context(), postgres.Config{DatabaseURL: pgtest.MigratedSchema(b), MaxConns: 4})
	if err != nil {
		b.Fatalf("open: %v", err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s, postgres.Pool(s)
}

// scaleNow is the jobs' clock: every populated job is available before it.
var scaleNow = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// insertJobs adds n jobs of the benchmark queue in state, a million rows a
// statement.
func insertJobs(b *testing.B, pool *pgxpool.Pool, prefix, state string, n int) {
	b.Helper()
	const insert = `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, priority,
		created_at, available_at)
	SELECT 't1', $1 || lpad(g::text, 9, '0'), 'emails', 'k', $2, 5, 0,
	       $3::timestamptz - interval '1 day' + g * interval '1 microsecond',
	       $3::timestamptz - interval '1 day' + g * interval '1 microsecond'
	FROM generate_series($4::int, $5::int) g`
	start := time.Now()
	for lo := 1; lo <= n; lo += 1_000_000 {
		hi := min(lo+1_000_000-1, n)
		if _, err := pool.Exec(context.Background(), insert, prefix, state, scaleNow, lo, hi); err != nil {
			b.Fatalf("insert jobs %d-%d: %v", lo, hi, err)
		}
	}
	b.Logf("inserted %d %s jobs in %s", n, state, time.Since(start).Round(time.Millisecond))
}

// completeAll finishes every queued job, 100,000 rows a transaction, as
// completions do: an update of state, never a delete.
func completeAll(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	const finish = `UPDATE jobs SET state = 'succeeded', attempts = 1, lease_generation = 1,
		lease_owner = 'w', finished_at = $1
	WHERE (tenant, id) IN (SELECT tenant, id FROM jobs WHERE tenant = 't1' AND queue = 'emails'
		AND state = 'queued' ORDER BY priority DESC, available_at, id LIMIT 100000)`
	start := time.Now()
	for {
		tag, err := pool.Exec(context.Background(), finish, scaleNow)
		if err != nil {
			b.Fatalf("complete: %v", err)
		}
		if tag.RowsAffected() == 0 {
			break
		}
	}
	b.Logf("completed every job in %s", time.Since(start).Round(time.Millisecond))
}

func analyze(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if _, err := pool.Exec(context.Background(), "ANALYZE jobs"); err != nil {
		b.Fatalf("analyze: %v", err)
	}
}

// timeClaims claims one job per iteration and reports the latencies' p50
// and p99, with the server's autovacuum setting in the log.
func timeClaims(b *testing.B, s *postgres.Store, pool *pgxpool.Pool) {
	b.Helper()
	var autovacuum string
	if err := pool.QueryRow(context.Background(), "SHOW autovacuum").Scan(&autovacuum); err != nil {
		b.Fatalf("show autovacuum: %v", err)
	}
	b.Logf("autovacuum=%s", autovacuum)
	p := store.ClaimParams{Tenant: "t1", Worker: "w-1", Queues: []string{"emails"}, Max: 1, Now: scaleNow}
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		jobs, err := s.Claim(context.Background(), p)
		took = append(took, time.Since(start))
		if err != nil || len(jobs) != 1 {
			b.Fatalf("claim: %d jobs, %v", len(jobs), err)
		}
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
}
