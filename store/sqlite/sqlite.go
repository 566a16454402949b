package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/internal/groupcommit"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/store"
)

// Engine is the name Store.Engine returns.
const Engine = "sqlite"

// readConns bounds the read pool. Reads are cheap and WAL lets them run
// beside the writer; a handful covers a coordinator's concurrent RPCs.
const readConns = 4

// lockWait says how the engine waits for the file lock when another
// connection (another Store or process on the file) holds it.
type lockWait struct {
	// busyTimeout is how long one statement waits before SQLITE_BUSY.
	busyTimeout time.Duration
	// retries is how many more times a write transaction that still failed
	// with SQLITE_BUSY is tried before ErrUnavailable.
	retries int
	// backoff is the pause before the first retry; it doubles.
	backoff time.Duration
}

// defaultLockWait is the production setting: a writer waits up to about
// 20s in all before reporting the store unavailable. Tests shorten it.
var defaultLockWait = lockWait{busyTimeout: 5 * time.Second, retries: 3, backoff: 20 * time.Millisecond}

// Config configures Open.
type Config struct {
	// Path is the database file, created when missing. Required. A path with
	// a '?' is refused (the engine owns the DSN parameters), and so is
	// ":memory:" (the read and write pools must share one file).
	Path string
	// Now is the store's authoritative clock. Default: time.Now.
	Now func() time.Time
	// Options are the knobs shared with the PostgreSQL engine (random source,
	// id generator, fault injection). Default: the zero value, production.
	Options store.EngineOptions
	// Logger receives the engine's diagnostics (driver errors that were
	// redacted before being returned). Default: a logger that discards.
	Logger *slog.Logger
}

// WithDefaults returns a copy with unset fields filled in.
func (c Config) WithDefaults() Config {
	if c.Now == nil {
		c.Now = time.Now
	}
	c.Options = c.Options.WithDefaults()
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate checks the configuration.
func (c Config) Validate() error {
	return validatePath(c.Path)
}

func validatePath(path string) error {
	switch {
	case path == "":
		return errors.New("sqlite: Config.Path is required")
	case strings.Contains(path, "?"):
		return fmt.Errorf("sqlite: path %q must not contain '?'", path)
	case path == ":memory:" || strings.Contains(path, "mode=memory"):
		return errors.New("sqlite: in-memory databases are not supported; use a file")
	}
	return nil
}

// Store is the SQLite engine. It implements store.Store and
// store.JobNotifier. It is safe for concurrent use.
type Store struct {
	// Reporter implements the lease-bound reports (Renew, Complete, Retry,
	// CancelByHolder, Release, ApplyReports) through reports.
	store.Reporter
	// reports is the group committer: every report of every caller joins
	// a batch that applyReports applies in one write transaction.
	reports *groupcommit.Committer[store.Report, store.ReportResult]
	// creates is the create committer: concurrent CreateJobs calls share
	// a write transaction (createBatch).
	creates *groupcommit.Committer[createCall, createAnswer]
	// policies caches queue policies for claims, renewals and retries.
	policies *store.PolicyCache

	// db is the write pool: exactly one connection, every transaction BEGIN
	// IMMEDIATE. Never use it for a read outside a write transaction, and
	// never use db or rdb inside one (the single connection is held).
	db *sql.DB
	// rdb is the read pool (query_only connections).
	rdb *sql.DB
	// wstmts and rstmts are the statements of each pool, prepared at Open
	// and read-only afterwards. Parsing is a large share of a statement's
	// cost in SQLite; a prepared statement is parsed once per connection.
	wstmts, rstmts map[string]*sql.Stmt

	now      func() time.Time
	opts     store.EngineOptions
	log      *slog.Logger
	notifier *notifier
	wait     lockWait

	closeOnce sync.Once
	closeErr  error
}

var (
	_ store.Store       = (*Store)(nil)
	_ store.JobNotifier = (*Store)(nil)
)

// dsn builds the driver's data source name: the file plus connection
// pragmas, which the driver runs on every new connection (so foreign keys
// are on for each one, as SQLite requires).
func dsn(path string, write bool, busyTimeout time.Duration) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if write {
		// WAL: readers never block the writer nor the other way round.
		// synchronous=NORMAL is durable in WAL mode except for the last
		// transactions before a power loss (not a process crash), the usual
		// trade for an embedded queue.
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	return path + "?" + q.Encode()
}

// openWriter opens the single-connection write pool.
func openWriter(ctx context.Context, path string, busyTimeout time.Duration) (*sql.DB, error) {
	db, err := sql.Open("sqlite", dsn(path, true, busyTimeout))
	if err != nil {
		return nil, err
	}
	// One writer: a second connection could only wait for the file lock.
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	db.SetConnMaxLifetime(0)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close() // the ping error is the one to report
		return nil, interpretError(err)
	}
	return db, nil
}

