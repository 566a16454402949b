package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The counter counts each transaction a client ends once: the startup, an
// autocommit statement, an explicit transaction with several statements,
// a pipeline of several statements, a ping, and one that failed; nothing
// for statements inside a transaction.
func TestTxCounterCountsTheTransactionsClientsEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := StartTxCounter(t, BaseURL())
	cfg, err := pgx.ParseConfig(c.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol // one round trip per statement
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	want := int64(1) // the startup
	check := func(what string, n int64) {
		t.Helper()
		want += n
		if got := c.Transactions(); got != want {
			t.Fatalf("after %s: %d transactions counted, want %d", what, got, want)
		}
	}
	check("connecting", 0)

	if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	check("an autocommit statement", 1)

	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatal(err)
		}
	}
	check("three statements in a transaction", 0)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	check("its commit", 1)

	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("SELECT 2")
	if err := conn.SendBatch(ctx, b).Close(); err != nil {
		t.Fatal(err)
	}
	// The simple protocol sends a batch as one multi-statement query: one
	// implicit transaction.
	check("a batch of two", 1)

	if err := conn.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	check("a ping", 1)

	if _, err := conn.Exec(ctx, "SELECT 1/0"); err == nil {
		t.Fatal("SELECT 1/0 succeeded")
	}
	check("a failed statement", 1)
}
