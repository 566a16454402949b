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
	// postmaster is PostgreSQL's main process, the parent of this
	// connection's backend.
	postmaster int
	// At BeginWindow: the WAL position and the CPU clocks (cpuErr says
	// why those are unknown).
	beginWAL      string
	beginInserted int64
	beginCPU      cpuReading
	cpuErr        error
}

// qRowsInserted sums the rows ever inserted into the schema's tables.
const qRowsInserted = `SELECT coalesce(sum(n_tup_ins), 0)::bigint FROM pg_stat_user_tables
	WHERE schemaname = current_schema()`

// Window is what the system did between BeginWindow and EndWindow.
type Window struct {
	// Commits are the transactions it committed.
	Commits int64
	// WALBytes is the write-ahead log written meanwhile, by anyone.
	WALBytes int64
	// RowsInserted are the rows inserted into the tables of the schema.
	// Backends report them when they flush their statistics, up to 10 s
	// late once idle, so rows inserted just before BeginWindow may count:
	// only a window that includes the creates measures rows per job.
	RowsInserted int64
	// CPU spent meanwhile; CPUKnown is false when it could not be read
	// (not Linux, or PostgreSQL on another machine), and CPUNote says why.
	CPUKnown bool
	CPUNote  string
	// Machine is every core's busy time, whoever spent it; Postgres is
	// PostgreSQL's processes'; System is the system under test's and its
	// driver's (the processes of this bench run).
	Machine, Postgres, System time.Duration
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
	m := &Monitor{conn: conn}
	var backend int
	if err := m.QueryRow(ctx, []any{&backend}, `SELECT pg_backend_pid()`); err != nil {
		_ = conn.Close(ctx)
		return nil, fmt.Errorf("monitor: pg_backend_pid: %w", err)
	}
	if s, err := readProcStat(fmt.Sprintf("/proc/%d/stat", backend)); err == nil {
		m.postmaster = s.ppid
	}
	return m, nil
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
	if err := m.QueryRow(ctx, []any{&m.beginWAL}, `SELECT pg_current_wal_lsn()::text`); err != nil {
		return fmt.Errorf("monitor: pg_current_wal_lsn: %w", err)
	}
	if err := m.QueryRow(ctx, []any{&m.beginInserted}, qRowsInserted); err != nil {
		return fmt.Errorf("monitor: read pg_stat_user_tables: %w", err)
	}
	m.beginCPU, m.cpuErr = m.readCPU()
	m.beginCommits, m.beginOwn, m.began = c, own, true
	return nil
}

func (m *Monitor) readCPU() (cpuReading, error) {
	if m.postmaster == 0 {
		return cpuReading{}, errors.New("PostgreSQL's backend is not a process of this machine")
	}
	return readCPU(m.postmaster)
}

// EndWindow waits until no backend with application_name appName is left
// in this database (the system under test has closed every connection),
// then returns what happened since BeginWindow: the commits, this
// connection's own subtracted; the WAL written; the CPU spent.
func (m *Monitor) EndWindow(ctx context.Context, appName string) (Window, error) {
	var w Window
	if !m.began {
		return w, errors.New("monitor: EndWindow without BeginWindow")
	}
	if err := m.waitDisconnected(ctx, appName); err != nil {
		return w, err
	}
	cpu, cpuErr := m.readCPU()
	c, own, err := m.commitsNow(ctx)
	if err != nil {
		return w, err
	}
	w.Commits = c - m.beginCommits - (own - m.beginOwn)
	if err := m.QueryRow(ctx, []any{&w.WALBytes},
		`SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint`, m.beginWAL); err != nil {
		return w, fmt.Errorf("monitor: pg_wal_lsn_diff: %w", err)
	}
	if err := m.QueryRow(ctx, []any{&w.RowsInserted}, qRowsInserted); err != nil {
		return w, fmt.Errorf("monitor: read pg_stat_user_tables: %w", err)
	}
	w.RowsInserted -= m.beginInserted
	switch {
	case m.cpuErr != nil:
		w.CPUNote = m.cpuErr.Error()
	case cpuErr != nil:
		w.CPUNote = cpuErr.Error()
	default:
		w.CPUKnown = true
		w.Machine = cpu.machine - m.beginCPU.machine
		w.Postgres = cpu.postgres - m.beginCPU.postgres
		w.System = cpu.system - m.beginCPU.system
	}
	return w, nil
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
