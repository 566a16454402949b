package postgres_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestRenewalsAreHOTUpdates renews 200 leases twice and asks PostgreSQL how
// many of those row updates were heap-only (HOT): a renewal writes only the
// lease expiry, so no index of jobs may hold that column, or each renewal
// writes a new entry into every index. The test's table leaves nine tenths
// of each page free, so that room never decides: every renewal should be
// HOT, and 90 % is asked for.
func TestRenewalsAreHOTUpdates(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	pool := postgres.Pool(s)
	now := time.Now().UTC().Truncate(time.Millisecond)

	const n = 200
	if _, err := pool.Exec(ctx, `ALTER TABLE jobs_live SET (fillfactor = 10)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, created_at,
		available_at, leased_at, lease_owner, lease_generation, lease_expires_at, attempts)
	SELECT 't1', 'hot-' || g, 'emails', 'k', 'leased', 5, $1, $1, $1, 'w1', 1, $1::timestamptz + interval '30 seconds', 1
	FROM generate_series(1, $2::int) g`, now, n); err != nil {
		t.Fatal(err)
	}
	tokens := make([]store.LeaseToken, n)
	for i := range tokens {
		tokens[i] = store.LeaseToken{JobID: fmt.Sprintf("hot-%d", i+1), Generation: 1, WorkerID: "w1"}
	}
	readUpdates := func() (upd, hot int64) {
		t.Helper()
		// The counters of this backend's own transactions reach the
		// shared statistics at the next flush; force it first.
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			t.Fatal(err)
		}
		if err := conn.QueryRow(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
			WHERE relid = 'jobs_live'::regclass`).Scan(&upd, &hot); err != nil {
			t.Fatal(err)
		}
		return upd, hot
	}
	// Each pool connection flushes its own counters, at most once a
	// second while busy: poll until the renewals' updates are counted.
	upd0, hot0 := readUpdates()
	for round := range 2 {
		res, err := s.Renew(ctx, store.RenewParams{Tenant: "t1", Tokens: tokens, LeaseDuration: time.Minute,
			Now: now.Add(time.Duration(round+1) * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Status != store.RenewRenewed {
				t.Fatalf("renew %s: %s", r.Token.JobID, r.Status)
			}
		}
	}
	var upd, hot int64
	deadline := time.Now().Add(15 * time.Second)
	for {
		u, h := readUpdates()
		upd, hot = u-upd0, h-hot0
		if upd >= 2*n || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d renewals: %d row updates, %d of them HOT", 2*n, upd, hot)
	if upd < 2*n {
		t.Fatalf("only %d row updates reached the statistics, want %d", upd, 2*n)
	}
	if hot*10 < upd*9 {
		t.Fatalf("%d of %d renewal updates were HOT, want at least 90%%: an index holds a column a renewal writes", hot, upd)
	}
}
