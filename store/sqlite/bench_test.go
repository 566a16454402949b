package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
	"github.com/leasehold/leasehold/store/storetest"
)

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store {
		path := filepath.Join(b.TempDir(), "bench.db")
		s, err := sqlite.Open(context.Background(), sqlite.Config{Path: path})
		if err != nil {
			b.Fatalf("open %s: %v", path, err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	})
}
