package postgres_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// explainPlan returns PostgreSQL's plan for query with args, and fails the
// test if the plan scans the jobs table sequentially.
func explainPlan(t *testing.T, pool *pgxpool.Pool, what, query string, args ...any) string {
	t.Helper()
	rows, err := pool.Query(t.Context(), "EXPLAIN "+query, args...)
	if err != nil {
		t.Fatalf("explain the %s: %v", what, err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("explain the %s: %v", what, err)
	}
	text := strings.Join(plan, "\n")
	t.Logf("%s plan:\n%s", what, text)
	if strings.Contains(text, "Seq Scan on jobs") {
		t.Fatalf("the %s scans the jobs table sequentially:\n%s", what, text)
	}
	return text
}

// TestClaimUsesIndexAtScale plans the exact statement Claim runs on a table
// with 100,000 queued jobs in the claimed queue and many more finished,
// leased and other-queue rows, and fails if PostgreSQL would scan the jobs
// table sequentially: a claim must stay O(log n) at millions of rows.
func TestClaimUsesIndexAtScale(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	pool := postgres.Pool(s)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	// 100,000 queued jobs in the claimed queue, 120,000 finished ones in
	// the same queue, 20,000 queued in another queue and 20,000 of another
	// tenant, 1,000 leased (half expired).
	const insert = `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, priority,
		created_at, available_at, finished_at, lease_owner, lease_generation, lease_expires_at, attempts)
	SELECT $1, $2 || g, $3, 'k', $4, 5, g % 7, $5::timestamptz - g * interval '1 second',
	       $5::timestamptz - g * interval '1 second',
	       CASE WHEN $4 IN ('succeeded', 'failed', 'cancelled', 'dead') THEN $5::timestamptz - g * interval '1 second' END,
	       CASE WHEN $4 = 'leased' THEN 'w' ELSE '' END,
	       CASE WHEN $4 = 'leased' THEN 1 ELSE 0 END,
	       CASE WHEN $4 = 'leased' THEN $5::timestamptz + (g % 2 * 2 - 1) * interval '1 minute' END,
	       CASE WHEN $4 = 'queued' THEN 0 ELSE 1 END
	FROM generate_series(1, $6::int) g`
	for _, r := range []struct {
		tenant, prefix, queue, state string
		n                            int
	}{
		{"t1", "q-", "emails", "queued", 100_000},
		{"t1", "s-", "emails", "succeeded", 200_000},
		{"t1", "d-", "emails", "dead", 50_000},
		{"t1", "l-", "emails", "leased", 1_000},
		{"t1", "o-", "reports", "queued", 50_000},
		{"t2", "x-", "emails", "queued", 20_000},
	} {
		if _, err := pool.Exec(ctx, insert, r.tenant, r.prefix, r.queue, r.state, now, r.n); err != nil {
			t.Fatalf("insert %d %s jobs: %v", r.n, r.state, err)
		}
	}
	if _, err := pool.Exec(ctx, "ANALYZE jobs"); err != nil {
		t.Fatalf("analyze: %v", err)
	}

	// The arguments Claim passes for a claim of 10 from two queues.
	explain := func(what, query string, args ...any) string {
		t.Helper()
		return explainPlan(t, pool, what, query, args...)
	}
	lease := int64(30 * time.Second)
	text := explain("claim query", postgres.ClaimQuery,
		"t1", []string{"emails", "reports"}, []int32{10, 10}, []int64{lease, lease}, []int64{lease, lease},
		[]string{"worker-1", "worker-2"}, []int64{0, 0}, now, 2, "",
		[]int32{10, 10}, []int32{-1, -1}, []string{}, []string{}, []int32{})
	if !strings.Contains(text, "Index Scan using jobs_claim_idx") {
		t.Errorf("the claim query does not walk jobs_claim_idx in order:\n%s", text)
	}
	// The breaker gate is read once per statement (an InitPlan), not once
	// per candidate row; and a half-open probe claim walks the same index.
	if !strings.Contains(text, "InitPlan") {
		t.Errorf("the claim query does not read the breaker gate once per statement:\n%s", text)
	}
	text = explain("plain claim query", postgres.ClaimPlainQuery,
		"t1", []string{"emails", "reports"}, []int32{10, 10}, []int64{lease, lease}, []int64{lease, lease},
		[]string{"worker-1", "worker-2"}, []int64{0, 0}, now, 2)
	if !strings.Contains(text, "Index Scan using jobs_claim_idx") || !strings.Contains(text, "InitPlan") {
		t.Errorf("the plain claim query does not walk jobs_claim_idx in order with the breaker gate read once:\n%s", text)
	}
	text = explain("probe claim query", postgres.ClaimQuery,
		"t1", []string{"emails"}, []int32{2}, []int64{lease}, []int64{lease},
		[]string{"worker-1", "worker-2"}, []int64{0, 0}, now, 2, "payments-api",
		[]int32{2}, []int32{-1}, []string{}, []string{}, []int32{})
	if !strings.Contains(text, "Index Scan using jobs_dependency_claim_idx") {
		t.Errorf("the probe claim query does not walk jobs_dependency_claim_idx in order:\n%s", text)
	}
	// The reaper finds expired leases, and the earliest expiry, through the
	// leased index, never the table.
	for what, q := range map[string]string{"lock-expired query": postgres.LockExpiredQuery, "next-expiry query": postgres.NextExpiryQuery} {
		args := []any{now, 100}
		if q == postgres.NextExpiryQuery {
			args = nil
		}
		if text := explain(what, q, args...); !strings.Contains(text, "jobs_leased_idx") {
			t.Errorf("the %s does not use jobs_leased_idx:\n%s", what, text)
		}
	}

	// And the claim itself hands out the highest priority, oldest jobs.
	got, err := s.Claim(ctx, store.ClaimParams{Tenant: "t1", Worker: "worker-1", Queues: []string{"emails"}, Max: 3, Now: now})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(got) != 3 {
		t.Fatalf("claimed %d jobs, want 3", len(got))
	}
	for _, c := range got {
		if c.Job.Priority != 6 || c.Job.State != store.JobStateLeased {
			t.Errorf("claimed job %s with priority %d in state %s, want priority 6 leased", c.Job.ID, c.Job.Priority, c.Job.State)
		}
	}
	// Priority 6 jobs are g = 6, 13, 20, ...; the oldest (largest g) come
	// first, so the first one is the largest g ≡ 6 (mod 7) ≤ 100,000.
	if want := "q-99994"; got[0].Job.ID != want {
		t.Errorf("first claimed job is %s, want %s (highest priority, then oldest)", got[0].Job.ID, want)
	}
}

// TestLeaseStatementsProbeByKey plans the lease-bound statements of a report
// batch (lock, leave, renew) on the table a drain leaves behind before
// vacuum: 20,000 jobs that were all leased once, 64 still leased, never
// analyzed, so jobs_leased_idx holds 20,000 entries of which 19,936 are
// dead. Each token must be one primary-key probe: a plan through the leased
// index reads every dead entry and its heap page, per batch.
func TestLeaseStatementsProbeByKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	pool := postgres.Pool(s)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const jobs, held = 20_000, 64
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, attempts,
		created_at, available_at, lease_owner, lease_generation, leased_at, lease_expires_at)
	SELECT 't1', 'j-' || g, 'emails', 'k', 'leased', 5, 1, $1, $1, 'w', 1, $1, $1::timestamptz + interval '1 hour'
	FROM generate_series(1, $2::int) g`, now, jobs); err != nil {
		t.Fatalf("insert %d leased jobs: %v", jobs, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE jobs SET state = 'succeeded', lease_expires_at = NULL, finished_at = $1
	WHERE substr(id, 3)::int > $2::int`, now, held); err != nil {
		t.Fatalf("finish all but %d jobs: %v", held, err)
	}

	const n = 32
	tenants, ids, owners := make([]string, n), make([]string, n), make([]string, n)
	gens, nows := make([]int64, n), make([]time.Time, n)
	states, codes := make([]string, n), make([]string, n)
	refunds, nevents := make([]int32, n), make([]int32, n)
	flags, results := make([]bool, n), make([][]byte, n)
	for i := range n {
		tenants[i], ids[i], owners[i], gens[i], nows[i] = "t1", fmt.Sprint("j-", i+1), "w", 1, now
		states[i], nevents[i] = "succeeded", 1
	}
	for what, args := range map[string][]any{
		postgres.LockLeasesQuery: {tenants, ids, owners, gens, nows},
		postgres.LeaveLeasesQuery: {tenants, ids, owners, gens, nows, states, nows, nows, refunds, results,
			flags, codes, codes, flags, nevents, flags, codes, flags},
		postgres.RenewLeasesQuery: {tenants, ids, owners, gens, nows, nows},
	} {
		text := explainPlan(t, pool, "lease statement", what, args...)
		if strings.Contains(text, "jobs_leased_idx") || !strings.Contains(text, "Index Scan using jobs_pkey on jobs") {
			t.Errorf("a lease statement does not probe jobs by primary key:\n%s\n%s", what, text)
		}
	}
}

