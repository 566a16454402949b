// Package relay moves outbox rows (package outbox) into Leasehold as jobs.
//
// # How a batch flows
//
// A worker opens a transaction on the source database and claims up to
// BatchSize rows with SELECT … ORDER BY id FOR UPDATE SKIP LOCKED, so
// several workers and several relay processes share one outbox without
// waiting on each other. It sends the rows with BatchCreateJobs, each with
// its row's request_id as the idempotency key, in calls bounded by
// CallBytesMax. Rows are deleted in the claiming transaction, after the
// calls succeeded, and the transaction commits.
//
// # Failures
//
//   - The relay dies (or loses its database) after the coordinator
//     committed but before its own COMMIT: the transaction aborts, the row
//     locks go, the rows stay. The next claim sends them again and the
//     coordinator answers with the same jobs (a replay): one job per row.
//   - The coordinator is unreachable or overloaded (UNAVAILABLE,
//     DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED, …): rows already created in
//     this round are deleted, the rest stay, and the worker backs off.
//   - The coordinator refuses a call for good (INVALID_ARGUMENT,
//     ALREADY_EXISTS, PERMISSION_DENIED, OUT_OF_RANGE): a batch is all or
//     none, so the relay isolates the refused rows. When the refusal names
//     requests[i] that row is set aside at once; otherwise the batch is
//     split in halves until each refused row stands alone. Refused rows
//     move to outbox_dead with the error, in the same transaction that
//     deletes the delivered ones, and are counted.
//   - Idempotency lasts for the coordinator's idempotency window only: a
//     row older than that could become a second job. Rows older than half
//     the window are reported (metric and a warning log) by the stats loop.
//
// # Wake-ups
//
// Every insert statement into the outbox NOTIFYs the outbox's channel; the
// relay LISTENs on one connection and wakes every worker. Polling every
// PollInterval is the fallback for missed notifications. A worker whose
// claim came back full claims again at once.
//
// No order is promised: rows are claimed in id order by each worker, but
// several workers and relays deliver concurrently.
package relay
