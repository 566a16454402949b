package coordinator

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// API keys, certificate principals and the audit log: AdminService's
// CreateApiKey, ListApiKeys, RevokeApiKey and ListAuditEvents, and the
// audit record every operator action leaves.

// NewAPIKey returns a new API key — APIKeyPrefix and 32 random bytes in
// unpadded base64url, 256 bits of entropy — and the hash to store
// (store.KeyHash). The key itself is shown once and stored nowhere.
func NewAPIKey() (secret string, hash []byte, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("generate an API key: %w", err)
	}
	secret = APIKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	return secret, store.KeyHash(secret), nil
}

// roles maps the API's roles to the store's.
var roles = map[leaseholdv1.Role]store.Role{
	leaseholdv1.Role_ROLE_PRODUCER: store.RoleProducer,
	leaseholdv1.Role_ROLE_WORKER:   store.RoleWorker,
	leaseholdv1.Role_ROLE_OPERATOR: store.RoleOperator,
	leaseholdv1.Role_ROLE_READER:   store.RoleReader,
	leaseholdv1.Role_ROLE_ADMIN:    store.RoleAdmin,
}

// RoleFromProto converts an API role; ok is false for ROLE_UNSPECIFIED and
// unknown values.
func RoleFromProto(r leaseholdv1.Role) (store.Role, bool) {
	role, ok := roles[r]
	return role, ok
}

// RoleToProto converts a store role.
func RoleToProto(r store.Role) leaseholdv1.Role {
	for k, v := range roles {
		if v == r {
			return k
		}
	}
	return leaseholdv1.Role_ROLE_UNSPECIFIED
}

// ToPrincipal converts a principal for the API. It never carries the key
// hash.
func ToPrincipal(p *store.Principal) *leaseholdv1.Principal {
	return &leaseholdv1.Principal{
		Id: p.ID, Name: p.Name, Role: RoleToProto(p.Role), Tenant: p.Tenant, Queues: p.Queues,
		Identity: p.Identity(), CreatedAt: ts(p.CreatedAt), CreatedBy: p.CreatedBy,
		LastUsedAt: ts(p.LastUsedAt), RevokedAt: ts(p.RevokedAt),
	}
}

var auditActions = map[store.AuditAction]leaseholdv1.AuditAction{
	store.AuditQueuePolicyUpdated:     leaseholdv1.AuditAction_AUDIT_ACTION_QUEUE_POLICY_UPDATED,
	store.AuditQueuePaused:            leaseholdv1.AuditAction_AUDIT_ACTION_QUEUE_PAUSED,
	store.AuditQueueResumed:           leaseholdv1.AuditAction_AUDIT_ACTION_QUEUE_RESUMED,
	store.AuditJobCancelled:           leaseholdv1.AuditAction_AUDIT_ACTION_JOB_CANCELLED,
	store.AuditDeadJobReplayed:        leaseholdv1.AuditAction_AUDIT_ACTION_DEAD_JOB_REPLAYED,
	store.AuditDeadJobAbandoned:       leaseholdv1.AuditAction_AUDIT_ACTION_DEAD_JOB_ABANDONED,
	store.AuditAPIKeyCreated:          leaseholdv1.AuditAction_AUDIT_ACTION_API_KEY_CREATED,
	store.AuditAPIKeyRevoked:          leaseholdv1.AuditAction_AUDIT_ACTION_API_KEY_REVOKED,
	store.AuditBreakerReset:           leaseholdv1.AuditAction_AUDIT_ACTION_BREAKER_RESET,
	store.AuditBreakerForcedOpen:      leaseholdv1.AuditAction_AUDIT_ACTION_BREAKER_FORCED_OPEN,
	store.AuditBreakerPolicyUpdated:   leaseholdv1.AuditAction_AUDIT_ACTION_BREAKER_POLICY_UPDATED,
	store.AuditWorkerBindingReleased:  leaseholdv1.AuditAction_AUDIT_ACTION_WORKER_BINDING_RELEASED,
	store.AuditAuthenticationFailures: leaseholdv1.AuditAction_AUDIT_ACTION_AUTHENTICATION_FAILURES,
	store.AuditScheduleCreated:        leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_CREATED,
	store.AuditScheduleUpdated:        leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_UPDATED,
	store.AuditScheduleDeleted:        leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_DELETED,
	store.AuditSchedulePaused:         leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_PAUSED,
	store.AuditScheduleResumed:        leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_RESUMED,
	store.AuditScheduleTriggered:      leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_TRIGGERED,
	store.AuditOperationStarted:       leaseholdv1.AuditAction_AUDIT_ACTION_OPERATION_STARTED,
	store.AuditOperationFinished:      leaseholdv1.AuditAction_AUDIT_ACTION_OPERATION_FINISHED,
	store.AuditOperationCancelled:     leaseholdv1.AuditAction_AUDIT_ACTION_OPERATION_CANCELLED,
	store.AuditOperationFailed:        leaseholdv1.AuditAction_AUDIT_ACTION_OPERATION_FAILED,
	store.AuditConsoleSignIn:          leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN,
	store.AuditConsoleSignInRefused:   leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN_REFUSED,
}

