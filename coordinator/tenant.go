package coordinator

import (
	"context"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// caller is who makes a call, as the auth interceptor established it: the
// principal's tenant, role and queue patterns. Handlers read the tenant
// only from here, never from a request.
type caller struct {
	tenant string
	role   store.Role
	// queues are the principal's queue patterns; nil means every queue.
	queues []string
	// id is the principal's id; empty for the anonymous caller of
	// --auth none, which owns no worker ids.
	id string
	// identity names the caller in audit records and job events
	// (store.Principal.Identity, or anonymousIdentity).
	identity string
	name     string
}

// anonymousIdentity is the identity of every call with --auth none.
const anonymousIdentity = "anonymous"

// anonymous is the caller of every call with --auth none: an admin of the
// configured tenant.
func anonymous(tenant string) *caller {
	return &caller{tenant: tenant, role: store.RoleAdmin, identity: anonymousIdentity}
}

// callerFor is the caller a principal makes.
func callerFor(p *store.Principal) *caller {
	return &caller{
		tenant: p.Tenant, role: p.Role, queues: p.Queues,
		id: p.ID, identity: p.Identity(), name: p.Name,
	}
}

// principal describes the caller for the API (GetVersionResponse.caller).
func (cl *caller) principal() *leaseholdv1.Principal {
	return &leaseholdv1.Principal{
		Id: cl.id, Name: cl.name, Role: RoleToProto(cl.role), Tenant: cl.tenant,
		Queues: cl.queues, Identity: cl.identity,
	}
}

// scoped reports whether the caller is limited to some queues.
func (cl *caller) scoped() bool { return len(cl.queues) > 0 }

// callerKey is the typed context key of the caller. An unexported struct
// type cannot collide with another package's key.
type callerKey struct{}

// withCaller returns ctx carrying cl.
func withCaller(ctx context.Context, cl *caller) context.Context {
	return context.WithValue(ctx, callerKey{}, cl)
}

// noCaller is what callerFrom returns for a context the auth interceptor
// never saw: no tenant (every store call rejects it as invalid rather than
// guessing one) and no role.
var noCaller = &caller{}

// callerFrom returns the caller the auth interceptor put in ctx.
func callerFrom(ctx context.Context) *caller {
	if cl, ok := ctx.Value(callerKey{}).(*caller); ok {
		return cl
	}
	return noCaller
}

// tenantFrom returns the caller's tenant, "" when ctx has no caller.
func tenantFrom(ctx context.Context) string { return callerFrom(ctx).tenant }
