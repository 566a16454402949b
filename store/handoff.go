package store

import (
	"context"
	"fmt"
)

// HandoffCreator is a Store that can lease jobs in the transaction that
// creates them: a job created while a worker waits for work starts after
// one commit instead of two (the create's, then a dispatch round's claim),
// and without waiting for the round.
//
// CreateJobsHandoff is CreateJobs, and then, in the same transaction, the
// claims: each is ClaimMany with the same rules (claim order, shares in
// proportion to Max, paused queues skipped, jobs held by a breaker that is
// not closed skipped), so a claim may also lease an older job of its
// queue than the ones just created. A claim that HandoffAllowed refuses
// leases nothing, and a claim that fails is rolled back alone: the creates
// still commit, and the caller's next dispatch round claims instead. The
// leases are returned only once the transaction has committed; when
// CreateJobsHandoff returns an error, nothing was leased. Creates whose
// jobs were all leased by a claim send no job notification for their
// queue, since there is nothing left to claim.
type HandoffCreator interface {
	CreateJobsHandoff(ctx context.Context, p CreateJobsParams, claims []ClaimManyParams) ([]CreateResult, []ClaimedJob, error)
}

// HandoffAllowed reports whether a claim in a create's transaction may
// lease from a queue with policy p. A queue with limits (concurrency, per
// key, rate) is left to the dispatch round's claim, which counts its
// usage under the queue's lock; holding that lock in every create would
// serialise the creates of the queue.
func HandoffAllowed(p QueuePolicy) bool {
	return !p.Paused && !p.Limited()
}

// ValidateHandoff checks the claims of a CreateJobsHandoff: each a valid
// ClaimManyParams of the create's tenant.
func ValidateHandoff(tenant string, claims []ClaimManyParams) error {
	for i, c := range claims {
		if c.Tenant != tenant {
			return Invalid(fmt.Sprintf("claims[%d].tenant", i), "must be the create's tenant")
		}
		if err := ValidateClaimMany(c); err != nil {
			return fmt.Errorf("claims[%d]: %w", i, err)
		}
	}
	return nil
}
