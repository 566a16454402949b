//go:build linux

package measure

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
)

// TestMonitor needs PostgreSQL and fails, never skips, without it. Other
// tests may commit on the same database meanwhile, so counts are checked
// from below only.
func TestMonitor(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema, err := CreateSchema(ctx, pgtest.BaseURL(), "lh_measure_test_")
	if err != nil {
		t.Fatalf("PostgreSQL is required (set %s): %v", pgtest.EnvURL, err)
	}
	t.Cleanup(func() {
		if err := schema.Drop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	m, err := OpenMonitor(ctx, schema.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)

	t.Run("a window counts the system's commits once its connections closed", func(t *testing.T) {
		if err := m.BeginWindow(ctx); err != nil {
			t.Fatal(err)
		}
		appName := "measure-test-" + schema.Name
		u, err := WithParams(schema.URL, "application_name", appName)
		if err != nil {
			t.Fatal(err)
		}
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		const statements = 25
		for range statements - 2 {
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		}
		// WAL, and CPU in the backend that exits before the window ends:
		// its time must still count, through the postmaster's children.
		if _, err := conn.Exec(ctx, "CREATE TABLE walcheck AS SELECT g FROM generate_series(1, 20000) g"); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "SELECT count(*) FROM generate_series(1, 20000000)"); err != nil {
			t.Fatal(err)
		}
		spinCPU(t, 300*time.Millisecond) // this process's own CPU
		// The bench's own statements in the window are subtracted.
		for range 10 {
			var one int
			if err := m.QueryRow(ctx, []any{&one}, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		}
		if err := conn.Close(ctx); err != nil {
			t.Fatal(err)
		}
		w, err := m.EndWindow(ctx, appName)
		if err != nil {
			t.Fatal(err)
		}
		n := w.Commits
		t.Logf("%d commits counted for %d statements (and one connection start-up); WAL %d bytes; CPU machine %v, PostgreSQL %v, this process %v",
			n, statements, w.WALBytes, w.Machine, w.Postgres, w.System)
		if n < statements {
			t.Fatalf("EndWindow = %d, want at least %d", n, statements)
		}
		if w.RowsInserted != 20000 {
			t.Errorf("rows inserted %d, want the 20,000 of the table created in the window", w.RowsInserted)
		}
		// 20,000 rows of one integer are at least 20,000 × 28 bytes of WAL.
		if w.WALBytes < 20000*28 {
			t.Errorf("WAL %d bytes, want at least %d", w.WALBytes, 20000*28)
		}
		if !w.CPUKnown {
			t.Fatalf("CPU unknown: %s", w.CPUNote)
		}
		// Counting 20 million rows takes well over 100 ms of a backend's
		// CPU; the spin took 300 ms of ours; the machine spent at least
		// PostgreSQL's.
		if w.Postgres < 100*time.Millisecond {
			t.Errorf("PostgreSQL CPU %v, want at least 100ms (the exited backend's time is lost?)", w.Postgres)
		}
		if w.System < 300*time.Millisecond {
			t.Errorf("this process's CPU %v, want at least 300ms", w.System)
		}
		if w.Machine < w.Postgres {
			t.Errorf("machine busy %v < PostgreSQL's %v", w.Machine, w.Postgres)
		}
	})

	t.Run("the schema is the connection's search_path", func(t *testing.T) {
		var sp string
		if err := m.QueryRow(ctx, []any{&sp}, "SELECT current_schema()"); err != nil {
			t.Fatal(err)
		}
		if sp != schema.Name {
			t.Fatalf("current_schema() = %q, want %q", sp, schema.Name)
		}
	})

	t.Run("EndWindow without BeginWindow is an error", func(t *testing.T) {
		m2, err := OpenMonitor(ctx, schema.URL)
		if err != nil {
			t.Fatal(err)
		}
		defer m2.Close(ctx)
		if _, err := m2.EndWindow(ctx, "x"); err == nil {
			t.Fatal("EndWindow succeeded without a window")
		}
	})
}

// spinCPU burns d of this process's CPU time, as getrusage counts it
// (wall time would not do on a shared machine).
func spinCPU(t *testing.T, d time.Duration) {
	t.Helper()
	used := func() time.Duration {
		var u syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
			t.Fatal(err)
		}
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	for start := used(); used()-start < d; {
		for range 100000 {
			_ = time.Now()
		}
	}
}
