// Package sqlite is the embedded storage engine of Leasehold: one SQLite file
// (modernc.org/sqlite, pure Go, no cgo), opened by one coordinator process.
// It is the zero-setup default for a laptop, a test or a single node. Use the
// PostgreSQL engine (store/postgres) for several coordinators or real
// volume.
//
// # Model
//
// SQLite has one writer at a time. The engine leans into that instead of
// fighting it:
//
//   - Every write runs in one short BEGIN IMMEDIATE transaction (DSN
//     _txlock=immediate) on a pool of exactly one connection, so writes of
//     this process queue in Go rather than failing with SQLITE_BUSY, and a
//     transaction never has to upgrade a read lock (the classic SQLite
//     deadlock). Reads use a separate pool of read-only connections; WAL mode
//     lets them run while a write is in progress.
//   - Because the write lock is taken before the first read, a write
//     transaction always sees the latest committed state: the "read, check,
//     update" steps of a compare-and-set cannot interleave with another
//     writer, even a second Store (or process) on the same file.
//   - A claim and a batch of reports each run a few multi-row statements,
//     not a few per job: the rows go in as a VALUES list of bound
//     parameters (SQLite has no arrays to unnest), padded to a power of
//     two so that each size is prepared once, and every row carries its
//     own tenant and lease fence. Running a statement costs far more than
//     a row in it.
//   - SQLITE_BUSY can still come from another connection or process holding
//     the file. busy_timeout waits for it, the transaction is retried a few
//     times, and a lock that persists (or an I/O error) is reported as
//     store.ErrUnavailable.
//
// # Differences from PostgreSQL
//
//   - The authoritative clock is the process clock (Config.Now), not the
//     database's: there is only one process.
//   - There are no cross-process notifications. SubscribeJobs (the
//     store.JobNotifier) signals subscribers of this *Store only: jobs
//     created by another process on the same file are found by polling.
//   - Claims need no SKIP LOCKED: the claim is one UPDATE … WHERE (tenant, id)
//     IN (SELECT … ORDER BY priority DESC, available_at, id LIMIT n)
//     RETURNING …, and the single writer makes it atomic. The candidates
//     come from two partial indexes (queued jobs in claim order, leases by
//     expiry), so a claim never steps over live leases or finished jobs.
//   - Concurrency limits need no advisory lock: the count of live leases and
//     the claim run in one write transaction.
//   - Times are INTEGER unix microseconds, JSON is TEXT, and tables are
//     STRICT. Both engines truncate times to microseconds and return them in
//     UTC, so results compare equal across engines.
//   - In-memory databases are not supported: the read and write pools must
//     share one file.
//
// # Semantics
//
// The behaviour is the one documented on store.Store and checked by the
// conformance suite in store/storetest, identical on both engines. A few
// choices the interface leaves open:
//
//   - A leased job whose cancel was requested is never claimable again.
//     Claims take only queued rows: a lease that expired with no report is
//     ended by ReapExpired as store.DecideExpiry says.
//   - Complete on a cancel-requested job still succeeds: the holder finished
//     the work, and the later RequestCancel sees ErrAlreadyFinal.
//   - Release of a cancel-requested job finishes it as CANCELLED (attempt
//     outcome cancelled) instead of re-queueing it, and so does a retryable
//     Retry (run_failed, then cancelled): queued again, it could never be
//     claimed.
//   - A succeeded effect is final: RecordEffect on it returns it unchanged.
//   - Replaying a dead job twice is idempotent: the second call returns the
//     first replay's job with alreadyReplayed = true.
package sqlite
