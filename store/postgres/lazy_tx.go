package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// queryer is what the report and reap steps run their statements on: a
// pgx.Tx or a lazyTx.
type queryer interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// lazyTx is a READ COMMITTED transaction on one connection whose BEGIN is
// sent in the same round trip as its first statement. The group
// committer's batches are short transactions of three or four round
// trips, so saving one is worth a type: under load every round trip waits
// for a busy CPU.
type lazyTx struct {
	conn  *pgx.Conn
	begun bool
}

var _ queryer = (*lazyTx)(nil)

// SendBatch sends b, preceded by BEGIN the first time.
func (t *lazyTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if t.begun {
		return t.conn.SendBatch(ctx, b)
	}
	t.begun = true
	first := &pgx.Batch{}
	first.Queue("begin")
	first.QueuedQueries = append(first.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, first)
	if _, err := br.Exec(); err != nil {
		return errResults{BatchResults: br, err: err}
	}
	return br
}

// Query runs one statement (after BEGIN, the first time).
func (t *lazyTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if t.begun {
		return t.conn.Query(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, b)
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// Exec runs one statement (after BEGIN, the first time).
func (t *lazyTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if t.begun {
		return t.conn.Exec(ctx, sql, args...)
	}
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	br := t.SendBatch(ctx, b)
	tag, err := br.Exec()
	return tag, errors.Join(err, br.Close())
}

// QueryRow runs one statement that returns one row.
func (t *lazyTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	rows, err := t.Query(ctx, sql, args...)
	return row{rows: rows, err: err}
}

// finish commits (or, after a failure, rolls back) a transaction that
// began. A COMMIT that the server turned into a rollback (the
// transaction had failed) is an error, never a success.
func (t *lazyTx) finish(ctx context.Context, failed error) error {
	if !t.begun {
		return failed
	}
	if failed != nil {
		// The rollback must run even when ctx is done, or the connection
		// goes back to the pool mid-transaction.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := t.conn.Exec(rctx, "rollback"); err != nil {
			t.conn.PgConn().Close(rctx) //nolint:errcheck // the connection is unusable either way
		}
		return failed
	}
	tag, err := t.conn.Exec(ctx, "commit")
	if err != nil {
		return err
	}
	if tag.String() != "COMMIT" {
		return fmt.Errorf("commit answered %q", tag.String())
	}
	return nil
}

// batchRows closes its batch with the rows.
type batchRows struct {
	pgx.Rows
	br pgx.BatchResults
}

func (r *batchRows) Close() {
	r.Rows.Close()
	r.br.Close()
}

// row is pgx.Row over rows that may have failed to open.
type row struct {
	rows pgx.Rows
	err  error
}

func (r row) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// errResults answers every read of a batch whose BEGIN failed with that
// failure.
type errResults struct {
	pgx.BatchResults
	err error
}

func (e errResults) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, e.err }
func (e errResults) Query() (pgx.Rows, error)         { return nil, e.err }
func (e errResults) QueryRow() pgx.Row                { return row{err: e.err} }
func (e errResults) Close() error                     { return errors.Join(e.err, e.BatchResults.Close()) }

// withLazyTx is withTx on a lazyTx: fn runs in one transaction whose BEGIN
// rides with its first statement; the BeforeCommit hook, the retry of lost
// serialization races and the error conversion are withTx's.
func (s *Store) withLazyTx(ctx context.Context, op string, fn func(tx *lazyTx) error) error {
	return s.retryTx(ctx, op, func() error {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		tx := &lazyTx{conn: conn.Conn()}
		err = fn(tx)
		if err == nil {
			if hook := s.opts.BeforeCommit; hook != nil {
				if herr := hook(op); herr != nil {
					err = &hookError{op: op, err: herr}
				}
			}
		}
		return tx.finish(ctx, err)
	})
}
