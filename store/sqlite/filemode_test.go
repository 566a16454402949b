package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/leasehold/leasehold/store/sqlite"
)

// TestFilesArePrivate: the database and its -wal and -shm files are created
// 0600 whatever the umask (here none at all, which would make SQLite's own
// default 0644 world-readable), by Open and by Migrate. Not parallel: the
// umask is the process's.
func TestFilesArePrivate(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })

	check := func(t *testing.T, path string) {
		t.Helper()
		for _, name := range []string{path, path + "-wal", path + "-shm"} {
			fi, err := os.Stat(name)
			if err != nil {
				t.Fatalf("stat %s: %v", name, err)
			}
			if mode := fi.Mode().Perm(); mode != 0o600 {
				t.Errorf("%s has mode %o, want 600", filepath.Base(name), mode)
			}
		}
	}
	t.Run("Open creates them 0600", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "leasehold.db")
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if _, err := s.ListQueues(t.Context(), "t"); err != nil {
			t.Fatal(err)
		}
		check(t, path)
	})
	t.Run("Migrate creates them 0600 and tightens leftover sidecars", func(t *testing.T) {
		dir := t.TempDir()
		path := filepath.Join(dir, "leasehold.db")
		if err := os.WriteFile(path+"-shm", nil, 0o666); err != nil {
			t.Fatal(err)
		}
		if err := sqlite.Migrate(context.Background(), path); err != nil {
			t.Fatal(err)
		}
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		check(t, path)
	})
}
