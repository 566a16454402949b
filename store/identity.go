package store

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// Identity: who calls the coordinator (principals: API keys and client
// certificate subjects), which principal a worker id belongs to, and the
// audit log of operator actions. The coordinator decides what a principal
// may do; the store only keeps the records.

// Role is what a principal may do. The strings are stored.
type Role string

// The roles.
const (
	RoleProducer Role = "producer"
	RoleWorker   Role = "worker"
	RoleOperator Role = "operator"
	RoleReader   Role = "reader"
	RoleAdmin    Role = "admin"
)

// Roles lists every role, for validation and help texts.
var Roles = []Role{RoleProducer, RoleWorker, RoleOperator, RoleReader, RoleAdmin}

// Valid reports whether r is one of Roles.
func (r Role) Valid() bool {
	for _, v := range Roles {
		if r == v {
			return true
		}
	}
	return false
}

// Bounds of identity records.
const (
	// PrincipalNameMaxLen bounds a principal's name.
	PrincipalNameMaxLen = 128
	// QueuePatternsMax bounds a principal's queue patterns.
	QueuePatternsMax = 32
	// KeyHashLen is the length of Principal.KeyHash (SHA-256).
	KeyHashLen = sha256.Size
	// AuditDataMaxLen bounds an audit event's JSON data.
	AuditDataMaxLen = 8192
)

// Principal is an API key or a client-certificate subject, with the role,
// tenant and queue patterns every call it authenticates runs with.
type Principal struct {
	Tenant string
	ID     string
	Name   string
	Role   Role
	// Queues are patterns (see MatchQueue); empty means every queue.
	Queues []string
	// KeyHash is KeyHash(secret) for an API key; nil for a certificate
	// principal.
	KeyHash []byte
	// CertSubject is "CN=<common name>" for a certificate principal; empty
	// for an API key.
	CertSubject string
	CreatedAt   time.Time
	// CreatedBy is the identity of the creator ("offline" when created
	// against the database directly).
	CreatedBy string
	// LastUsedAt is refreshed at most every PrincipalTouchInterval.
	LastUsedAt time.Time
	// RevokedAt is zero while the principal is valid.
	RevokedAt time.Time
}

// PrincipalTouchInterval is how stale LastUsedAt may get: TouchPrincipal
// writes only when the stored value is older, so authentication does not
// write on every call.
const PrincipalTouchInterval = time.Minute

// Identity is how audit records and job events name the principal:
// "key:<id>" or "cert:CN=<common name>".
func (p *Principal) Identity() string {
	if p.CertSubject != "" {
		return "cert:" + p.CertSubject
	}
	return "key:" + p.ID
}

// Revoked reports whether the principal was revoked.
func (p *Principal) Revoked() bool { return !p.RevokedAt.IsZero() }

// KeyHash is how an API key is stored: its SHA-256. A fast unsalted hash
// is enough because keys are 256-bit random secrets made by the server,
// not passwords: there is no dictionary to try and brute force is out of
// reach, so a slow or salted hash (bcrypt, argon2) would only slow down
// every authentication. A database leak reveals hashes that cannot be
// presented as keys.
func KeyHash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

// CertSubjectFor is the CertSubject of the principal of certificates with
// common name cn.
func CertSubjectFor(cn string) string { return "CN=" + cn }

// CreatePrincipalParams creates a principal and records the
// AuditAPIKeyCreated event in the same transaction. The store assigns the
// id.
type CreatePrincipalParams struct {
	Tenant string
	Name   string
	Role   Role
	Queues []string
	// Exactly one of KeyHash (len KeyHashLen) and CertSubject is set.
	KeyHash     []byte
	CertSubject string
	// Actor is who creates it: the identity recorded as CreatedBy and in
	// the audit event.
	Actor     string
	ActorName string
	Now       time.Time
}

// RevokePrincipalParams revokes a principal of a tenant, recording the
// AuditAPIKeyRevoked event in the same transaction (only the first time).
type RevokePrincipalParams struct {
	Tenant    string
	ID        string
	Actor     string
	ActorName string
	Now       time.Time
}

