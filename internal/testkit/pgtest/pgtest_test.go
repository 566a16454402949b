package pgtest

import (
	"context"
	"database/sql"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/migrations"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, u string) *sql.DB {
	t.Helper()
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestMigratedSchemaIsMigratedAndIsolated: a copy is at the latest
// version, migrating it again applies nothing, and two copies do not share
// rows.
func TestMigratedSchemaIsMigratedAndIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := open(t, MigratedSchema(t)), open(t, MigratedSchema(t))

	applied, err := migrations.Up(ctx, a, migrations.Postgres)
	if err != nil || len(applied) != 0 {
		t.Fatalf("migrating a copy again applied %v, %v; want nothing", applied, err)
	}
	v, err := migrations.Version(ctx, a, migrations.Postgres)
	if err != nil || v < 2 {
		t.Fatalf("version %d, %v", v, err)
	}
	if _, err := a.ExecContext(ctx, `CREATE TABLE only_here (x int); INSERT INTO only_here VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := b.QueryRowContext(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() AND tablename = 'only_here'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the second copy sees the first's table: %d, %v", n, err)
	}
}

// TestCatalogTellsCopiesApart: the check that guards the copy script sees
// a missing index and a changed default.
func TestCatalogTellsCopiesApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	changed, same := MigratedSchema(t), MigratedSchema(t)
	if _, err := open(t, changed).ExecContext(ctx, `DROP INDEX jobs_claim_idx; ALTER TABLE jobs ALTER COLUMN priority SET DEFAULT 7`); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	schemaOf := func(u string) string {
		cfg, err := pgx.ParseConfig(u)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.RuntimeParams["search_path"]
	}
	want, err := catalog(ctx, conn, schemaOf(same))
	if err != nil {
		t.Fatal(err)
	}
	got, err := catalog(ctx, conn, schemaOf(changed))
	if err != nil {
		t.Fatal(err)
	}
	diff := lineDiff(want, got)
	if !strings.Contains(diff, "- index CREATE INDEX jobs_claim_idx") || !strings.Contains(diff, "column jobs.priority") {
		t.Fatalf("diff misses the dropped index or the changed default:\n%s", diff)
	}
	if d := lineDiff(want, want); d != "" {
		t.Fatalf("a catalog differs from itself:\n%s", d)
	}
}

func TestSchemaIsEmpty(t *testing.T) {
	t.Parallel()
	db := open(t, Schema(t))
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_class WHERE relnamespace = current_schema()::regnamespace`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("a fresh schema has %d relations, %v", n, err)
	}
}

// TestKeptConnectionsThatDiedAreReplaced: when the server ends the kept
// admin connections, the next schema is still made.
func TestKeptConnectionsThatDiedAreReplaced(t *testing.T) {
	// Not parallel: it terminates every kept connection.
	ctx := context.Background()
	Schema(t) // leaves at least one connection kept
	idleConns.Lock()
	var pids []uint32
	for _, c := range idleConns.conns {
		pids = append(pids, c.PgConn().PID())
	}
	idleConns.Unlock()
	if len(pids) == 0 {
		t.Fatal("no connection was kept")
	}
	killer, err := pgx.Connect(ctx, BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(ctx)
	for _, pid := range pids {
		if _, err := killer.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid)); err != nil {
			t.Fatal(err)
		}
	}
	open(t, Schema(t)) // made on a new connection
}
