package postgres

import (
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Test-only access to internals.

// DatabaseURL is the URL the store was opened with, so that a test can open
// a second store or migrate the same schema.
func DatabaseURL(s *Store) string { return s.cfg.DatabaseURL }

// Pool is the store's connection pool, for tests that inspect tables
// directly.
func Pool(s *Store) *pgxpool.Pool { return s.pool }

// Channel is the NOTIFY channel of the store's schema.
func Channel(s *Store) string { return s.channel }

// The exact statements ClaimMany and ReapExpired run, for EXPLAIN.
const (
	ClaimQuery       = qClaimMany
	ClaimPlainQuery  = qClaimPlain
	LockExpiredQuery = qLockExpired
	NextExpiryQuery  = qNextExpiry
)

// The lease-bound statements of a report batch, for EXPLAIN.
const (
	LockLeasesQuery  = qLockLeases
	LeaveLeasesQuery = qLeaveLeases
	RenewLeasesQuery = qRenewLeases
)

// Cursor codec.
var (
	EncodeCursor = func(at time.Time, id string) string { return encodeCursor(cursor{at: at, id: id}) }
	DecodeCursor = func(s string) (time.Time, string, error) {
		c, err := decodeCursor(s)
		return c.at, c.id, err
	}
)

// WithTracer is cfg with a tracer on every connection of the pool.
func WithTracer(cfg Config, t pgx.QueryTracer) Config {
	cfg.tracer = t
	return cfg
}
