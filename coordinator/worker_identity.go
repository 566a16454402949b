package coordinator

import (
	"context"
	"fmt"
	"sync"
	"time"

	"google.golang.org/grpc/codes"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// A worker id belongs to the principal that first used it in its tenant:
// only that principal may claim, connect and report as it. Without this, a
// principal that can see a lease (its job id, generation and owner: any
// reader can) could publish for it by presenting another worker's id.
//
// A worker id binds on its first granted lease, not on a claim that got
// nothing: otherwise a key scoped to other queues could bind a worker id
// with an empty Claim and lock the real worker out. So Claim and Connect's
// Hello only check (checkClaim: refused when another principal owns the
// id, binding nothing), and checkWorker binds: after a unary Claim returns
// jobs (their leases are released when the bind is refused), before a
// stream pushes its first lease (session.bindOnce), and on each lease-bound
// call with its token's worker id (Renew with each distinct one). Reports
// sent on a Connect stream need no call of their own: the stream accepts
// only tokens of its Hello's worker id. An operator frees a worker id
// with AdminService.ReleaseWorkerBinding.

// workerOwnersMax bounds the cache of known owners; when full it starts
// over.
const workerOwnersMax = 100_000

// workerOwnersTTL bounds how long a cached owner is trusted: an operator's
// release made through another coordinator is seen here within it.
const workerOwnersTTL = time.Minute

// workerOwners caches bindings already confirmed by the store. A binding
// changes only when it is removed from the store (store.ReleaseWorker),
// seen here within workerOwnersTTL, and a revoked principal cannot
// authenticate.
type workerOwners struct {
	mu sync.Mutex // guards owners
	// owners maps (tenant, worker id) to the owning principal's id.
	owners map[sessionKey]cachedOwner
}

type cachedOwner struct {
	id      string
	expires time.Time
}

func (w *workerOwners) get(k sessionKey) (string, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o, ok := w.owners[k]
	if !ok || time.Now().After(o.expires) {
		return "", false
	}
	return o.id, true
}

func (w *workerOwners) put(k sessionKey, id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.owners == nil || len(w.owners) >= workerOwnersMax {
		w.owners = make(map[sessionKey]cachedOwner)
	}
	w.owners[k] = cachedOwner{id: id, expires: time.Now().Add(workerOwnersTTL)}
}

func (w *workerOwners) forget(k sessionKey) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.owners, k)
}

// workerBindingChange names ReleaseWorkerBinding for checkUnscoped: a
// worker id is tenant-wide, not a queue's.
const workerBindingChange = "releasing a worker id's binding"

// ReleaseWorkerBinding frees a worker id from its owner (an operator's
// action): this coordinator forgets it at once, others within
// workerOwnersTTL.
func (a *adminService) ReleaseWorkerBinding(ctx context.Context, req *leaseholdv1.ReleaseWorkerBindingRequest) (*leaseholdv1.ReleaseWorkerBindingResponse, error) {
	c := a.c
	if err := checkUnscoped(ctx, workerBindingChange); err != nil {
		return nil, err
	}
	tenant, id := tenantFrom(ctx), req.GetWorkerId()
	if !store.ValidWorkerID(id) {
		return nil, toStatus(ctx, c.log, store.Invalid("worker_id", "must be 1-128 characters of [A-Za-z0-9._:@/-]"))
	}
	owner, err := c.store.ReleaseWorker(ctx, tenant, id)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.identity.workerOwners.forget(sessionKey{tenant, id})
	c.audit(ctx, store.AuditWorkerBindingReleased, id, map[string]any{"previous_owner": owner})
	return &leaseholdv1.ReleaseWorkerBindingResponse{PreviousOwnerId: owner}, nil
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
	if owner, ok := c.identity.workerOwners.get(k); ok && owner == cl.id {
		return nil
	}
	owner, err := c.store.BindWorker(ctx, store.BindWorkerParams{
		Tenant: cl.tenant, WorkerID: workerID, PrincipalID: cl.id, Now: c.now(),
	})
	if err != nil {
		return toStatus(ctx, c.log, err)
	}
	if owner != cl.id {
		return workerTaken(workerID)
	}
	c.identity.workerOwners.put(k, owner)
	return nil
}

// checkClaim authorizes a claim (unary Claim or Connect's Hello): every
// queue must be in the caller's scope, and the worker id the caller's or
// nobody's. It binds nothing: the first granted lease does (checkWorker).
func (c *Coordinator) checkClaim(ctx context.Context, workerID string, queues []string) error {
	if err := checkQueues(ctx, "queues", queues); err != nil {
		return err
	}
	cl := callerFrom(ctx)
	if cl.id == "" {
		return nil
	}
	k := sessionKey{cl.tenant, workerID}
	if owner, ok := c.identity.workerOwners.get(k); ok && owner == cl.id {
		return nil
	}
	owner, err := c.store.WorkerOwner(ctx, cl.tenant, workerID)
	if err != nil {
		return toStatus(ctx, c.log, err)
	}
	switch owner {
	case "":
		return nil
	case cl.id:
		c.identity.workerOwners.put(k, owner)
		return nil
	default:
		return workerTaken(workerID)
	}
}

func workerTaken(workerID string) error {
	return statusError(codes.PermissionDenied, ReasonPermissionDenied,
		fmt.Sprintf("worker id %q belongs to another principal: choose another worker id", workerID))
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