// BindWorkerParams claims a worker id for a principal.
type BindWorkerParams struct {
	Tenant      string
	WorkerID    string
	PrincipalID string
	Now         time.Time
}

// AuditAction names an operator action. The strings are stored.
type AuditAction string

// The audited actions.
const (
	AuditQueuePolicyUpdated    AuditAction = "queue_policy_updated"
	AuditQueuePaused           AuditAction = "queue_paused"
	AuditQueueResumed          AuditAction = "queue_resumed"
	AuditJobCancelled          AuditAction = "job_cancelled"
	AuditDeadJobReplayed       AuditAction = "dead_job_replayed"
	AuditDeadJobAbandoned      AuditAction = "dead_job_abandoned"
	AuditAPIKeyCreated         AuditAction = "api_key_created"
	AuditAPIKeyRevoked         AuditAction = "api_key_revoked"
	AuditBreakerReset          AuditAction = "breaker_reset"
	AuditBreakerForcedOpen     AuditAction = "breaker_forced_open"
	AuditBreakerPolicyUpdated  AuditAction = "breaker_policy_updated"
	AuditWorkerBindingReleased AuditAction = "worker_binding_released"
	// AuditAuthenticationFailures is the coordinator's summary of refused
	// authentications (no caller: the coordinator is the actor).
	AuditAuthenticationFailures AuditAction = "authentication_failures"
	AuditScheduleCreated        AuditAction = "schedule_created"
	AuditScheduleUpdated        AuditAction = "schedule_updated"
	AuditScheduleDeleted        AuditAction = "schedule_deleted"
	AuditSchedulePaused         AuditAction = "schedule_paused"
	AuditScheduleResumed        AuditAction = "schedule_resumed"
	AuditScheduleTriggered      AuditAction = "schedule_triggered"
	AuditOperationStarted       AuditAction = "operation_started"
	AuditOperationFinished      AuditAction = "operation_finished"
	AuditOperationCancelled     AuditAction = "operation_cancelled"
	AuditOperationFailed        AuditAction = "operation_failed"
	// AuditConsoleSignIn and AuditConsoleSignInRefused are web console
	// sign-in attempts (AdminService.RecordConsoleSignIn).
	AuditConsoleSignIn        AuditAction = "console_sign_in"
	AuditConsoleSignInRefused AuditAction = "console_sign_in_refused"
)

// AuditEvent is one recorded operator action.
type AuditEvent struct {
	Tenant    string
	ID        string
	At        time.Time
	Actor     string
	ActorName string
	Action    AuditAction
	Target    string
	// Data is a JSON object ("{}" when there is nothing to add).
	Data string
}

// AppendAuditParams records one action. The store assigns the id.
type AppendAuditParams struct {
	Tenant    string
	Actor     string
	ActorName string
	Action    AuditAction
	Target    string
	// Data is a JSON object or empty.
	Data string
	Now  time.Time
}

// ListAuditParams pages a tenant's audit log, newest first.
type ListAuditParams struct {
	Tenant string
	// Limit: 0 = 50, capped at ListLimitMax.
	Limit  int
	Cursor string
}

// AuditPage is one page of audit events.
type AuditPage struct {
	Events     []AuditEvent
	NextCursor string
}

