// Package store is Leasehold's durable core: the domain types (job, lease
// token, event, attempt, checkpoint, effect, dead job, queue policy), the
// Store interface the coordinator runs on, the sentinel errors it answers
// with, the bounds every engine enforces, and the pure decisions both engines
// share (ValidateSpec and friends, Fingerprint, NextRetryDelay, DecideRetry,
// the transitions: DecideCreate, DecideComplete, DecideFailure,
// DecideCancelByHolder, DecideRelease, DecideExpiry, AnswerUnheld; a
// client's changes: DecideRequestCancel, DecideReplay and PlanReplay,
// DecideAbandon, DecideOperationRow; the ledger: DecideReserve,
// DecideRecord, PlanCheckpoint; DecideRevoke; and the create plan:
// PlanCreate, DecideRequestID). Engines load and lock rows, ask the
// decision, and write what it says and the events it returns, which only
// store encodes. Not yet so: the claim's probe admission around
// DecideProbes still differs between the engines.
//
// Two engines implement Store: store/postgres for production (several
// coordinators on one database) and store/sqlite for the embedded, single
// node default. They are interchangeable because one conformance suite,
// store/storetest, runs against both; any change in the semantics described
// here extends that suite.
//
// This package never imports gRPC, generated code or a database driver: the
// API layer translates sentinels to status codes, and SQL lives only in the
// engines and in migrations/.
//
// # Schema
//
// Both engines have the same tables (migrations/postgres and
// migrations/sqlite, applied by the migrations package). Every primary key
// starts with tenant, and every query filters by it.
//
//	jobs              one row per job: spec (queue, kind, payload,
//	                  metadata, priority, dependency), public state,
//	                  attempts and max_attempts, the lease
//	                  (lease_owner, lease_generation, lease_expires_at,
//	                  leased_at),
//	                  cancel_requested, available_at, finished_at,
//	                  retry_deadline, last error, result, dead-letter
//	                  links (replay_of, replayed_as, abandoned),
//	                  last_event_seq, the newest event's sequence, and
//	                  the job's history (history.go): the running
//	                  attempt's claim (leased_until, leased_seq), the
//	                  ended attempts as records in attempt_log, the
//	                  create's queued_available_at and
//	                  events_stored_through
//	job_events        (tenant, job_id, seq): the events a row does not
//	                  hold (checkpoints, cancel requests, replays,
//	                  abandons, client cancels), and every event of a
//	                  job written before migration 013; the rest are
//	                  derived from the row (DeriveEvents), gapless from 1
//	job_attempts      (tenant, job_id, generation): attempts ended before
//	                  migration 013, and the records that moved out of
//	                  a row past AttemptLogCap
//	job_checkpoints   progress saved under a lease, with parent_id lineage;
//	                  the newest CheckpointHistoryLimit per job are kept
//	job_effects       (tenant, job_id, effect_key): the effect ledger
//	idempotency_keys  (tenant, operation, key) → fingerprint, job_id,
//	                  expires_at
//	queue_policies    (tenant, queue) → retry policy, default and maximum
//	                  lease, concurrency limit, paused
//	principals        (tenant, id): API keys (stored as the SHA-256 of
//	                  the key) and client-certificate subjects, with
//	                  role, queue patterns, created/last used/revoked;
//	                  also found across tenants by key hash or subject
//	worker_identities (tenant, worker_id) → the principal that owns it
//	audit_events      (tenant, id): operator actions with their actor
//
// Rows that hang off a job (events, attempts, checkpoints, effects,
// idempotency records) are written only in the transaction that holds the
// job, and retention deletes them with it, so it never leaves orphans. The
// claim index covers only queued rows, ordered like a claim (priority
// desc, available_at, id), so a claim stays O(log n) however many jobs are
// queued or finished; the leased index orders leases by expiry for the
// reaper.
//
// # Batches
//
// Writes are batched by group committers (internal/groupcommit) inside
// each engine: every lease-bound report (Renew, Complete, Retry,
// CancelByHolder, Release — Reporter implements them once) and every
// CreateJobs call joins the next transaction, which is flushed at once
// when the store is idle and gathers while a flush is in flight.
// ApplyReports judges a batch's reports in order, as if each ran alone,
// each behind its own fence, and gives each its own answer; nothing is
// answered before its batch commits, and a failed commit fails every
// report of its batch. ClaimMany serves many waiters with one statement.
//
// # State machine
//
// Public state and lease ownership are kept apart: State says where a job is
// in its life, (LeaseOwner, LeaseGeneration, LeaseExpiresAt) says who may
// publish for it. A job is never "owned" because its state string says so.
//
//	         create (idempotent)
//	              │
//	              ▼
//	┌──────── QUEUED ◄─────────── retry (backoff, available_at) ──┐
//	│             │ claim: generation+1, attempts+1               │
//	│             ▼                                               │
//	│          LEASED ── renew (same generation) ──► LEASED       │
//	│             │ expiry → reaper: QUEUED again (new generation  │
//	│             │          at the next claim)                    │
//	│             ├── complete ─────────────► SUCCEEDED           │
//	│             ├── retry (retryable, budget left) ─────────────┘
//	│             ├── retry (non-retryable) ► FAILED
//	│             ├── budget spent ─────────► DEAD ── replay ──► new job
//	│             │   (retry, or expiry seen by the reaper)       abandon
//	│             └── cancel ───────────────► CANCELLED
//	└── cancel ──────────────────────────────► CANCELLED
//
// Release takes LEASED back to QUEUED without spending the attempt. A client
// cancel of a LEASED job only sets CancelRequested: the holder learns it
// from Renew (RenewCancelRequested) and acknowledges with CancelByHolder;
// a Release of a cancel-requested job ends it CANCELLED too, and so does a
// Retry that would have queued it again. A lease that expires with no
// report is ended by ReapExpired as DecideExpiry says: its doc comment is
// the one place the rules of an expired lease are written. Claims take
// only QUEUED jobs. SUCCEEDED, FAILED,
// CANCELLED and DEAD are terminal (JobState.Terminal); replaying a DEAD job
// creates a new job and leaves the dead one as evidence.
//
// # Invariants
//
// These are the contract points of the design, with how they are kept. The
// storetest subtest named in brackets fails when one is broken.
//
//  1. Acceptance is one transaction. CreateJobs inserts the idempotency
//     record, the job row and its QUEUED event (sequence 1) in one
//     transaction; a batch is one transaction too. A failed commit, a
//     duplicate id or one invalid item leaves nothing, and the request id
//     is free afterwards. [Acceptance]
//  2. Duplicates resolve to one logical operation. The key is (tenant,
//     operation, request id); the record holds Fingerprint of the validated
//     spec — a versioned, length-prefixed canonical form with metadata
//     sorted by key, never raw bytes or a generated id. Same fingerprint:
//     the original job comes back with Replayed set; different:
//     ErrIdempotencyConflict. The record is inserted before the job and
//     the key is unique, so concurrent creates with one key serialise on it
//     and exactly one job is made. Records expire after the idempotency
//     window; an expired key starts a new operation. [Idempotency]
//  3. Only the current lease generation may publish. Every lease-bound
//     write is a compare-and-set on (tenant, job, state = leased, owner,
//     generation, expires_at > now); when it matches nothing the answer is
//     ErrLeaseLost. The one exception is the lost-response replay: the
//     generation that ended the job repeating the same terminal report
//     (Complete, Retry, CancelByHolder) gets the same job back, with no
//     new event. [Lease, Terminal]
//  4. Expired work becomes claimable. An expired lease already fences its
//     holder (expires_at > now fails); ReapExpired then ends it (see
//     DecideExpiry), appending LEASE_EXPIRED and recording the attempt as
//     lease_expired, and the next claim bumps the generation. No process
//     has to release a lease it can no longer use. Concurrent reapers skip
//     each other's rows, so each lease is ended once. [Lease, Cancel,
//     DeadLetter, Dispatch]
//  5. Retries are bounded and classified. RetryPolicy.Retryable decides
//     (the queue's non-retryable codes, then its retryable codes, then the
//     worker's flag); DecideRetry picks QUEUED at now + NextRetryDelay
//     (min(cap, base × multiplier^(attempt-1)) plus jitter from the
//     injectable EngineOptions.Rand, or the worker's longer retry-after),
//     FAILED, or DEAD when the attempt budget or the total retry deadline
//     is spent. available_at is stored, so a restart keeps the delay. DEAD
//     commits with its RUN_FAILED event. A worker that crashes never
//     reports, so the budget is also enforced when its lease expires (see
//     DecideExpiry). [Retry, DeadLetter]
//  6. Terminal state and its event commit atomically, and sequences are
//     gapless. An event is appended only by bumping jobs.last_event_seq
//     under the job's row lock (PostgreSQL) or the single writer (SQLite),
//     in the transaction that changes the state. Only a transition out of a
//     non-terminal state writes a terminal event, so a job has exactly one.
//     [Concurrency, Terminal]
//  7. Cancellation has a specified winner. Cancel and completion go through
//     the same compare-and-set on the job row; the loser gets
//     ErrAlreadyFinal or ErrLeaseLost and the state the winner left. A
//     cancel-requested job is never claimed again: its holder's Release,
//     or a Retry that would requeue it, ends it CANCELLED, and so does the
//     reaper once its lease expired unacknowledged. [Cancel]
//  8. One clock. Every params struct has Now; zero means the store's clock
//     (PostgreSQL's now() in production, the process clock for SQLite).
//     Every comparison in one call uses that one instant, and tests inject
//     it to cross expiry without sleeping.
//  9. Tenant in every key and every predicate. Another tenant's row is
//     answered exactly like a missing one (ErrNotFound, an empty list, a
//     lost lease) and is never changed. [Tenant]
//
// The bounds in limits.go (sizes, name rules, NUL bytes, durations) are
// checked in Go before any SQL runs, so both engines refuse the same input
// with the same *InvalidError naming the field, and nothing is written.
// [Validation]
//
// # Failures
//
// Every write is one short transaction that never spans a worker's work, so
// a crash at any point leaves either the whole change or none of it.
// EngineOptions.BeforeCommit lets tests fail any transaction just before it
// commits to prove this. What that leaves to recover:
//
//   - A coordinator crashes after committing but before answering: the
//     producer retries with the same request id and gets the job back; the
//     worker repeats its terminal report and gets the same outcome.
//   - A worker dies or is partitioned: its lease expires, the reaper
//     requeues the job, the next claim takes it at generation+1, and
//     anything the old holder still sends is refused with ErrLeaseLost. Its checkpoint and its effect
//     ledger reach the next attempt (ClaimedJob.Job.Checkpoint,
//     ClaimedJob.Effects); an effect left RESERVED or UNKNOWN is handed
//     back for reconciliation rather than re-reserved, a FAILED one may be
//     tried again.
//   - The database is briefly unreachable, or a transaction cannot be
//     serialised after a few retries: ErrUnavailable, and the caller may
//     retry the whole call.
//   - A job keeps failing: it ends DEAD with its attempt history and last
//     error, listed by ListDeadJobs until an operator replays (a new job,
//     ReplayOf set, idempotent) or abandons it; retention prunes it after
//     that like any finished job. A job that kills its worker every time
//     (a poison pill) gets there too: the reaper that finds its last lease
//     expired ends it DEAD with last error LEASE_EXPIRED instead of
//     queueing it again.
//   - Finished jobs accumulate: Prune deletes terminal jobs older than a
//     cut-off and expired idempotency records, in batches of BatchSize rows
//     per transaction, so it never holds a long transaction. It never
//     deletes a job that is not terminal, however old.
//   - A dependency fails across the fleet: its breaker (one row per tenant
//     and dependency, breaker.go) opens once the Retries with counted
//     codes in its window reach the threshold. Reports fold their outcomes
//     into it in the same batch transaction, locking it after their jobs;
//     claims skip the dependency's jobs while it is not closed, which
//     therefore stay QUEUED and spend nothing. When its open delay ends,
//     a claim locks it and admits exactly its probes (DecideProbes); the
//     first probe to report closes it or opens it again for longer. The
//     time a job was held is credited to its retry deadline
//     (Breaker.HeldDuring) when it next fails.
//   - A queue limits its concurrency keys or its start rate: claims on it
//     take its advisory lock and count what is leased and started first
//     (DecideQueueRoom), so two coordinators never exceed a limit
//     together.
package store
