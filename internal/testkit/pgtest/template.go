package pgtest

import (
	"context"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/migrations"
)

// How a migrated schema is copied.
//
// PostgreSQL has no CREATE SCHEMA ... TEMPLATE. The options measured on the
// development machine (2 cores, PostgreSQL 15, two copies at a time):
//
//	goose migration of a fresh schema            ~90 ms
//	the migrations' SQL replayed in one query    ~50 ms
//	CREATE DATABASE ... TEMPLATE (WAL_LOG)      ~180 ms, and ~750 ms to drop
//	CREATE DATABASE ... TEMPLATE (FILE_COPY)    ~390 ms (a checkpoint each)
//
// So the template is migrated once per test binary by goose, as in
// production, and each test's schema replays the migrations' Up sections
// in one round trip, then gets goose's version table with the template's
// rows. The first copy is compared with the template, catalog against
// catalog (tables, columns, defaults, indexes, constraints, functions); a
// difference fails every test that asked for a copy, naming it. Then the
// template is dropped: nothing outlives the test binary but the schemas
// of tests that are still running.

// template is the per-binary result of preparing the copy.
type template struct {
	// script makes a migrated schema inside the current search_path; empty
	// when the migrations cannot be replayed as one script.
	script string
}

var (
	templateOnce sync.Once
	templateVal  template
	templateErr  error
)

func loadTemplate(t testing.TB) template {
	t.Helper()
	templateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		templateVal, templateErr = prepareTemplate(ctx, BaseURL())
	})
	if templateErr != nil {
		t.Fatalf("PostgreSQL is required for this test and the migrated template schema could not be made at %s (set %s): %v",
			redact(BaseURL()), EnvURL, templateErr)
	}
	return templateVal
}

// migrate applies the migrations to the schema of u with goose, as
// postgres.Migrate does (this package cannot import the engine: the
// engine's own tests import this package).
func migrate(ctx context.Context, u string) error {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return err
	}
	db := stdlib.OpenDB(*cfg)
	defer func() { _ = db.Close() }() // migrated or not, err says so
	_, err = migrations.Up(ctx, db, migrations.Postgres)
	return err
}

// prepareTemplate migrates a template schema, derives the copy script from
// it, checks a first copy against it and drops both.
func prepareTemplate(ctx context.Context, base string) (_ template, err error) {
	ddl, ok, err := replayable()
	if err != nil || !ok {
		return template{}, err
	}
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return template{}, err
	}
	defer conn.Close(ctx)

	tmpl, probe := randomName("lh_tmpl_"), randomName("lh_probe_")
	defer func() {
		for _, s := range []string{tmpl, probe} {
			if _, derr := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); derr != nil && err == nil {
				err = fmt.Errorf("drop %s: %w", s, derr)
			}
		}
	}()
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{tmpl}.Sanitize()); err != nil {
		return template{}, fmt.Errorf("create the template schema: %w", err)
	}
	u, err := withSearchPath(base, tmpl)
	if err != nil {
		return template{}, err
	}
	if err := migrate(ctx, u); err != nil {
		return template{}, fmt.Errorf("migrate the template schema: %w", err)
	}
	versions, err := gooseRows(ctx, conn, tmpl)
	if err != nil {
		return template{}, err
	}
	script := ddl + gooseTable + versions

	if _, err := conn.PgConn().Exec(ctx, createScript(probe, script)).ReadAll(); err != nil {
		return template{}, fmt.Errorf("replay the migrations in a probe schema: %w", err)
	}
	want, err := catalog(ctx, conn, tmpl)
	if err != nil {
		return template{}, err
	}
	got, err := catalog(ctx, conn, probe)
	if err != nil {
		return template{}, err
	}
	if diff := lineDiff(want, got); diff != "" {
		return template{}, fmt.Errorf("a replayed copy differs from the goose-migrated template (- template, + copy):\n%s", diff)
	}
	return template{script: script}, nil
}

// replayable returns the Up sections of the PostgreSQL migrations, in
// version order, as one script; ok is false when a migration must not run
// inside a transaction (NO TRANSACTION) or is rewritten by goose (ENVSUB).
func replayable() (script string, ok bool, err error) {
	src, err := migrations.Source(migrations.Postgres)
	if err != nil {
		return "", false, err
	}
	names, err := fs.Glob(src, "*.up.sql")
	if err != nil {
		return "", false, err
	}
	slices.Sort(names) // NNN_ prefixes: lexical order is version order
	var b strings.Builder
	for _, name := range names {
		raw, err := fs.ReadFile(src, name)
		if err != nil {
			return "", false, err
		}
		text := string(raw)
		if strings.Contains(text, "+goose NO TRANSACTION") || strings.Contains(text, "+goose ENVSUB") {
			return "", false, nil
		}
		_, up, found := strings.Cut(text, "-- +goose Up")
		if !found {
			return "", false, fmt.Errorf("migration %s has no -- +goose Up section", name)
		}
		up, _, _ = strings.Cut(up, "-- +goose Down")
		// StatementBegin/End only group statements for goose's splitter;
		// as comments they change nothing in one simple query.
		fmt.Fprintf(&b, "-- %s\n%s\n;\n", name, strings.TrimSpace(up))
	}
	return b.String(), true, nil
}