// Identities is the part of Store that keeps identity records. Principals
// are found by key hash or certificate subject across tenants (the secret
// or the certificate decides the tenant); everything else is scoped by
// tenant like the rest of the store.
type Identities interface {
	// CreatePrincipal stores a new principal and its audit event.
	// ErrAlreadyExists when a valid principal already has CertSubject.
	CreatePrincipal(ctx context.Context, p CreatePrincipalParams) (*Principal, error)
	// ListPrincipals lists a tenant's principals, oldest first, revoked
	// ones only when includeRevoked.
	ListPrincipals(ctx context.Context, tenant string, includeRevoked bool) ([]Principal, error)
	// ValidPrincipals lists the valid (unrevoked) principals of every
	// tenant, at most limit of them, in no particular order: the
	// coordinator authenticates from this list held in memory, so that an
	// unknown key costs no query.
	ValidPrincipals(ctx context.Context, limit int) ([]Principal, error)
	// PrincipalByKeyHash finds the principal of an API key, revoked or
	// not; ErrNotFound when there is none.
	PrincipalByKeyHash(ctx context.Context, hash []byte) (*Principal, error)
	// PrincipalByCertSubject finds the valid principal of a certificate
	// subject; ErrNotFound when there is none.
	PrincipalByCertSubject(ctx context.Context, subject string) (*Principal, error)
	// RevokePrincipal revokes a principal (a no-op returning it when it is
	// already revoked); ErrNotFound for another tenant's or a missing id.
	RevokePrincipal(ctx context.Context, p RevokePrincipalParams) (*Principal, error)
	// TouchPrincipal sets LastUsedAt to now when it is older than
	// PrincipalTouchInterval (or unset).
	TouchPrincipal(ctx context.Context, tenant, id string, now time.Time) error
	// BindWorker makes principalID the owner of the worker id unless
	// another principal owns it, and returns the owner. A worker id owned
	// by a revoked principal passes to the next principal that binds it,
	// so rotating a key does not strand fixed worker ids.
	BindWorker(ctx context.Context, p BindWorkerParams) (owner string, err error)
	// WorkerOwner reads the valid principal that owns a worker id, without
	// binding it: "" when nobody owns it or its owner was revoked.
	WorkerOwner(ctx context.Context, tenant, workerID string) (owner string, err error)
	// ReleaseWorker removes a worker id's binding (an operator's action),
	// returning the owner it had ("" when it had none).
	ReleaseWorker(ctx context.Context, tenant, workerID string) (owner string, err error)
	// AppendAudit records an operator action.
	AppendAudit(ctx context.Context, p AppendAuditParams) (*AuditEvent, error)
	// ListAudit pages a tenant's audit log newest first (at desc, id desc).
	ListAudit(ctx context.Context, p ListAuditParams) (*AuditPage, error)
	// LeaseKey returns the key that signs lease secrets, shared by every
	// coordinator of the database: the stored one, or candidate, stored
	// now, when there is none yet.
	LeaseKey(ctx context.Context, candidate []byte) ([]byte, error)
}

// LeaseKeyLen is the length of the lease-signing key, in bytes.
const LeaseKeyLen = 32

// ValidateLeaseKey checks a candidate lease key.
func ValidateLeaseKey(key []byte) error {
	if len(key) != LeaseKeyLen {
		return Invalid("lease_key", fmt.Sprintf("must be %d bytes", LeaseKeyLen))
	}
	return nil
}

// ValidQueuePattern reports whether s is a queue name in which "*" may
// stand for any run of characters.
func ValidQueuePattern(s string) bool {
	if s == "*" {
		return true
	}
	return ValidName(strings.ReplaceAll(s, "*", "x"))
}

// MatchQueue reports whether queue matches one of patterns; no patterns
// match every queue. A pattern is a queue name where "*" matches any run
// of characters (queue names have no '/', so path.Match's "*" is exactly
// that, and ValidQueuePattern leaves no other metacharacter).
func MatchQueue(patterns []string, queue string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if ok, err := path.Match(p, queue); err == nil && ok {
			return true
		}
	}
	return false
}

