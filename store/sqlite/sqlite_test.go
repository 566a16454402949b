package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
	"github.com/leasehold/leasehold/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// paths remembers the file behind each store the harness opened, so that
// NewShared, Remigrate and Rows can reach the same database.
var paths sync.Map // store.Store → string

// open opens a Store on path and closes it when the test ends.
func open(t *testing.T, path string, opts store.EngineOptions) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path, Options: opts})
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	paths.Store(store.Store(s), path)
	t.Cleanup(func() {
		paths.Delete(store.Store(s))
		if err := s.Close(); err != nil {
			t.Errorf("close %s: %v", path, err)
		}
	})
	return s
}

func pathOf(t *testing.T, s store.Store) string {
	t.Helper()
	p, ok := paths.Load(s)
	if !ok {
		t.Fatalf("store %p was not opened by this harness", s)
	}
	return p.(string)
}

// rowTables maps the suite's row kinds to this engine's tables and their
// job id column.
var rowTables = map[storetest.RowKind][2]string{
	storetest.RowsJobs:        {"jobs", "id"},
	storetest.RowsEvents:      {"job_events", "job_id"},
	storetest.RowsAttempts:    {"job_attempts", "job_id"},
	storetest.RowsCheckpoints: {"job_checkpoints", "job_id"},
	storetest.RowsEffects:     {"job_effects", "job_id"},
	storetest.RowsIdempotency: {"idempotency_keys", "job_id"},
}

// countRows counts rows straight from the file, through a connection of its
// own, as an operator with the sqlite3 shell would.
func countRows(t *testing.T, s store.Store, kind storetest.RowKind, jobID string) int {
	t.Helper()
	tbl, ok := rowTables[kind]
	if !ok {
		t.Fatalf("unknown row kind %q", kind)
	}
	db, err := sql.Open("sqlite", pathOf(t, s)+"?_pragma=busy_timeout(5000)&_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	q := fmt.Sprintf("SELECT count(*) FROM %s WHERE ?1 = '' OR %s = ?1", tbl[0], tbl[1])
	var n int
	if err := db.QueryRowContext(t.Context(), q, jobID).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", kind, err)
	}
	return n
}

func harness() storetest.Harness {
	return storetest.Harness{
		Engine: sqlite.Engine,
		New: func(t *testing.T, opts store.EngineOptions) store.Store {
			return open(t, sqlitetest.Path(t), opts)
		},
		NewShared: func(t *testing.T, s store.Store, opts store.EngineOptions) store.Store {
			return open(t, pathOf(t, s), opts)
		},
		Remigrate: func(t *testing.T, s store.Store) error {
			return sqlite.Migrate(t.Context(), pathOf(t, s))
		},
		Rows: countRows,
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, harness())
}
