package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/outbox"
	"github.com/leasehold/leasehold/store"
)

type row struct {
	requestID, queue, kind string
	payload                []byte
	metadata               map[string]string
	priority               int32
	runAt                  *time.Time
}

func rows(ctx context.Context, t *testing.T, conn *pgx.Conn, schema string) []row {
	t.Helper()
	rs, err := conn.Query(ctx, `SELECT request_id, queue, kind, payload, metadata, priority, run_at FROM `+schema+`.outbox ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (row, error) {
		var x row
		err := r.Scan(&x.requestID, &x.queue, &x.kind, &x.payload, &x.metadata, &x.priority, &x.runAt)
		return x, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEnqueueCommitsWithTheTransactionOnly(t *testing.T) {
	t.Parallel()
	conn, schema := setup(t)
	ctx := ctxT(t)
	if err := outbox.Install(ctx, conn, outbox.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	job := outbox.Job{Queue: "emails", Kind: "welcome", Payload: []byte("hi"), Metadata: map[string]string{"a": "b"},
		Priority: 5, RunAt: runAt, RequestID: "order-1-email"}

	t.Run("a rolled-back transaction leaves no row", func(t *testing.T) {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ob.Enqueue(ctx, tx, outbox.Job{Queue: "emails", Kind: "rolled-back"}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if got := rows(ctx, t, conn, schema); len(got) != 0 {
			t.Fatalf("rows after rollback: %v", got)
		}
	})
	t.Run("pgx: the committed row holds the job", func(t *testing.T) {
		var id string
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			id, err = ob.Enqueue(ctx, tx, job)
			return err
		})
		if err != nil || id != "order-1-email" {
			t.Fatalf("enqueue: %q, %v", id, err)
		}
		got := rows(ctx, t, conn, schema)
		if len(got) != 1 || got[0].queue != "emails" || got[0].kind != "welcome" || string(got[0].payload) != "hi" ||
			got[0].metadata["a"] != "b" || got[0].priority != 5 || got[0].runAt == nil || !got[0].runAt.Equal(runAt) {
			t.Fatalf("rows = %+v", got)
		}
	})
	t.Run("the same request id twice is refused", func(t *testing.T) {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			_, err := ob.Enqueue(ctx, tx, job)
			return err
		})
		if err == nil {
			t.Fatal("a second row with the same request id was accepted")
		}
	})
	t.Run("database/sql: a request id is generated when absent", func(t *testing.T) {
		db, err := sql.Open("pgx", pgtest.BaseURL())
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		id, err := ob.EnqueueSQL(ctx, tx, outbox.Job{Queue: "emails", Kind: "plain"})
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		got := rows(ctx, t, conn, schema)
		if len(id) != 36 || len(got) != 2 || got[1].requestID != id || got[1].runAt != nil || len(got[1].payload) != 0 {
			t.Fatalf("id %q, rows %+v", id, got)
		}
	})
	t.Run("a bad job is refused before any SQL, with the API's field name", func(t *testing.T) {
		_, err := ob.EnqueueSQL(ctx, nil, outbox.Job{Queue: "bad queue", Kind: "k"})
		var inv *store.InvalidError
		if !errors.As(err, &inv) || inv.Field != "job.queue" {
			t.Fatalf("err = %v, want an InvalidError on job.queue", err)
		}
	})
}

var _ = stdlib.GetDefaultDriver
