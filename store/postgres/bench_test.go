package postgres_test

import (
	"testing"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
	"github.com/leasehold/leasehold/store/storetest"
)

func BenchmarkStore(b *testing.B) {
	storetest.Bench(b, func(b *testing.B) store.Store {
		url := pgtest.MigratedSchema(b)
		s, err := postgres.Open(b.Context(), postgres.Config{DatabaseURL: url, MaxConns: 4})
		if err != nil {
			b.Fatalf("open: %v", err)
		}
		b.Cleanup(func() { _ = s.Close() })
		return s
	})
}
