package bench

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	_ "modernc.org/sqlite" // the SQLite file is read directly after the run

	"github.com/leasehold/leasehold/bench/measure"
)

// jobRow is what the bench reads of a job after the run.
type jobRow struct {
	id       string
	state    string
	created  time.Time
	finished time.Time // zero while not finished
}

// jobTable is the bench's read-only view of the coordinator's jobs table:
// it watches for the end of a run and reads the rows afterwards. It reads
// the database directly, never through the coordinator, so reading adds no
// work to the system under test (on PostgreSQL its transactions are
// counted and subtracted by measure.Monitor).
type jobTable interface {
	// unfinished reports whether any job is still queued or leased.
	unfinished(ctx context.Context) (bool, error)
	// count returns how many jobs there are, and how many succeeded.
	count(ctx context.Context) (total, succeeded int64, err error)
	// rows returns every job.
	rows(ctx context.Context) ([]jobRow, error)
	// leaseExpiries returns when each job leased to owner loses its lease.
	leaseExpiries(ctx context.Context, owner string) (map[string]time.Time, error)
	close(ctx context.Context)
}

// Named queries, one per engine where the SQL differs.
const (
	// Each EXISTS can stop at its first row, and each state has a partial
	// index on both engines, so this stays cheap as finished jobs pile up.
	qUnfinished = `SELECT EXISTS (SELECT 1 FROM jobs WHERE state = 'queued')
	    OR EXISTS (SELECT 1 FROM jobs WHERE state = 'leased')`
	qCount         = `SELECT count(*), count(*) FILTER (WHERE state = 'succeeded') FROM jobs`
	qRows          = `SELECT id, state, created_at, finished_at FROM jobs`
	qLeaseExpiries = `SELECT id, lease_expires_at FROM jobs WHERE state = 'leased' AND lease_owner = $1`
	// SQLite keeps times as unix microseconds.
	qCountSQLite = `SELECT count(*), coalesce(sum(state = 'succeeded'), 0) FROM jobs`
)

// pgJobTable reads the bench schema through the run's Monitor.
type pgJobTable struct {
	m *measure.Monitor
}

func (t *pgJobTable) unfinished(ctx context.Context) (bool, error) {
	var b bool
	err := t.m.QueryRow(ctx, []any{&b}, qUnfinished)
	return b, err
}

func (t *pgJobTable) count(ctx context.Context) (total, succeeded int64, err error) {
	err = t.m.QueryRow(ctx, []any{&total, &succeeded}, qCount)
	return total, succeeded, err
}

func (t *pgJobTable) rows(ctx context.Context) ([]jobRow, error) {
	var out []jobRow
	err := t.m.Query(ctx, func(r pgx.Rows) error {
		var j jobRow
		var finished *time.Time
		if err := r.Scan(&j.id, &j.state, &j.created, &finished); err != nil {
			return err
		}
		if finished != nil {
			j.finished = *finished
		}
		out = append(out, j)
		return nil
	}, qRows)
	return out, err
}

func (t *pgJobTable) leaseExpiries(ctx context.Context, owner string) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	err := t.m.Query(ctx, func(r pgx.Rows) error {
		var id string
		var at time.Time
		if err := r.Scan(&id, &at); err != nil {
			return err
		}
		out[id] = at
		return nil
	}, qLeaseExpiries, owner)
	return out, err
}

func (t *pgJobTable) close(ctx context.Context) {}

// sqliteJobTable reads the coordinator's SQLite file from this process (WAL
// mode lets it read while the coordinator writes).
type sqliteJobTable struct {
	db *sql.DB
}

func openSQLiteJobTable(path string) (*sqliteJobTable, error) {
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(5000)")
	q.Add("_pragma", "query_only(1)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return &sqliteJobTable{db: db}, nil
}

func (t *sqliteJobTable) unfinished(ctx context.Context) (bool, error) {
	var b bool
	err := t.db.QueryRowContext(ctx, qUnfinished).Scan(&b)
	return b, err
}

func (t *sqliteJobTable) count(ctx context.Context) (total, succeeded int64, err error) {
	err = t.db.QueryRowContext(ctx, qCountSQLite).Scan(&total, &succeeded)
	return total, succeeded, err
}

func (t *sqliteJobTable) rows(ctx context.Context) ([]jobRow, error) {
	rs, err := t.db.QueryContext(ctx, qRows)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	var out []jobRow
	for rs.Next() {
		var j jobRow
		var created int64
		var finished sql.NullInt64
		if err := rs.Scan(&j.id, &j.state, &created, &finished); err != nil {
			return nil, err
		}
		j.created = time.UnixMicro(created)
		if finished.Valid {
			j.finished = time.UnixMicro(finished.Int64)
		}
		out = append(out, j)
	}
	return out, rs.Err()
}

func (t *sqliteJobTable) leaseExpiries(ctx context.Context, owner string) (map[string]time.Time, error) {
	rs, err := t.db.QueryContext(ctx, qLeaseExpiries, owner)
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	out := map[string]time.Time{}
	for rs.Next() {
		var id string
		var at int64
		if err := rs.Scan(&id, &at); err != nil {
			return nil, err
		}
		out[id] = time.UnixMicro(at)
	}
	return out, rs.Err()
}

func (t *sqliteJobTable) close(context.Context) { _ = t.db.Close() }
