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
	p, err := provider(db, engine)
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

// Version returns the schema version currently applied to db.
func Version(ctx context.Context, db *sql.DB, engine Engine) (int64, error) {
	p, err := provider(db, engine)
	if err != nil {
		return 0, err
	}
	return p.GetDBVersion(ctx)
}

func provider(db *sql.DB, engine Engine) (*goose.Provider, error) {
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
		locker, err := lock.NewPostgresSessionLocker()
		if err != nil {
			return nil, fmt.Errorf("migration lock: %w", err)
		}
		opts = append(opts, goose.WithSessionLocker(locker))
	case SQLite:
		dialect = goose.DialectSQLite3
	default:
		return nil, fmt.Errorf("unknown engine %q", engine)
	}
	return goose.NewProvider(dialect, db, sub, opts...)
}
