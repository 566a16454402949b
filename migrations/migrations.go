// Package migrations holds the versioned SQL schema of each storage engine,
// embedded into the binary, and applies it with goose.
//
// Files are migrations/{postgres,sqlite}/NNN_name.up.sql, each with a
// "-- +goose Up" section, applied in version order. On PostgreSQL the run
// holds a session advisory lock, so two coordinators starting at once apply
// each migration exactly once; SQLite has a single writer. Applying an
// up-to-date schema is a no-op.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"hash/crc32"
	"io/fs"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed postgres/*.sql sqlite/*.sql
var files embed.FS

// Engine names a storage engine.
type Engine string

// The engines.
const (
	Postgres Engine = "postgres"
	SQLite   Engine = "sqlite"
)

// Up applies every pending migration of engine to db and returns the
// versions it applied.
func Up(ctx context.Context, db *sql.DB, engine Engine) ([]int64, error) {
	p, err := provider(ctx, db, engine)
	if err != nil {
		return nil, err
	}
	results, err := p.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("apply %s migrations: %w", engine, err)
	}
	applied := make([]int64, 0, len(results))
	for _, r := range results {
		applied = append(applied, r.Source.Version)
	}
	return applied, nil
}

// Source returns the migration files of engine (NNN_name.up.sql), for
// tools that need the SQL itself: the test helpers that copy a migrated
// schema instead of migrating each test's.
func Source(engine Engine) (fs.FS, error) {
	switch engine {
	case Postgres, SQLite:
		return fs.Sub(files, string(engine))
	}
	return nil, fmt.Errorf("unknown engine %q", engine)
}

// Version returns the schema version currently applied to db.
func Version(ctx context.Context, db *sql.DB, engine Engine) (int64, error) {
	p, err := provider(ctx, db, engine)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

func provider(ctx context.Context, db *sql.DB, engine Engine) (*goose.Provider, error) {
	sub, err := fs.Sub(files, string(engine))
	if err != nil {
		return nil, fmt.Errorf("migrations for %q: %w", engine, err)
	}
	var (
		dialect goose.Dialect
		opts    []goose.ProviderOption
	)
	switch engine {
	case Postgres:
		dialect = goose.DialectPostgres
		id, err := postgresLockID(ctx, db)
		if err != nil {
			return nil, err
		}
		// Poll every second (goose's default is 5s) for up to 5 minutes.
		locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(id), lock.WithLockTimeout(1, 300))
		if err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case SQLite:
		dialect = goose.DialectSQLite3
	default:
		return nil, fmt.Errorf("unknown engine %q", engine)
	}
	// Version numbers are handed out before the changes that use them
	// land, so a database may hold a higher version than one that
	// arrives later (012 before 011): apply such a missing migration
	// rather than refuse to start. Each migration stands alone.
	opts = append(opts, goose.WithAllowOutofOrder(true))
	return goose.NewProvider(dialect, db, sub, opts...)
}

// postgresLockID is the advisory lock id of the schema db migrates
// (current_schema()). Schemas are migrated independently, so each gets its
// own lock: processes migrating one schema still exclude each other, while
// migrations of different schemas in one database (tests, side-by-side
// deployments) do not queue behind goose's single database-wide lock.
func postgresLockID(ctx context.Context, db *sql.DB) (int64, error) {
	var schema string
	if err := db.QueryRowContext(ctx, "SELECT coalesce(current_schema(), '')").Scan(&schema); err != nil {
		return 0, fmt.Errorf("migration lock: read the current schema: %w", err)
	}
	return lock.DefaultLockID ^ int64(crc32.ChecksumIEEE([]byte(schema)))<<32, nil
}