// TestClaimsAreNeverJITCompiled runs the claim statement through the
// store's own connections with JIT made as eager as it gets, and fails if
// PostgreSQL compiles it: a claim's LIMIT comes from its arguments, so at
// ten million queued jobs the planner's estimate crossed jit_above_cost
// and each claim spent ~100 ms compiling (docs/scaling.md).
func TestClaimsAreNeverJITCompiled(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	pool := postgres.Pool(s)
	var jit string
	if err := pool.QueryRow(ctx, "SHOW jit").Scan(&jit); err != nil {
		t.Fatal(err)
	}
	if jit != "off" {
		t.Errorf("the store's sessions run with jit = %s, want off", jit)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, created_at, available_at)
	SELECT 't1', 'j-' || g, 'emails', 'k', 'queued', 5, $1::timestamptz - interval '1 hour', $1::timestamptz - interval '1 hour'
	FROM generate_series(1, 100) g`, now); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "SET LOCAL jit_above_cost = 0"); err != nil {
		t.Fatal(err)
	}
	lease := int64(30 * time.Second)
	rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE) "+postgres.ClaimPlainQuery,
		"t1", []string{"emails"}, []int32{1}, []int64{lease}, []int64{lease}, []string{"w"}, []int64{0}, now, 1)
	if err != nil {
		t.Fatal(err)
	}
	var plan strings.Builder
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan.WriteString(line + "\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(plan.String(), "JIT:") {
		t.Errorf("the claim was JIT-compiled:\n%s", plan.String())
	}
}