// Open opens (creating it when missing) the database file, applies pending
// migrations, and returns the store. The embedded default needs no setup.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	return open(ctx, cfg, defaultLockWait)
}

func open(ctx context.Context, cfg Config, wait lockWait) (_ *Store, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	s := &Store{
		now:      cfg.Now,
		opts:     cfg.Options,
		log:      cfg.Logger,
		notifier: newNotifier(),
		wait:     wait,
	}
	defer func() {
		if err != nil {
			_ = s.closePools() // err is the one to report
			err = fmt.Errorf("open sqlite %s: %w", cfg.Path, err)
		}
	}()
	if err := createPrivate(cfg.Path); err != nil {
		return nil, err
	}
	if s.db, err = openWriter(ctx, cfg.Path, wait.busyTimeout); err != nil {
		return nil, err
	}
	if _, err := migrations.Up(ctx, s.db, migrations.SQLite); err != nil {
		return nil, fmt.Errorf("migrate: %w", interpretError(err))
	}
	if err := privateSidecars(cfg.Path); err != nil {
		return nil, err
	}
	if s.rdb, err = sql.Open("sqlite", dsn(cfg.Path, false, wait.busyTimeout)); err != nil {
		return nil, err
	}
	s.rdb.SetMaxOpenConns(readConns)
	s.rdb.SetMaxIdleConns(readConns)
	if err := s.rdb.PingContext(ctx); err != nil {
		return nil, interpretError(err)
	}
	if s.wstmts, err = prepare(ctx, s.db); err != nil {
		return nil, fmt.Errorf("prepare statements: %w", interpretError(err))
	}
	if s.rstmts, err = prepare(ctx, s.rdb); err != nil {
		return nil, fmt.Errorf("prepare statements: %w", interpretError(err))
	}
	s.policies = &store.PolicyCache{Load: s.loadPolicyRefs}
	createObserve, createSpan := s.opts.CommitHooks("creates")
	s.creates = groupcommit.New(groupcommit.Config[createCall, createAnswer]{
		Flush: s.createBatch, MaxBatch: 32, MaxPending: 1_000, Queued: s.opts.QueuedHook("create"),
		Observe: createObserve, Span: createSpan,
	})
	reportObserve, reportSpan := s.opts.CommitHooks("reports")
	s.reports = groupcommit.New(groupcommit.Config[store.Report, store.ReportResult]{
		Flush: s.applyReports, Queued: s.opts.QueuedHook("report"),
		Observe: reportObserve, Span: reportSpan,
	})
	s.Reporter = store.Reporter{Submit: s.submitReports}
	return s, nil
}

// closePools closes the prepared statements and both pools, whichever
// exist.
func (s *Store) closePools() error {
	var errs []error
	for _, m := range []map[string]*sql.Stmt{s.wstmts, s.rstmts} {
		for _, st := range m {
			errs = append(errs, st.Close())
		}
	}
	for _, db := range []*sql.DB{s.db, s.rdb} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	return errors.Join(errs...)
}

// prepare prepares every statement on db. It must run outside any
// transaction: with the single-connection write pool, preparing during one
// would wait for the connection forever.
func prepare(ctx context.Context, db *sql.DB) (map[string]*sql.Stmt, error) {
	m := make(map[string]*sql.Stmt, len(statements))
	for _, q := range statements {
		st, err := db.PrepareContext(ctx, q)
		if err != nil {
			return nil, err
		}
		m[q] = st
	}
	return m, nil
}

// preparedTx is a transaction that runs the pool's prepared statements.
// database/sql binds a prepared statement to the transaction's connection,
// preparing it there first if that connection has not seen it yet.
type preparedTx struct {
	*sql.Tx
	stmts map[string]*sql.Stmt
	// bound are the statements already bound to this transaction: a
	// batch runs the same few statements hundreds of times.
	bound map[string]*sql.Stmt
}

