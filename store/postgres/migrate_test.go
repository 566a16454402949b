package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// latestVersion is the highest NNN of migrations/postgres/NNN_*.up.sql,
// and count the number of those files (versions may leave gaps: a number
// can be reserved for a migration that lands later).
func latestVersion(t *testing.T) (latest int64, count int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "migrations", "postgres", "*.up.sql"))
	if err != nil || len(files) == 0 {
		t.Fatalf("find the PostgreSQL migrations: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		prefix, _, _ := strings.Cut(filepath.Base(f), "_")
		v, err := strconv.ParseInt(prefix, 10, 64)
		if err != nil {
			t.Fatalf("migration %s has no numeric version: %v", f, err)
		}
		latest = max(latest, v)
	}
	return latest, len(files)
}

// TestMigrateConcurrently: two processes migrating one fresh schema at once
// both succeed (goose's advisory lock lets one apply and the other find
// nothing to do), and the schema ends at the latest version.
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	start := make(chan struct{})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = postgres.Migrate(ctx, url)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("migration %d: %v", i, err)
		}
	}

	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	got, err := migrations.Version(ctx, db, migrations.Postgres)
	if err != nil {
		t.Fatalf("read the schema version: %v", err)
	}
	want, files := latestVersion(t)
	if got != want {
		t.Fatalf("schema version is %d, want %d", got, want)
	}
	// Every migration was applied once.
	var applied int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&applied); err != nil {
		t.Fatalf("count applied migrations: %v", err)
	}
	if applied != files {
		t.Fatalf("%d migrations recorded, want %d (one per file)", applied, files)
	}
	// And again: a no-op.
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatalf("migrate an up-to-date schema: %v", err)
	}
}

// TestOpenAndMigrateRefuseBadURLs: configuration errors say what is wrong
// without echoing the URL (it may hold a password).
func TestOpenAndMigrateRefuseBadURLs(t *testing.T) {
	t.Parallel()
	const bad = "postgres://user:s3cret@[::1:5432/db"
	if _, err := postgres.Open(t.Context(), postgres.Config{DatabaseURL: bad}); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("open with a malformed URL: %v", err)
	}
	if err := postgres.Migrate(t.Context(), bad); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("migrate with a malformed URL: %v", err)
	}
	if _, err := postgres.Open(t.Context(), postgres.Config{}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("open without a URL: got %v, want ErrInvalid", err)
	}
}

// TestOpenUnreachableIsUnavailable: a database that does not answer is
// store.ErrUnavailable (retry later), not an opaque driver error.
func TestOpenUnreachableIsUnavailable(t *testing.T) {
	t.Parallel()
	// Port 1 on the loopback refuses connections at once.
	_, err := postgres.Open(t.Context(), postgres.Config{DatabaseURL: "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=5"})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("open an unreachable database: got %v, want ErrUnavailable", err)
	}
}

// TestMigrateAcceptsPoolParameters: a database URL may carry pgxpool's own
// parameters (pool_max_conns sizes the store's pool); Migrate connects
// without them instead of sending them to the server as settings (which
// failed: unrecognized configuration parameter, SQLSTATE 42704).
func TestMigrateAcceptsPoolParameters(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t) + "&pool_max_conns=4&pool_min_conns=1"
	if !strings.Contains(url, "?") {
		t.Fatalf("schema URL %q has no query", url)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatalf("Migrate with pool parameters: %v", err)
	}
	s, err := postgres.Open(ctx, postgres.Config{DatabaseURL: url})
	if err != nil {
		t.Fatalf("Open with pool parameters: %v", err)
	}
	defer s.Close()
	if _, err := s.Now(ctx); err != nil {
		t.Fatal(err)
	}
}
