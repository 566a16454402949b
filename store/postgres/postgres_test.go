package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/storetest"
)

func TestMain(m *testing.M) {
	// Every store a test opens is closed by t.Cleanup, which stops the
	// pools' health-check goroutines and the listeners, so nothing is
	// ignored.
	goleak.VerifyTestMain(m)
}

// migrated returns the URL of a fresh, migrated schema of its own (a copy
// of a template migrated once per test binary; TestMigrateConcurrently
// and the harness's Remigrate run goose for real).
func migrated(t *testing.T) string {
	t.Helper()
	return pgtest.MigratedSchema(t)
}

// open opens a store on url and closes it when the test ends.
func open(t *testing.T, url string, opts store.EngineOptions) *postgres.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.Config{DatabaseURL: url, MaxConns: 8, Options: opts})
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func asPostgres(t *testing.T, s store.Store) *postgres.Store {
	t.Helper()
	ps, ok := s.(*postgres.Store)
	if !ok {
		t.Fatalf("store %T is not a *postgres.Store", s)
	}
	return ps
}

// rowTables maps the suite's row kinds to tables and their job id column.
var rowTables = map[storetest.RowKind][2]string{
	storetest.RowsJobs:        {"jobs", "id"},
	storetest.RowsEvents:      {"job_events", "job_id"},
	storetest.RowsAttempts:    {"job_attempts", "job_id"},
	storetest.RowsCheckpoints: {"job_checkpoints", "job_id"},
	storetest.RowsEffects:     {"job_effects", "job_id"},
	storetest.RowsIdempotency: {"idempotency_keys", "job_id"},
}

func harness() storetest.Harness {
	return storetest.Harness{
		Engine: "postgres",
		New: func(t *testing.T, opts store.EngineOptions) store.Store {
			return open(t, migrated(t), opts)
		},
		NewShared: func(t *testing.T, s store.Store, opts store.EngineOptions) store.Store {
			return open(t, postgres.DatabaseURL(asPostgres(t, s)), opts)
		},
		Remigrate: func(t *testing.T, s store.Store) error {
			return postgres.Migrate(t.Context(), postgres.DatabaseURL(asPostgres(t, s)))
		},
		Rows: func(t *testing.T, s store.Store, kind storetest.RowKind, jobID string) int {
			t.Helper()
			tbl, ok := rowTables[kind]
			if !ok {
				t.Fatalf("unknown row kind %q", kind)
			}
			q := fmt.Sprintf("SELECT count(*) FROM %s WHERE $1 = '' OR %s = $1", tbl[0], tbl[1])
			var n int
			if err := postgres.Pool(asPostgres(t, s)).QueryRow(t.Context(), q, jobID).Scan(&n); err != nil {
				t.Fatalf("count %s: %v", kind, err)
			}
			return n
		},
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness())
}
