// Package dispatch hands leases to waiting workers: Connect streams with
// credits and long-polling unary Claims.
//
// # Model
//
// A Waiter is registered with a number of credits (how many leases it may
// still receive). The Dispatcher runs one loop. Each round takes the set of
// woken queues (coalesced since the previous round), picks the waiters with
// credits that consume one of them and have no claim in flight, and calls
// store.Claim once per waiter for up to all of its credits. Claimed jobs go
// to the waiter's Deliver; its credits drop by what was delivered, so a
// waiter never receives more leases than it was granted.
//
// The store's Claim sets one lease owner per call, and a lease's fencing
// token names its worker, so one call cannot lease jobs for several worker
// identities: batching is per waiter (all of its credits in one call), and
// wake-ups are coalesced so a burst of creates costs one round.
//
// # Wake-ups
//
//   - store.JobNotifier, when the engine implements it: PostgreSQL
//     LISTEN/NOTIFY reaches every coordinator on the database, so a job
//     created anywhere wakes idle streams everywhere within milliseconds.
//   - Local hints (Wake) from this coordinator's own writes.
//   - Polling, the fallback and the only way to notice jobs that become
//     available by time (scheduled jobs, retry backoff, expired leases):
//     every PollInterval, doubling while polls find nothing up to
//     PollMaxInterval, reset by any delivery or notification.
//
// # Failures
//
// A claim that fails (store unavailable) is logged and retried by the next
// wake-up or poll. A lease that cannot be delivered because its waiter went
// away is released at once (without spending the attempt); if even that
// fails it simply expires — expiry is the recovery, and the next claim
// fences the old generation.
package dispatch
