package sqlite

import (
	"context"
	"database/sql"
	"math/bits"
	"strings"
)

// multiRowMax is the most rows one multi-row statement carries. A
// statement costs far more to run than a row in it (cursors opened and
// closed, its columns described, its journal), so a batch runs as one
// statement per multiRowMax rows: its rows are padded with NULL rows to
// the next power of two, and each power of two is prepared once.
const multiRowMax = 64

// multiRow is a statement that takes its rows as a VALUES list of bound
// parameters: SQLite has no arrays to unnest. Every row carries its own
// values (tenant, fence, …), so one statement serves any mix of rows. A
// padding row is all NULL, and the statement must do nothing with it:
// its tenant matches no job, and an INSERT selects only the rows whose
// first column is not NULL.
type multiRow struct {
	// width is the number of parameters of one row.
	width int
	// texts[k] is the statement for 1<<k rows.
	texts []string
}

// newMultiRow builds the statement prefix + "(?, …), (?, …)" + suffix for
// each chunk size, every row width anonymous parameters.
func newMultiRow(prefix string, width int, suffix string) multiRow {
	row := "(" + strings.TrimSuffix(strings.Repeat("?, ", width), ", ") + ")"
	m := multiRow{width: width}
	for k := 1; k <= multiRowMax; k *= 2 {
		m.texts = append(m.texts, prefix+strings.TrimSuffix(strings.Repeat(row+", ", k), ", ")+suffix)
	}
	return m
}

// chunks calls fn with each chunk's statement and its arguments: the
// rows' values (width per row), padded with NULL rows to the statement's
// size.
func (m multiRow) chunks(args []any, fn func(query string, args []any) error) error {
	rows := len(args) / m.width
	for from := 0; from < rows; from += multiRowMax {
		n := min(rows-from, multiRowMax)
		k := bits.Len(uint(n - 1)) // the smallest 1<<k >= n
		chunk := args[from*m.width : (from+n)*m.width : (from+n)*m.width]
		if pad := 1<<k - n; pad > 0 {
			chunk = append(chunk, make([]any, pad*m.width)...) // a copy: chunk's capacity is its length
		}
		if err := fn(m.texts[k], chunk); err != nil {
			return err
		}
	}
	return nil
}

// exec runs the statement over the rows of args (width values per row)
// and returns the rows the statements changed in all.
func (m multiRow) exec(ctx context.Context, tx *writeTx, args []any) (int64, error) {
	var changed int64
	err := m.chunks(args, func(query string, args []any) error {
		res, err := tx.ExecContext(ctx, query, args...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		changed += n
		return err
	})
	return changed, err
}

// query runs the statement over the rows of args (width values per row)
// and calls scan for every row it returns.
func (m multiRow) query(ctx context.Context, tx *writeTx, args []any, scan func(*sql.Rows) error) error {
	return m.chunks(args, func(query string, args []any) error {
		rows, err := tx.QueryContext(ctx, query, args...)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		return rows.Close()
	})
}

// multiRowStatements lists the chunk statements of ms, to be prepared
// with the others.
func multiRowStatements(ms ...multiRow) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.texts...)
	}
	return out
}
