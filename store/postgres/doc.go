// Package postgres is the production store.Store engine: PostgreSQL through
// pgx/v5 and a pgxpool, shared by any number of coordinators.
//
// # Schema
//
// migrations/postgres holds the schema; Migrate applies it (goose, under a
// session advisory lock, so two processes may migrate at once) and Open never
// does. The tables are jobs, job_events, job_attempts, job_checkpoints,
// job_effects, idempotency_keys and queue_policies, every one keyed by tenant
// first and every query filtered by tenant.
//
// # Transactions and time
//
// Each write is one short READ COMMITTED transaction that never outlives the
// call. A transaction that fails with serialization_failure or
// deadlock_detected is retried from the start, at most txAttempts times,
// before store.ErrUnavailable is returned. Queries take the caller's Now
// through coalesce($now, now()): production uses the database clock, which is
// one clock for every coordinator, and tests inject time to cross lease
// expiry without sleeping. now() is the transaction's start time, so every
// statement of a transaction sees the same instant.
//
// # Invariants and how they are kept
//
//   - Event sequences are gapless: an event is appended only after bumping
//     jobs.last_event_seq under the job's row lock in the same transaction,
//     and a state change and its event always share a transaction. Exactly
//     one terminal event is written, by the transition that leaves a
//     non-terminal state; a terminal row is never updated back.
//   - Claims select with FOR UPDATE SKIP LOCKED and set the lease in the same
//     statement (a row lock is not a lease). Concurrent claimers skip each
//     other's rows instead of waiting, and a job is leased to one holder per
//     generation. A queue with a concurrency limit is claimed under a
//     transaction-scoped advisory lock on (tenant, queue), so coordinators
//     cannot together exceed the limit.
//   - Lease-bound writes are compare-and-sets on (tenant, id, state =
//     leased, owner, generation, lease_expires_at > now). When zero rows
//     match, the row is read to tell a missing job (store.ErrNotFound), a
//     repeated terminal report from the generation that made it (the same
//     job is returned) and everything else (store.ErrLeaseLost).
//   - A cancel-requested job is never claimed again; a Retry or Release of
//     a cancel-requested job ends it CANCELLED rather than queueing it
//     again. Claims take only queued rows: a lease that expired with no
//     report is ended by ReapExpired (qLockExpired, SKIP LOCKED, so
//     concurrent reapers end each lease once) as store.DecideExpiry says.
//   - Creating a job commits the job, its QUEUED event (sequence 1) and its
//     idempotency record together. The record is inserted first with
//     ON CONFLICT, so concurrent creates with one key block on each other
//     and exactly one job is made; the others replay it.
//   - A create batch whose requests have no request id and no unique key
//     is one round trip (createPipelined): BEGIN, now() (read for the
//     caller's answer), the insert (its times from now() in SQL), the
//     notifications, the handoff claims and COMMIT in one pgx batch. A
//     failing statement makes the server skip the rest, COMMIT included,
//     and the transaction is rolled back whole; a failed handoff claim
//     then creates the batch again with a savepoint around the claims.
//     Request ids and unique keys take more round trips, since later
//     statements depend on what the key statements answer.
//
// # Notifications
//
// Creates, reschedules, releases, replays and resumes call pg_notify inside
// their transaction (so a notification is sent only if the change commits;
// PostgreSQL folds identical ones) with the payload tenant + "\x1f" +
// queue. The channel is leasehold_jobs in the public schema and
// leasehold_jobs_<hash of the schema> elsewhere, so that schemas sharing a
// database do not wake each other. SubscribeJobs LISTENs on a dedicated
// connection outside the pool (pgxlisten, run as a startstop service) and
// reconnects after a second when that connection drops. Payloads carry
// their kind (see notification in notifier.go), so other kinds of
// notification can share the channel.
//
// Job changes (for WatchJob) are notified by triggers instead
// (migrations 008 and 013): every statement that inserts jobs or raises
// their last_event_seq (every change that makes an event, derived or
// stored) notifies, once per job, tenant + "\x1f" + job id on leasehold_changes_<8 hex digits
// of the md5 of the schema>, but only while watch_presence holds an
// unexpired row (AnnounceWatchers; a coordinator keeps one while it has
// watchers), since every NOTIFY costs every listening backend of the
// cluster some work. SubscribeJobChanges listens there; when its
// subscriber falls behind or the connection comes back after a drop it
// signals Lost, and watchers read again.
package postgres