// gooseTable is goose's version table for PostgreSQL (goose v3,
// internal/dialects/postgres.go). The check against the template catches a
// goose that makes it differently.
const gooseTable = `CREATE TABLE goose_db_version (
	id integer PRIMARY KEY GENERATED BY DEFAULT AS IDENTITY,
	version_id bigint NOT NULL,
	is_applied boolean NOT NULL,
	tstamp timestamp NOT NULL DEFAULT now()
);
`

// gooseRows returns the statements that copy the template's version rows
// and move the id sequence past them.
func gooseRows(ctx context.Context, conn *pgx.Conn, tmpl string) (string, error) {
	rows, err := conn.Query(ctx, "SELECT id, version_id, is_applied, tstamp FROM "+
		pgx.Identifier{tmpl, "goose_db_version"}.Sanitize()+" ORDER BY id")
	if err != nil {
		return "", fmt.Errorf("read the template's versions: %w", err)
	}
	var (
		values []string
		maxID  int64
	)
	for rows.Next() {
		var (
			id, version int64
			applied     bool
			at          time.Time
		)
		if err := rows.Scan(&id, &version, &applied, &at); err != nil {
			return "", fmt.Errorf("read the template's versions: %w", err)
		}
		values = append(values, fmt.Sprintf("(%d, %d, %t, '%s')", id, version, applied, at.Format("2006-01-02 15:04:05.999999")))
		maxID = max(maxID, id)
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("read the template's versions: %w", err)
	}
	if len(values) == 0 {
		return "", fmt.Errorf("the migrated template has no versions")
	}
	return "INSERT INTO goose_db_version (id, version_id, is_applied, tstamp) VALUES\n" + strings.Join(values, ",\n") + ";\n" +
		fmt.Sprintf("SELECT setval(pg_get_serial_sequence('goose_db_version', 'id'), %d);\n", maxID), nil
}

// catalogQuery lists what makes up a schema, one sorted line per object,
// with the schema's own name taken out of definitions.
const catalogQuery = `
SELECT line FROM (
  SELECT format('relation %s %s %s', c.relname, c.relkind, coalesce(array_to_string(c.reloptions, ','), '')) AS line
  FROM pg_class c WHERE c.relnamespace = $1::regnamespace
  UNION ALL
  SELECT format('column %s.%s %s notnull=%s identity=%s default=%s collation=%s', c.relname, a.attname,
                format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attidentity,
                coalesce(pg_get_expr(d.adbin, d.adrelid), ''), coalesce(co.collname, ''))
  FROM pg_attribute a
  JOIN pg_class c ON c.oid = a.attrelid
  LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  LEFT JOIN pg_collation co ON co.oid = a.attcollation
  WHERE c.relnamespace = $1::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  UNION ALL
  SELECT format('index %s', pg_get_indexdef(i.indexrelid))
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = $1::regnamespace
  UNION ALL
  SELECT format('constraint %s.%s %s', c.relname, k.conname, pg_get_constraintdef(k.oid))
  FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid WHERE c.relnamespace = $1::regnamespace
  UNION ALL
  SELECT format('function %s(%s) %s', p.proname, pg_get_function_arguments(p.oid), md5(p.prosrc))
  FROM pg_proc p WHERE p.pronamespace = $1::regnamespace
  UNION ALL
  SELECT format('type %s %s', t.typname, t.typtype)
  FROM pg_type t WHERE t.typnamespace = $1::regnamespace
  UNION ALL
  SELECT format('trigger %s', pg_get_triggerdef(g.oid))
  FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid WHERE c.relnamespace = $1::regnamespace AND NOT g.tgisinternal
  UNION ALL
  SELECT format('version %s %s', version_id, is_applied) FROM goose_versions
) lines ORDER BY line`

func catalog(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	q := strings.Replace(catalogQuery, "goose_versions", pgx.Identifier{schema, "goose_db_version"}.Sanitize(), 1)
	rows, err := conn.Query(ctx, q, schema)
	if err != nil {
		return nil, fmt.Errorf("read the catalog of %s: %w", schema, err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the catalog of %s: %w", schema, err)
	}
	for i, l := range lines {
		lines[i] = strings.ReplaceAll(l, schema+".", "")
	}
	slices.Sort(lines)
	return lines, nil
}

// lineDiff lists the lines only in want (-) and only in got (+).
func lineDiff(want, got []string) string {
	var b strings.Builder
	for _, l := range want {
		if !slices.Contains(got, l) {
			b.WriteString("- " + l + "\n")
		}
	}
	for _, l := range got {
		if !slices.Contains(want, l) {
			b.WriteString("+ " + l + "\n")
		}
	}
	return b.String()
}
