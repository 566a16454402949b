// Package outbox enqueues Leasehold jobs inside the application's own
// PostgreSQL transaction.
//
// A producer whose data lives in its own database cannot create a job and
// commit its change in one step: calling CreateJob after the commit loses
// the job when the process dies in between, calling it before creates a job
// for a change that may roll back. Instead the producer inserts an outbox
// row in the same transaction as its change (Enqueue, EnqueueSQL, or a
// plain INSERT from any language), and a relay (package outbox/relay,
// `leasehold relay`) creates the job later:
//
//   - The row commits or rolls back with the application's change, so
//     there is never a job for a rolled-back change, and never a committed
//     change without its row.
//   - The relay claims rows with FOR UPDATE SKIP LOCKED, calls
//     BatchCreateJobs with each row's request_id as the idempotency key,
//     and deletes the rows only after the call succeeded. A relay killed
//     between the call and the DELETE leaves the rows for the next claim,
//     whose call is answered as a replay: one job per row.
//   - Idempotency lasts only as long as the coordinator's idempotency
//     window (24 h by default): a row older than that could become a
//     second job. The relay alerts on rows older than half the window.
//
// The schema lives in its own PostgreSQL schema (SchemaDefault,
// "leasehold_outbox") with its own version table; Install and Uninstall
// are idempotent, and SchemaSQL renders the same script for a migration
// tool. The CHECK constraints are generated from the limits the
// coordinator validates (package store), so a row the outbox accepts is
// one the coordinator accepts, except for queue scopes and configured
// limits only the coordinator knows; those rows are moved to the
// outbox_dead table by the relay.
//
// A row may carry a unique key (schema version 2, Job.UniqueKey): the
// relay sends it as the job's unique key, and a duplicate of a live job
// counts as delivered.
package outbox
