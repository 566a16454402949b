package outbox_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/outbox"
	"github.com/leasehold/leasehold/store"
)

var update = flag.Bool("update", false, "rewrite schema.sql from schema.sql.tmpl")

// schema.sql is the rendered default script for people who read or apply
// SQL by hand; it must be what SchemaSQL renders.
func TestSchemaFileIsRenderedFromTheTemplate(t *testing.T) {
	t.Parallel()
	want, err := outbox.SchemaSQL(outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("schema.sql", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatal("schema.sql is stale: run go test ./outbox -run TestSchemaFileIsRenderedFromTheTemplate -update")
	}
}

func TestPayloadLimitDefaultIsTheCoordinators(t *testing.T) {
	t.Parallel()
	if outbox.PayloadMaxBytesDefault != coordinator.PayloadMaxBytesDefault {
		t.Fatalf("outbox.PayloadMaxBytesDefault = %d, coordinator.PayloadMaxBytesDefault = %d", outbox.PayloadMaxBytesDefault, coordinator.PayloadMaxBytesDefault)
	}
}

func TestInstallIsIdempotentAndUninstallKeepsWaitingRows(t *testing.T) {
	t.Parallel()
	conn, schema := setup(t)
	ctx := ctxT(t)
	opts := outbox.Options{Schema: schema}
	for range 2 {
		if err := outbox.Install(ctx, conn, opts); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := outbox.InstalledVersion(ctx, conn, schema); err != nil || v != outbox.SchemaVersion {
		t.Fatalf("version = %d, %v; want %d", v, err, outbox.SchemaVersion)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO `+schema+`.outbox (queue, kind) VALUES ('q', 'k')`); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Uninstall(ctx, conn, opts, false); !errors.Is(err, outbox.ErrNotEmpty) {
		t.Fatalf("uninstall with a waiting row: %v, want ErrNotEmpty", err)
	}
	for range 2 {
		if err := outbox.Uninstall(ctx, conn, opts, true); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := outbox.InstalledVersion(ctx, conn, schema); err != nil || v != 0 {
		t.Fatalf("version after uninstall = %d, %v; want 0", v, err)
	}
}

// Installing over version 1 (no unique_key) upgrades it in place: the
// waiting rows stay, and the column is there.
func TestInstallUpgradesVersion1(t *testing.T) {
	t.Parallel()
	conn, schema := setup(t)
	ctx := ctxT(t)
	opts := outbox.Options{Schema: schema}
	if err := outbox.Install(ctx, conn, opts); err != nil {
		t.Fatal(err)
	}
	// Back to version 1's tables.
	if _, err := conn.Exec(ctx, `ALTER TABLE `+schema+`.outbox DROP COLUMN unique_key;
		ALTER TABLE `+schema+`.outbox_dead DROP COLUMN unique_key;
		DELETE FROM `+schema+`.schema_version;
		INSERT INTO `+schema+`.schema_version (version) VALUES (1);
		INSERT INTO `+schema+`.outbox (request_id, queue, kind) VALUES ('waiting', 'q', 'k')`); err != nil {
		t.Fatal(err)
	}
	if err := outbox.Install(ctx, conn, opts); err != nil {
		t.Fatalf("install over version 1: %v", err)
	}
	if v, err := outbox.InstalledVersion(ctx, conn, schema); err != nil || v != outbox.SchemaVersion {
		t.Fatalf("version = %d, %v; want %d", v, err, outbox.SchemaVersion)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.outbox WHERE request_id = 'waiting' AND unique_key IS NULL`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("the waiting row after the upgrade: %d, %v", n, err)
	}
	if _, err := outbox.New(schema); err != nil {
		t.Fatal(err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	ob, _ := outbox.New(schema)
	if _, err := ob.Enqueue(ctx, tx, outbox.Job{Queue: "q", Kind: "k", UniqueKey: "u-1"}); err != nil {
		t.Fatalf("enqueue with a unique key after the upgrade: %v", err)
	}
}

func TestSchemaNamesAreIdentifiersOnly(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "public", "pg_x", "a;drop", "A", "1a", strings.Repeat("a", 64)} {
		if _, err := outbox.SchemaSQL(outbox.Options{Schema: s}); s != "" && err == nil {
			t.Errorf("schema %q accepted", s)
		}
	}
}

// The CHECK constraints refuse what the coordinator refuses: names by
// store.ValidName, sizes by the store's limits.
func TestConstraintsRefuseWhatTheCoordinatorRefuses(t *testing.T) {
	t.Parallel()
	conn, schema := setup(t)
	ctx := ctxT(t)
	if err := outbox.Install(ctx, conn, outbox.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	accepted := func(t *testing.T, cols, vals string, args ...any) bool {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `INSERT INTO `+schema+`.outbox (`+cols+`) VALUES (`+vals+`)`, args...)
		var pgErr *pgconn.PgError
		if err != nil && (!errors.As(err, &pgErr) || pgErr.Code != "23514") {
			t.Fatalf("insert: %v (want a check violation or success)", err)
		}
		return err == nil
	}
	t.Run("names are checked as store.ValidName checks them", func(t *testing.T) {
		names := []string{"a", "emails", "A.b_c:d-e", "9x", "-x", ".x", "a b", "a/b", "é", "a\n",
			strings.Repeat("n", store.NameMaxLen), strings.Repeat("n", store.NameMaxLen+1)}
		for _, n := range names {
			want := store.ValidName(n)
			for _, col := range []string{"queue", "kind"} {
				cols, vals := "queue, kind", "$1, 'k'"
				if col == "kind" {
					vals = "'q', $1"
				}
				if got := accepted(t, cols, vals, n); got != want {
					t.Errorf("%s %q: accepted = %v, store.ValidName = %v", col, n, got, want)
				}
			}
			if got := accepted(t, "queue, kind, dependency", "'q', 'k', $1", n); got != want {
				t.Errorf("dependency %q: accepted = %v, store.ValidName = %v", n, got, want)
			}
		}
	})
	t.Run("sizes and ranges are the store's limits", func(t *testing.T) {
		cases := []struct {
			name string
			col  string
			arg  any
			want bool
		}{
			{"priority at max", "priority", store.PriorityMax, true},
			{"priority above max", "priority", store.PriorityMax + 1, false},
			{"priority below min", "priority", store.PriorityMin - 1, false},
			{"max_attempts at max", "max_attempts", store.MaxAttemptsMax, true},
			{"max_attempts above max", "max_attempts", store.MaxAttemptsMax + 1, false},
			{"negative max_attempts", "max_attempts", -1, false},
			{"payload at the limit", "payload", make([]byte, outbox.PayloadMaxBytesDefault), true},
			{"payload over the limit", "payload", make([]byte, outbox.PayloadMaxBytesDefault+1), false},
			{"request id at max", "request_id", strings.Repeat("r", store.RequestIDMaxLen), true},
			{"request id too long", "request_id", strings.Repeat("r", store.RequestIDMaxLen+1), false},
			{"empty request id", "request_id", "", false},
			{"concurrency key too long", "concurrency_key", strings.Repeat("c", store.NameMaxLen+1), false},
			{"unique key at max", "unique_key", strings.Repeat("u", store.UniqueKeyMaxLen), true},
			{"unique key too long", "unique_key", strings.Repeat("u", store.UniqueKeyMaxLen+1), false},
			{"empty unique key", "unique_key", "", false},
			{"a derived unique key", "unique_key", store.UniqueDerivedPrefix + "x", false},
			{"metadata entries at max", "metadata", metadataJSON(store.MetadataMaxEntries, "v"), true},
			{"too many metadata entries", "metadata", metadataJSON(store.MetadataMaxEntries+1, "v"), false},
			{"metadata value too long", "metadata", metadataJSON(1, strings.Repeat("v", store.MetadataValueMaxLen+1)), false},
			{"metadata value not a string", "metadata", `{"a": 1}`, false},
			{"metadata not an object", "metadata", `["a"]`, false},
			{"metadata empty key", "metadata", `{"": "v"}`, false},
			{"run_at before 1970", "run_at", "1969-12-31T00:00:00Z", false},
			{"run_at beyond the horizon", "run_at", "2999-01-01T00:00:00Z", false},
		}
		for _, c := range cases {
			cast := ""
			switch c.col {
			case "metadata":
				cast = "::jsonb"
			case "run_at":
				cast = "::timestamptz"
			}
			if got := accepted(t, "queue, kind, "+c.col, "'q', 'k', $1"+cast, c.arg); got != c.want {
				t.Errorf("%s: accepted = %v, want %v", c.name, got, c.want)
			}
		}
	})
}

func metadataJSON(n int, v string) string {
	parts := make([]string, n)
	for i := range n {
		parts[i] = fmt.Sprintf("%q: %q", fmt.Sprint("k", i), v)
	}
	return "{" + strings.Join(parts, ",") + "}"
}
