package coordinator

import (
	"context"
	"fmt"
	"sync"

	"google.golang.org/grpc/codes"

	"github.com/leasehold/leasehold/store"
)

// A worker id belongs to the principal that first used it in its tenant:
// only that principal may claim, connect and report as it. Without this, a
// principal that can see a lease (its job id, generation and owner: any
// reader can) could publish for it by presenting another worker's id.
//
// checkWorker is the one place this is enforced. Every call that acts as a
// worker calls it with the worker id it acts as, after validation and
// before the store: Claim and Connect (through checkClaim), and each
// lease-bound call with its token's worker id (Renew with each distinct
// one). Reports sent on a Connect stream need no call of their own: the
// stream accepts only tokens of its Hello's worker id, checked when the
// stream opened.

// workerOwnersMax bounds the cache of known owners; when full it starts
// over.
const workerOwnersMax = 100_000

// workerOwners caches bindings already confirmed by the store. A binding
// never changes while its principal is valid, and a revoked principal
// cannot authenticate, so entries need no expiry.
type workerOwners struct {
	mu sync.Mutex // guards owners
	// owners maps (tenant, worker id) to the owning principal's id.
	owners map[sessionKey]string
}

func (w *workerOwners) get(k sessionKey) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id, ok := w.owners[k]
	return id, ok
}

func (w *workerOwners) put(k sessionKey, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owners == nil || len(w.owners) >= workerOwnersMax {
		w.owners = make(map[sessionKey]string)
	}
	w.owners[k] = id
}

// checkWorker makes sure the caller may act as workerID, binding the id to
// the caller when nobody owns it yet. It answers PERMISSION_DENIED when
// another valid principal owns the id. The anonymous caller of --auth none
// owns nothing and is never refused. workerID must be valid already.
func (c *Coordinator) checkWorker(ctx context.Context, workerID string) error {
	cl := callerFrom(ctx)
	if cl.id == "" {
		return nil
	}
	k := sessionKey{cl.tenant, workerID}
	if owner, ok := c.workerOwners.get(k); ok && owner == cl.id {
		return nil
	}
	owner, err := c.store.BindWorker(ctx, store.BindWorkerParams{
		Tenant: cl.tenant, WorkerID: workerID, PrincipalID: cl.id, Now: c.now(),
	})
	if err != nil {
		return toStatus(ctx, c.log, err)
	}
	if owner != cl.id {
		return statusError(codes.PermissionDenied, ReasonPermissionDenied,
			fmt.Sprintf("worker id %q belongs to another principal: choose another worker id", workerID))
	}
	c.workerOwners.put(k, owner)
	return nil
}

// checkClaim authorizes a claim (unary Claim or Connect's Hello): every
// queue must be in the caller's scope, and the worker id the caller's.
func (c *Coordinator) checkClaim(ctx context.Context, workerID string, queues []string) error {
	if err := checkQueues(ctx, "queues", queues); err != nil {
		return err
	}
	return c.checkWorker(ctx, workerID)
}

// checkWorkers is checkWorker for the distinct worker ids of tokens.
func (c *Coordinator) checkWorkers(ctx context.Context, tokens []store.LeaseToken) error {
	seen := make(map[string]bool, 1)
	for _, t := range tokens {
		if seen[t.WorkerID] {
			continue
		}
		seen[t.WorkerID] = true
		if err := c.checkWorker(ctx, t.WorkerID); err != nil {
			return err
		}
	}
	return nil
}