func toAuditEvent(e store.AuditEvent) *leaseholdv1.AuditEvent {
	return &leaseholdv1.AuditEvent{
		Id: e.ID, Time: ts(e.At), Actor: e.Actor, ActorName: e.ActorName,
		Action: auditActions[e.Action], Target: e.Target, DataJson: e.Data,
	}
}

// auditTimeout bounds recording an audit event after its action.
const auditTimeout = 5 * time.Second

// audit records an operator action the caller made, after it succeeded.
// It detaches from ctx: the action happened even if the client has gone,
// so its record must be written too. A failure to record is logged as an
// error, not returned: the action itself has committed.
func (c *Coordinator) audit(ctx context.Context, action store.AuditAction, target string, data map[string]any) {
	cl := callerFrom(ctx)
	raw := "{}"
	if len(data) > 0 {
		b, err := json.Marshal(data)
		if err == nil {
			raw = string(b)
		}
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if _, err := c.store.AppendAudit(actx, store.AppendAuditParams{
		Tenant: cl.tenant, Actor: cl.identity, ActorName: cl.name, Action: action, Target: target,
		Data: raw, Now: c.now(),
	}); err != nil {
		c.log.ErrorContext(ctx, "audit event not recorded", slog.String("action", string(action)),
			slog.String("target", target), slog.String("actor", cl.identity), slog.String("error", err.Error()))
	}
}

// auditCoordinator records what the coordinator itself observed (no
// caller made it): in the audit log of its tenant (Config.Tenant), with
// the actor "coordinator:" and its id.
func (c *Coordinator) auditCoordinator(ctx context.Context, action store.AuditAction, target string, data map[string]any) {
	raw, err := json.Marshal(data)
	if err != nil {
		raw = []byte("{}")
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), auditTimeout)
	defer cancel()
	if _, err := c.store.AppendAudit(actx, store.AppendAuditParams{
		Tenant: c.cfg.Tenant, Actor: "coordinator:" + c.cfg.ID, ActorName: "coordinator", Action: action, Target: target,
		Data: string(raw), Now: c.now(),
	}); err != nil {
		c.log.ErrorContext(ctx, "audit event not recorded", slog.String("action", string(action)),
			slog.String("target", target), slog.String("error", err.Error()))
	}
}

