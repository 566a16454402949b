// Package sqlitetest gives each test a migrated SQLite database file of its
// own. The migrations run once per test binary, into a template kept in
// memory; each test gets a copy of its bytes in t.TempDir(). (Migrating a
// file costs tens of milliseconds of goose under -race; writing one costs
// next to nothing.) sqlite.Open still runs the migrations on the copy, and
// finds nothing to apply. Tests of migrating itself open a path of their
// own instead.
package sqlitetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store/sqlite"
)

var (
	templateOnce sync.Once
	template     []byte
	templateErr  error
)

// Path returns the path of a fresh, migrated database file in t.TempDir().
func Path(t testing.TB) string {
	t.Helper()
	templateOnce.Do(func() { template, templateErr = migratedImage() })
	if templateErr != nil {
		t.Fatalf("sqlitetest: migrate the template database: %v", templateErr)
	}
	path := filepath.Join(t.TempDir(), "leasehold.db")
	if err := os.WriteFile(path, template, 0o600); err != nil {
		t.Fatalf("sqlitetest: copy the template database: %v", err)
	}
	return path
}

// migratedImage migrates a file in a temporary directory and returns its
// bytes. Closing the last connection checkpoints the write-ahead log into
// the file and removes it, so the file alone is the database.
func migratedImage() ([]byte, error) {
	dir, err := os.MkdirTemp("", "leasehold-sqlitetest-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }() // a temporary directory: best effort
	path := filepath.Join(dir, "template.db")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sqlite.Migrate(ctx, path); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(path + "-wal"); err == nil && fi.Size() > 0 {
		return nil, fmt.Errorf("the template's write-ahead log (%d bytes) was not checkpointed into the file", fi.Size())
	}
	return os.ReadFile(path)
}