// stmt returns query's prepared statement bound to the transaction, or nil
// when query is not one of statements.
func (tx *preparedTx) stmt(ctx context.Context, query string) *sql.Stmt {
	if st, ok := tx.bound[query]; ok {
		return st
	}
	st, ok := tx.stmts[query]
	if !ok {
		return nil
	}
	if tx.bound == nil {
		tx.bound = make(map[string]*sql.Stmt)
	}
	st = tx.StmtContext(ctx, st)
	tx.bound[query] = st
	return st
}

// QueryRowContext runs query, prepared when it is one of statements.
func (tx *preparedTx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if st := tx.stmt(ctx, query); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return tx.Tx.QueryRowContext(ctx, query, args...)
}

// QueryContext runs query, prepared when it is one of statements.
func (tx *preparedTx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if st := tx.stmt(ctx, query); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return tx.Tx.QueryContext(ctx, query, args...)
}

// ExecContext runs query, prepared when it is one of statements.
func (tx *preparedTx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if st := tx.stmt(ctx, query); st != nil {
		return st.ExecContext(ctx, args...)
	}
	return tx.Tx.ExecContext(ctx, query, args...)
}

// Migrate applies pending migrations to the database file at path (creating
// it) and returns. Applying an up-to-date schema is a no-op. It backs
// `leasehold migrate`; Open migrates on its own.
func Migrate(ctx context.Context, path string) error {
	if err := validatePath(path); err != nil {
		return err
	}
	if err := createPrivate(path); err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db, err := openWriter(ctx, path, defaultLockWait.busyTimeout)
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	defer func() { _ = db.Close() }() // the migration's outcome is known by now
	if _, err := migrations.Up(ctx, db, migrations.SQLite); err != nil {
		return fmt.Errorf("migrate sqlite %s: %w", path, interpretError(err))
	}
	return privateSidecars(path)
}

// Engine implements store.Store.
func (s *Store) Engine() string { return Engine }

// Now implements store.Store: the process clock, truncated to microseconds
// in UTC like every stored time.
func (s *Store) Now(context.Context) (time.Time, error) {
	return s.clock(time.Time{}), nil
}

// Close closes both pools and ends every subscription. It is safe to call
// more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		// Creates and reports already submitted are applied before the
		// pools close.
		s.creates.Close()
		s.reports.Close()
		s.notifier.close()
		s.closeErr = s.closePools()
	})
	return s.closeErr
}

// clock returns t, or the store clock when t is zero, as stored: UTC,
// truncated to microseconds.
func (s *Store) clock(t time.Time) time.Time {
	if t.IsZero() {
		t = s.now()
	}
	return t.UTC().Truncate(time.Microsecond)
}

// writeTx is one attempt's view of a write transaction.
type writeTx struct {
	*preparedTx
	// wake collects the queues to signal after the commit (never before: a
	// subscriber must find the rows when it looks).
	wake []store.QueueRef
}

// write runs fn in a BEGIN IMMEDIATE transaction, calls
// EngineOptions.BeforeCommit(op) right before committing, and retries the
// whole transaction a few times on SQLITE_BUSY. fn must not keep state
// across attempts outside tx. Errors are converted by interpretError.
func (s *Store) write(ctx context.Context, op string, fn func(tx *writeTx) error) error {
	backoff := s.wait.backoff
	for attempt := 0; ; attempt++ {
		wake, err := s.writeOnce(ctx, op, fn)
		if err == nil {
			s.notifier.signal(wake)
			return nil
		}
		if !isBusy(err) || attempt >= s.wait.retries || ctx.Err() != nil {
			return s.interpret(ctx, op, err)
		}
		s.log.DebugContext(ctx, "sqlite write busy, retrying", slog.String("op", op), slog.Int("attempt", attempt+1))
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff *= 2
	}
}

func (s *Store) writeOnce(ctx context.Context, op string, fn func(tx *writeTx) error) ([]store.QueueRef, error) {
	sqlTx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, err
	}
	tx := &writeTx{preparedTx: &preparedTx{Tx: sqlTx, stmts: s.wstmts}}
	if err := fn(tx); err != nil {
		_ = sqlTx.Rollback()
		return nil, err
	}
	if hook := s.opts.BeforeCommit; hook != nil {
		if err := hook(op); err != nil {
			_ = sqlTx.Rollback()
			return nil, fmt.Errorf("%s: before commit: %w", op, err)
		}
	}
	if err := sqlTx.Commit(); err != nil {
		return nil, err
	}
	return tx.wake, nil
}