func (a *adminService) CreateApiKey(ctx context.Context, req *leaseholdv1.CreateApiKeyRequest) (*leaseholdv1.CreateApiKeyResponse, error) { //nolint:revive // the name is the generated AdminServiceServer method's
	c := a.c
	if err := checkUnscoped(ctx, "managing API keys"); err != nil {
		return nil, err
	}
	cl := callerFrom(ctx)
	role, ok := RoleFromProto(req.GetRole())
	if !ok {
		return nil, invalidArgument("role", "must be ROLE_PRODUCER, ROLE_WORKER, ROLE_OPERATOR, ROLE_READER or ROLE_ADMIN")
	}
	if t := req.GetTenant(); t != "" && t != cl.tenant {
		return nil, statusError(codes.PermissionDenied, ReasonPermissionDenied,
			"tenant: keys are created in the caller's own tenant; create the first key of another tenant offline (leasehold key create --database-url)")
	}
	p := store.CreatePrincipalParams{
		Tenant: cl.tenant, Name: req.GetName(), Role: role, Queues: req.GetQueues(),
		Actor: cl.identity, ActorName: cl.name, Now: c.now(),
	}
	var secret string
	if cn := req.GetCertificateCommonName(); cn != "" {
		p.CertSubject = store.CertSubjectFor(cn)
	} else {
		var err error
		if secret, p.KeyHash, err = NewAPIKey(); err != nil {
			return nil, toStatus(ctx, c.log, err)
		}
	}
	pr, err := c.store.CreatePrincipal(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, renameField(renameField(err, "cert_subject", "certificate_common_name"), "key_hash", "certificate_common_name"))
	}
	// Usable here at once; other coordinators load it within
	// principalMissRefresh of its first use there.
	c.identity.auth.dir.invalidate()
	return &leaseholdv1.CreateApiKeyResponse{Principal: ToPrincipal(pr), Secret: secret}, nil
}

func (a *adminService) ListApiKeys(ctx context.Context, req *leaseholdv1.ListApiKeysRequest) (*leaseholdv1.ListApiKeysResponse, error) { //nolint:revive // the name is the generated AdminServiceServer method's
	c := a.c
	if err := checkUnscoped(ctx, "managing API keys"); err != nil {
		return nil, err
	}
	ps, err := c.store.ListPrincipals(ctx, tenantFrom(ctx), req.GetIncludeRevoked())
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := make([]*leaseholdv1.Principal, 0, len(ps))
	for i := range ps {
		out = append(out, ToPrincipal(&ps[i]))
	}
	return &leaseholdv1.ListApiKeysResponse{Principals: out}, nil
}

func (a *adminService) RevokeApiKey(ctx context.Context, req *leaseholdv1.RevokeApiKeyRequest) (*leaseholdv1.RevokeApiKeyResponse, error) { //nolint:revive // the name is the generated AdminServiceServer method's
	c := a.c
	if err := checkUnscoped(ctx, "managing API keys"); err != nil {
		return nil, err
	}
	if err := jobID("id", req.GetId()); err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	cl := callerFrom(ctx)
	pr, err := c.store.RevokePrincipal(ctx, store.RevokePrincipalParams{
		Tenant: cl.tenant, ID: req.GetId(), Actor: cl.identity, ActorName: cl.name, Now: c.now(),
	})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	// Other coordinators notice within their cache TTL; this one at once.
	c.identity.auth.dir.invalidate()
	return &leaseholdv1.RevokeApiKeyResponse{Principal: ToPrincipal(pr)}, nil
}

func (a *adminService) ListAuditEvents(ctx context.Context, req *leaseholdv1.ListAuditEventsRequest) (*leaseholdv1.ListAuditEventsResponse, error) {
	c := a.c
	if err := checkUnscoped(ctx, "reading the audit log"); err != nil {
		return nil, err
	}
	size, err := pageSize("page_size", req.GetPageSize(), PageSizeDefault, PageSizeMax)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := pageToken("page_token", req.GetPageToken()); err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	page, err := c.store.ListAudit(ctx, store.ListAuditParams{Tenant: tenantFrom(ctx), Limit: size, Cursor: req.GetPageToken()})
	if err != nil {
		return nil, toStatus(ctx, c.log, renameField(err, "cursor", "page_token"))
	}
	out := make([]*leaseholdv1.AuditEvent, 0, len(page.Events))
	for _, e := range page.Events {
		out = append(out, toAuditEvent(e))
	}
	return &leaseholdv1.ListAuditEventsResponse{Events: out, NextPageToken: page.NextCursor}, nil
}