// ValidateCreatePrincipal checks a CreatePrincipalParams.
func ValidateCreatePrincipal(p CreatePrincipalParams) error {
	if !ValidWorkerID(p.Tenant) {
		return Invalid("tenant", "must be 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	if err := checkText("name", p.Name, PrincipalNameMaxLen, false); err != nil {
		return err
	}
	if !p.Role.Valid() {
		return Invalid("role", "must be producer, worker, operator, reader or admin")
	}
	if len(p.Queues) > QueuePatternsMax {
		return Invalid("queues", fmt.Sprintf("must have at most %d patterns", QueuePatternsMax))
	}
	for i, q := range p.Queues {
		if !ValidQueuePattern(q) {
			return Invalid(fmt.Sprintf("queues[%d]", i), "must be a queue name, optionally with * wildcards (e.g. billing.*)")
		}
	}
	switch {
	case (len(p.KeyHash) == 0) == (p.CertSubject == ""):
		return Invalid("key_hash", "exactly one of key_hash and cert_subject must be set")
	case p.KeyHash != nil && len(p.KeyHash) != KeyHashLen:
		return Invalid("key_hash", fmt.Sprintf("must be %d bytes", KeyHashLen))
	case p.CertSubject != "":
		cn, ok := strings.CutPrefix(p.CertSubject, "CN=")
		if !ok {
			return Invalid("cert_subject", "must be CN=<common name>")
		}
		if err := checkText("certificate_common_name", cn, NameMaxLen*2, true); err != nil {
			return err
		}
	}
	return checkText("actor", p.Actor, 512, false)
}

// ValidateAppendAudit checks an AppendAuditParams.
func ValidateAppendAudit(p AppendAuditParams) error {
	if err := ValidateTenant(p.Tenant); err != nil {
		return err
	}
	if p.Action == "" {
		return Invalid("action", "is required")
	}
	if err := checkText("actor", p.Actor, 512, false); err != nil {
		return err
	}
	if err := checkText("target", p.Target, 512, false); err != nil {
		return err
	}
	return checkText("data", p.Data, AuditDataMaxLen, false)
}

// EncodeAuditCursor is the opaque cursor after the event e.
func EncodeAuditCursor(e AuditEvent) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(e.At.UnixMicro(), 10) + ":" + e.ID))
}

// DecodeAuditCursor reads a cursor made by EncodeAuditCursor.
func DecodeAuditCursor(cursor string) (at time.Time, id string, err error) {
	raw, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil {
		return time.Time{}, "", Invalid("cursor", "is not a cursor this server issued")
	}
	ts, id, ok := strings.Cut(string(raw), ":")
	micros, perr := strconv.ParseInt(ts, 10, 64)
	if !ok || perr != nil || id == "" {
		return time.Time{}, "", Invalid("cursor", "is not a cursor this server issued")
	}
	return time.UnixMicro(micros).UTC(), id, nil
}

// ActorOffline is the actor of a principal created against the database
// directly (`leasehold key create --database-url`), with no principal
// behind the call.
const ActorOffline = "offline"

// PrincipalAuditData is the data of a principal's create and revoke audit
// events: what it is, never a secret or a hash.
func PrincipalAuditData(p *Principal) string {
	queues := p.Queues
	if queues == nil {
		queues = []string{}
	}
	// The fields are in the order the map this replaced encoded in
	// (sorted keys).
	b, err := json.Marshal(struct {
		Identity string   `json:"identity"`
		Name     string   `json:"name"`
		Queues   []string `json:"queues"`
		Role     string   `json:"role"`
	}{Identity: p.Identity(), Name: p.Name, Queues: queues, Role: string(p.Role)})
	if err != nil {
		panic("store: unencodable audit data: " + err.Error()) // strings only: impossible
	}
	return string(b)
}

// DecideRevoke is RevokePrincipal's decision on the principal as stored
// and locked (nil when the tenant has none): ErrNotFound for a missing
// one; revoke is false for one revoked already, answered as it is, so
// that a repeated revoke changes nothing and is audited once.
func DecideRevoke(existing *Principal, id string) (revoke bool, err error) {
	switch {
	case existing == nil:
		return false, fmt.Errorf("principal %s: %w", id, ErrPrincipalNotFound)
	case existing.Revoked():
		return false, nil
	}
	return true, nil
}

// RevokeAudit is the audit event of p's revoke of the principal revoked.
func RevokeAudit(p RevokePrincipalParams, revoked *Principal) AppendAuditParams {
	return AppendAuditParams{
		Tenant: p.Tenant, Actor: p.Actor, ActorName: p.ActorName, Action: AuditAPIKeyRevoked,
		Target: revoked.ID, Data: PrincipalAuditData(revoked),
	}
}