// read runs fn in a read-only transaction, so multi-statement reads see one
// snapshot.
func (s *Store) read(ctx context.Context, op string, fn func(tx *preparedTx) error) error {
	tx, err := s.rdb.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return s.interpret(ctx, op, err)
	}
	defer tx.Rollback() //nolint:errcheck // read-only: nothing to lose
	if err := fn(&preparedTx{Tx: tx, stmts: s.rstmts}); err != nil {
		return s.interpret(ctx, op, err)
	}
	return nil
}

// interpret converts err with interpretError and logs the driver detail
// that the conversion redacted.
func (s *Store) interpret(ctx context.Context, op string, err error) error {
	out := interpretError(err)
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(out, ctxErr) && isDriverError(err) {
		// The driver reports an interrupted statement as its own error; the
		// caller should see why it was interrupted.
		return fmt.Errorf("%s: %w", op, ctxErr)
	}
	if isDriverError(err) {
		s.log.WarnContext(ctx, "sqlite error", slog.String("op", op), slog.String("error", err.Error()))
	}
	return out
}

func isDriverError(err error) bool {
	var se *sqlite.Error
	return errors.As(err, &se)
}

func isBusy(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return true
	}
	return false
}

func isConstraint(err error, extended int) bool {
	var se *sqlite.Error
	return errors.As(err, &se) && se.Code() == extended
}

// interpretError converts driver errors into store errors: the engine's one
// place for it. Store sentinels, *store.InvalidError and context errors pass
// through. Lock contention that outlived the retries and I/O-level failures
// become store.ErrUnavailable. Driver messages are replaced by the result
// code's name, so SQL text and schema details never reach a caller (the full
// error is logged by the caller of interpretError).
func interpretError(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var se *sqlite.Error
	if errors.As(err, &se) {
		code := se.Code()
		name := codeName(code)
		switch code & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_CORRUPT,
			sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_INTERRUPT:
			return fmt.Errorf("%w: sqlite %s", store.ErrUnavailable, name)
		}
		return fmt.Errorf("sqlite %s", name)
	}
	if errors.Is(err, sql.ErrConnDone) {
		return fmt.Errorf("%w: database connection closed", store.ErrUnavailable)
	}
	if errors.Is(err, sql.ErrNoRows) {
		// A lookup that should have been handled found nothing: the only
		// meaning it can have for a caller is a missing row.
		return store.ErrNotFound
	}
	return err
}

// codeName names a result code without the driver's message text.
func codeName(code int) string {
	if s, ok := sqlite.ErrorCodeString[code]; ok {
		if i := strings.LastIndexByte(s, '('); i >= 0 {
			return strings.TrimSuffix(s[i+1:], ")")
		}
		return s
	}
	if s, ok := sqlite.ErrorCodeString[code&0xff]; ok {
		if i := strings.LastIndexByte(s, '('); i >= 0 {
			return fmt.Sprintf("%s (extended code %d)", strings.TrimSuffix(s[i+1:], ")"), code)
		}
	}
	return fmt.Sprintf("result code %d", code)
}

// filePerm is the mode of the database file and its -wal and -shm files:
// they hold payloads, results and API key hashes, so only the owner may
// read them.
const filePerm = 0o600

// createPrivate creates the database file with filePerm when it does not
// exist yet, before SQLite opens it (SQLite would create it 0644 less the
// umask). The explicit chmod makes the mode independent of the umask. An
// existing file keeps the mode its owner gave it.
func createPrivate(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, filePerm)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create the database file: %w", err)
	}
	if err := f.Chmod(filePerm); err != nil {
		_ = f.Close() // the chmod error is the one to report
		return fmt.Errorf("create the database file: %w", err)
	}
	return f.Close()
}

// privateSidecars sets filePerm on the -wal and -shm files that opening
// the database in WAL mode created. SQLite creates them with the database
// file's mode, but a file left behind by an earlier run (or a database
// created before this engine set modes) may be wider.
func privateSidecars(path string) error {
	for _, suffix := range []string{"-wal", "-shm"} {
		if err := os.Chmod(path+suffix, filePerm); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("restrict %s: %w", path+suffix, err)
		}
	}
	return nil
}
