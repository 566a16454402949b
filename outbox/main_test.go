package outbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// setup connects to the test database and returns the connection and a
// fresh schema name for an outbox, dropped when the test ends.
func setup(t *testing.T) (*pgx.Conn, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatalf("connect to %s: %v (is PostgreSQL running? see README Testing)", pgtest.EnvURL, err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "lh_outbox_" + hex.EncodeToString(b)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = conn.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
		_ = conn.Close(ctx)
	})
	return conn, schema
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}
