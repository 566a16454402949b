// Package dispatch hands leases to waiting workers: Connect streams with
// credits, and unary Claims (one-shot waiters), in the same fair rounds.
//
// # Model
//
// A Waiter is registered with a number of credits (how many leases it may
// still receive), capped at its declared capacity less the leases it holds.
// The Dispatcher runs one loop. Each round takes the woken waiters (by
// queue wake-ups coalesced since the previous round, new credits, or a
// poll) that have credits, no claim in flight and are not backlogged (a
// stream whose pushes are not being read), groups them by tenant and queue
// set, and makes one store.ClaimMany per group for all of their credits:
// the store hands the jobs out in proportion to what each waiter asked
// (store.ClaimSlots), so stream and unary workers share fairly. Waiters of
// one group that share a worker id are claimed for separately, since a
// lease names its worker. A waiter's credits drop by its leases before
// Deliver queues them (and come back if Deliver refuses them), so a waiter
// never receives more leases than it was granted, and a grant the worker
// sends for the capacity those leases free, which can arrive while Deliver
// is still returning, is added to credits already spent rather than capped
// away.
//
// After a round that delivered leases the next one waits Config.Cooldown
// (2ms): busy workers return credits one finished job at a time, and the
// pause gathers them into one claim instead of a claim (and a commit) per
// credit. A round that found nothing does not wait, so a job created while
// workers wait is claimed at once.
//
// # Fast start
//
// A create need not wait for a round: Reserve sets aside waiters with
// free credits for the queues a create is about to fill (marked claiming,
// so no round claims for them meanwhile), the store leases the new jobs
// to them in the create's own transaction (store.HandoffCreator), and
// Reservation.Finish delivers the leases as a round would. A wake-up that
// came while a waiter was reserved is served by a round after Finish.
//
// Idle costs a constant amount of store work: with no ready jobs, a poll
// is one claim per group, however many waiters.
//
// # Wake-ups
//
//   - store.JobNotifier, when the engine implements it: PostgreSQL
//     LISTEN/NOTIFY reaches every coordinator on the database, so a job
//     created anywhere wakes idle streams everywhere within milliseconds.
//   - Local hints (Wake) from this coordinator's own writes and from the
//     lease reaper (coordinator/reaper), which requeues expired leases.
//   - Polling, the fallback and the way to notice jobs that become
//     available by time (scheduled jobs, retry backoff): every
//     PollInterval, doubling while polls find nothing up to
//     PollMaxInterval, reset by any delivery or notification.
//
// # Failures
//
// A claim that fails (store unavailable) is logged and retried by the next
// wake-up or poll; a unary Claim that does not wait gets the error. Leases
// that cannot be delivered because their waiter went away or is draining
// are released at once, in one batch (without spending the attempt); if
// even that fails they simply expire — expiry is the recovery, and the
// next claim fences the old generation.
package dispatch
