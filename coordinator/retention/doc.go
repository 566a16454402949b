// Package retention removes finished jobs after the retention period and
// expired idempotency records, so the hot tables stay small.
//
// Several coordinators may run it against one database at once: each run
// is store.Prune, which works in bounded batches (short transactions) and is
// idempotent — a row deleted by one coordinator is simply not found by
// another — so no leader election is needed. A failed run is logged and the
// next interval tries again.
//
// # Invariants
//
//   - Only terminal jobs are removed, and only once they finished more than
//     Retention ago; queued and leased jobs are never touched.
//   - Idempotency records are removed once their window has passed, so a
//     request_id can be reused after the window, never within it.
package retention
