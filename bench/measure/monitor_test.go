package measure

import (
	"context"
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
		for range statements {
			if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
				t.Fatal(err)
			}
		}
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
		n, err := m.EndWindow(ctx, appName)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d commits counted for %d statements (and one connection start-up)", n, statements)
		if n < statements {
			t.Fatalf("EndWindow = %d, want at least %d", n, statements)
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
