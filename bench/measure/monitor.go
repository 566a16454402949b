package measure

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// MonitorAppName is the application_name of the bench's own connection;
// the system under test must use another one (see EndWindow).
const MonitorAppName = "bench-monitor"

// How EndWindow waits for the system's backends to go away: it polls
// pg_stat_activity, bounded, then lets the exiting backends finish their
// last stats flush (a backend leaves pg_stat_activity a moment before its
// exit hook flushes its counters).
const (
	disconnectPoll    = 20 * time.Millisecond
	disconnectTimeout = 30 * time.Second
	statsSettle       = 200 * time.Millisecond
)

// Monitor is the bench's own connection to PostgreSQL. It counts the
// transactions it commits, so that a commit window (BeginWindow,
// EndWindow) reports the system's commits without the bench's.
//
// How the commit count is made current, and what is subtracted:
//
//   - pg_stat_database.xact_commit is the database's committed
//     transactions, read-only ones included. Each backend adds its own
//     count to it when it flushes its stats: at most once a second while
//     busy, up to 10 s late when it then goes idle, and always at exit.
//   - The window's end is read after every connection of the system under
//     test has closed (EndWindow waits until no backend with its
//     application_name is left, then settles briefly), so nothing the
//     system did in the window is still pending.
//   - The bench's own backend is flushed on demand with
//     pg_stat_force_next_flush() before each reading.
//   - Every statement of this connection runs alone in autocommit through
//     the simple protocol, so each is exactly one committed transaction;
//     the ones between the two readings are subtracted.
//   - Not subtracted, because nothing tells them apart: commits of other
//     sessions on the same database (other tools, autovacuum), and the
//     system's own commits of the phase before the window that its busy
//     backends had not flushed yet when the window began (at most about a
//     second of that phase, e.g. a few batch creates). Use a database no
//     one else writes to (LEASEHOLD_BENCH_DATABASE_URL).
type Monitor struct {
	conn *pgx.Conn
	// own counts the transactions this connection committed.
	own int64
	// At BeginWindow: xact_commit, and own at the moment it was current.
	beginCommits, beginOwn int64
	began                  bool
}

// OpenMonitor connects to url (its search_path, if any, applies).
func OpenMonitor(ctx context.Context, url string) (*Monitor, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, errors.New("monitor: the database URL is not a valid PostgreSQL URL")
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	cfg.RuntimeParams["application_name"] = MonitorAppName
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("monitor: connect to PostgreSQL: %w", err)
	}
	return &Monitor{conn: conn}, nil
}

// Close closes the connection.
func (m *Monitor) Close(ctx context.Context) error { return m.conn.Close(ctx) }

// QueryRow runs one statement and scans its single row into dest.
func (m *Monitor) QueryRow(ctx context.Context, dest []any, sql string, args ...any) error {
	err := m.conn.QueryRow(ctx, sql, args...).Scan(dest...)
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		m.own++
	}
	return err
}

// Query runs one statement and calls fn for each row.
func (m *Monitor) Query(ctx context.Context, fn func(pgx.Rows) error, sql string, args ...any) error {
	rows, err := m.conn.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := fn(rows); err != nil {
			return err
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	m.own++
	return nil
}

// commitsNow returns xact_commit with this connection's own transactions
// flushed into it, and own as of that reading.
func (m *Monitor) commitsNow(ctx context.Context) (commits, ownAt int64, err error) {
	var ignored any
	if err := m.QueryRow(ctx, []any{&ignored}, `SELECT pg_stat_force_next_flush()`); err != nil {
		return 0, 0, fmt.Errorf("monitor: pg_stat_force_next_flush (PostgreSQL 15 or later is needed): %w", err)
	}
	// The flush happened when the statement above ended; this reading
	// includes it, and this statement itself lands in the next reading.
	ownAt = m.own
	if err := m.QueryRow(ctx, []any{&commits},
		`SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()`); err != nil {
		return 0, 0, fmt.Errorf("monitor: read pg_stat_database: %w", err)
	}
	return commits, ownAt, nil
}

// BeginWindow reads the commit counter at the start of the measured work.
func (m *Monitor) BeginWindow(ctx context.Context) error {
	c, own, err := m.commitsNow(ctx)
	if err != nil {
		return err
	}
	m.beginCommits, m.beginOwn, m.began = c, own, true
	return nil
}

// EndWindow waits until no backend with application_name appName is left
// in this database (the system under test has closed every connection),
// then returns the commits made since BeginWindow, this connection's own
// subtracted.
func (m *Monitor) EndWindow(ctx context.Context, appName string) (int64, error) {
	if !m.began {
		return 0, errors.New("monitor: EndWindow without BeginWindow")
	}
	if err := m.waitDisconnected(ctx, appName); err != nil {
		return 0, err
	}
	c, own, err := m.commitsNow(ctx)
	if err != nil {
		return 0, err
	}
	return c - m.beginCommits - (own - m.beginOwn), nil
}

func (m *Monitor) waitDisconnected(ctx context.Context, appName string) error {
	ctx, cancel := context.WithTimeout(ctx, disconnectTimeout)
	defer cancel()
	tick := time.NewTicker(disconnectPoll)
	defer tick.Stop()
	for {
		var n int64
		if err := m.QueryRow(ctx, []any{&n}, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name = $1`, appName); err != nil {
			return fmt.Errorf("monitor: wait for %s to disconnect: %w", appName, err)
		}
		if n == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("monitor: %d connections of %s still open: %w", n, appName, context.Cause(ctx))
		case <-tick.C:
		}
	}
	t := time.NewTimer(statsSettle)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
