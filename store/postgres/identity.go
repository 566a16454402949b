package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
)

// Identity records: principals, worker id owners and the audit log
// (store.Identities). These are cold paths (an authentication cache sits in
// front of them), so their statements live here rather than among the hot
// queries.

const principalColumns = `tenant, id, name, role, queues, key_hash, cert_subject,
	created_at, created_by, last_used_at, revoked_at`

// qInsertPrincipal stores a new principal.
const qInsertPrincipal = `
	INSERT INTO principals (tenant, id, name, role, queues, key_hash, cert_subject, created_at, created_by)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
	RETURNING ` + principalColumns

// qListPrincipals lists a tenant's principals, oldest first.
const qListPrincipals = `
	SELECT ` + principalColumns + ` FROM principals
	WHERE tenant = $1 AND ($2 OR revoked_at IS NULL)
	ORDER BY created_at, id`

// qValidPrincipals lists the valid principals of every tenant.
const qValidPrincipals = `
	SELECT ` + principalColumns + ` FROM principals WHERE revoked_at IS NULL LIMIT $1`

// qPrincipalByKeyHash finds an API key's principal in any tenant.
const qPrincipalByKeyHash = `SELECT ` + principalColumns + ` FROM principals WHERE key_hash = $1`

// qPrincipalByCertSubject finds the valid principal of a certificate
// subject in any tenant.
const qPrincipalByCertSubject = `
	SELECT ` + principalColumns + ` FROM principals WHERE cert_subject = $1 AND revoked_at IS NULL`

// qGetPrincipal reads one principal of a tenant.
const qGetPrincipal = `SELECT ` + principalColumns + ` FROM principals WHERE tenant = $1 AND id = $2`

// qRevokePrincipal revokes a valid principal; no row when it is missing or
// already revoked.
const qRevokePrincipal = `
	UPDATE principals SET revoked_at = $3
	WHERE tenant = $1 AND id = $2 AND revoked_at IS NULL
	RETURNING ` + principalColumns

// qTouchPrincipal refreshes last_used_at when it is older than $4.
const qTouchPrincipal = `
	UPDATE principals SET last_used_at = $3
	WHERE tenant = $1 AND id = $2 AND (last_used_at IS NULL OR last_used_at < $4)`

// qStoreLeaseKey stores the lease key unless one exists; qLeaseKey reads
// it (in a statement of its own, so that it sees a key another
// coordinator committed meanwhile).
const (
	qStoreLeaseKey = `INSERT INTO lease_keys (id, key, created_at) VALUES (1, $1, $2) ON CONFLICT (id) DO NOTHING`
	qLeaseKey      = `SELECT key FROM lease_keys WHERE id = 1`
)

// qBindWorker makes $3 the owner of a worker id that has none, or whose
// owner was revoked; no row when another valid principal owns it.
const qBindWorker = `
	INSERT INTO worker_identities AS w (tenant, worker_id, principal_id, bound_at)
	VALUES ($1, $2, $3, $4)
	ON CONFLICT (tenant, worker_id) DO UPDATE
	   SET principal_id = excluded.principal_id, bound_at = excluded.bound_at
	 WHERE w.principal_id = excluded.principal_id
	    OR EXISTS (SELECT 1 FROM principals p
	               WHERE p.tenant = w.tenant AND p.id = w.principal_id AND p.revoked_at IS NOT NULL)
	RETURNING principal_id`

// qWorkerOwner reads a worker id's owner.
const qWorkerOwner = `SELECT principal_id FROM worker_identities WHERE tenant = $1 AND worker_id = $2`

// qValidWorkerOwner reads a worker id's owner unless it was revoked.
const qValidWorkerOwner = `
	SELECT w.principal_id FROM worker_identities w
	  JOIN principals p ON p.tenant = w.tenant AND p.id = w.principal_id
	 WHERE w.tenant = $1 AND w.worker_id = $2 AND p.revoked_at IS NULL`

// qReleaseWorker removes a worker id's binding.
const qReleaseWorker = `DELETE FROM worker_identities WHERE tenant = $1 AND worker_id = $2 RETURNING principal_id`

const auditColumns = `tenant, id, at, actor, actor_name, action, target, data::text`

// qInsertAudit records one operator action.
const qInsertAudit = `
	INSERT INTO audit_events (tenant, id, at, actor, actor_name, action, target, data)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb)
	RETURNING ` + auditColumns

// qListAudit pages a tenant's audit log newest first, after the cursor
// ($2, $3) when $2 is set.
const qListAudit = `
	SELECT ` + auditColumns + ` FROM audit_events
	WHERE tenant = $1 AND ($2::timestamptz IS NULL OR (at, id) < ($2, $3))
	ORDER BY at DESC, id DESC
	LIMIT $4`

// principalsCertSubjectIndex is the unique index that allows one valid
// principal per certificate subject.
const principalsCertSubjectIndex = "principals_cert_subject_idx"

func scanPrincipal(row pgx.Row) (*store.Principal, error) {
	var (
		p                 store.Principal
		role              string
		certSubject       *string
		lastUsed, revoked *time.Time
	)
	if err := row.Scan(&p.Tenant, &p.ID, &p.Name, &role, &p.Queues, &p.KeyHash, &certSubject,
		&p.CreatedAt, &p.CreatedBy, &lastUsed, &revoked); err != nil {
		return nil, err
	}
	p.Role = store.Role(role)
	if certSubject != nil {
		p.CertSubject = *certSubject
	}
	if len(p.Queues) == 0 {
		p.Queues = nil
	}
	p.CreatedAt = p.CreatedAt.UTC()
	p.LastUsedAt, p.RevokedAt = timeOrZero(lastUsed), timeOrZero(revoked)
	return &p, nil
}

func scanAudit(row pgx.Row) (*store.AuditEvent, error) {
	var (
		e      store.AuditEvent
		action string
	)
	if err := row.Scan(&e.Tenant, &e.ID, &e.At, &e.Actor, &e.ActorName, &action, &e.Target, &e.Data); err != nil {
		return nil, err
	}
	e.At, e.Action = e.At.UTC(), store.AuditAction(action)
	return &e, nil
}

// insertAudit records an audit event inside tx.
func (s *Store) insertAudit(ctx context.Context, tx pgx.Tx, p store.AppendAuditParams, at time.Time) (*store.AuditEvent, error) {
	id, err := s.newID()
	if err != nil {
		return nil, err
	}
	data := p.Data
	if data == "" {
		data = "{}"
	}
	return scanAudit(tx.QueryRow(ctx, qInsertAudit, p.Tenant, id, at, p.Actor, p.ActorName, string(p.Action), p.Target, data))
}

// CreatePrincipal implements store.Identities.
func (s *Store) CreatePrincipal(ctx context.Context, p store.CreatePrincipalParams) (*store.Principal, error) {
	if err := store.ValidateCreatePrincipal(p); err != nil {
		return nil, err
	}
	queues := emptyIfNil(p.Queues)
	var certSubject *string
	if p.CertSubject != "" {
		certSubject = &p.CertSubject
	}
	actor := p.Actor
	if actor == "" {
		actor = store.ActorOffline
	}
	var out *store.Principal
	err := s.withTx(ctx, "create_principal", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		id, err := s.newID()
		if err != nil {
			return err
		}
		var keyHash []byte
		if len(p.KeyHash) > 0 {
			keyHash = p.KeyHash
		}
		pr, err := scanPrincipal(tx.QueryRow(ctx, qInsertPrincipal, p.Tenant, id, p.Name, string(p.Role), queues,
			keyHash, certSubject, now, actor))
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == codeUniqueViolation && pgErr.ConstraintName == principalsCertSubjectIndex {
				return fmt.Errorf("principal for %s: %w", p.CertSubject, store.ErrAlreadyExists)
			}
			return err
		}
		if _, err := s.insertAudit(ctx, tx, store.AppendAuditParams{
			Tenant: p.Tenant, Actor: actor, ActorName: p.ActorName, Action: store.AuditAPIKeyCreated,
			Target: pr.ID, Data: store.PrincipalAuditData(pr),
		}, now); err != nil {
			return err
		}
		out = pr
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListPrincipals implements store.Identities.
func (s *Store) ListPrincipals(ctx context.Context, tenant string, includeRevoked bool) ([]store.Principal, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qListPrincipals, tenant, includeRevoked)
	if err != nil {
		return nil, s.readError(ctx, "list_principals", err)
	}
	ps, err := collect(rows, scanPrincipal)
	if err != nil {
		return nil, s.readError(ctx, "list_principals", err)
	}
	out := make([]store.Principal, 0, len(ps))
	for _, p := range ps {
		out = append(out, *p)
	}
	return out, nil
}

// ValidPrincipals implements store.Identities.
func (s *Store) ValidPrincipals(ctx context.Context, limit int) ([]store.Principal, error) {
	rows, err := s.pool.Query(ctx, qValidPrincipals, max(limit, 0))
	if err != nil {
		return nil, s.readError(ctx, "valid_principals", err)
	}
	ps, err := collect(rows, scanPrincipal)
	if err != nil {
		return nil, s.readError(ctx, "valid_principals", err)
	}
	out := make([]store.Principal, 0, len(ps))
	for _, p := range ps {
		out = append(out, *p)
	}
	return out, nil
}

// PrincipalByKeyHash implements store.Identities.
func (s *Store) PrincipalByKeyHash(ctx context.Context, hash []byte) (*store.Principal, error) {
	if len(hash) != store.KeyHashLen {
		return nil, store.Invalid("key_hash", fmt.Sprintf("must be %d bytes", store.KeyHashLen))
	}
	return s.principalBy(ctx, "principal_by_key_hash", qPrincipalByKeyHash, hash)
}

// PrincipalByCertSubject implements store.Identities.
func (s *Store) PrincipalByCertSubject(ctx context.Context, subject string) (*store.Principal, error) {
	if err := store.ValidateText("cert_subject", subject, 512, true); err != nil {
		return nil, err
	}
	return s.principalBy(ctx, "principal_by_cert_subject", qPrincipalByCertSubject, subject)
}

func (s *Store) principalBy(ctx context.Context, op, query string, arg any) (*store.Principal, error) {
	p, err := scanPrincipal(s.pool.QueryRow(ctx, query, arg))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("principal: %w", store.ErrNotFound)
	}
	if err != nil {
		return nil, s.readError(ctx, op, err)
	}
	return p, nil
}

// RevokePrincipal implements store.Identities.
func (s *Store) RevokePrincipal(ctx context.Context, p store.RevokePrincipalParams) (*store.Principal, error) {
	if err := store.ValidateJobRef(p.Tenant, p.ID); err != nil {
		return nil, err
	}
	var out *store.Principal
	err := s.withTx(ctx, "revoke_principal", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		pr, err := scanPrincipal(tx.QueryRow(ctx, qRevokePrincipal, p.Tenant, p.ID, now))
		if errors.Is(err, pgx.ErrNoRows) {
			// Missing, or revoked already (a no-op).
			pr, err = scanPrincipal(tx.QueryRow(ctx, qGetPrincipal, p.Tenant, p.ID))
			if errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("principal %s: %w", p.ID, store.ErrPrincipalNotFound)
			}
			out = pr
			return err
		}
		if err != nil {
			return err
		}
		if _, err := s.insertAudit(ctx, tx, store.AppendAuditParams{
			Tenant: p.Tenant, Actor: p.Actor, ActorName: p.ActorName, Action: store.AuditAPIKeyRevoked,
			Target: pr.ID, Data: store.PrincipalAuditData(pr),
		}, now); err != nil {
			return err
		}
		out = pr
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// TouchPrincipal implements store.Identities.
func (s *Store) TouchPrincipal(ctx context.Context, tenant, id string, now time.Time) error {
	if err := store.ValidateJobRef(tenant, id); err != nil {
		return err
	}
	if now.IsZero() {
		var err error
		if now, err = s.Now(ctx); err != nil {
			return err
		}
	}
	now = normTime(now)
	if _, err := s.pool.Exec(ctx, qTouchPrincipal, tenant, id, now, now.Add(-store.PrincipalTouchInterval)); err != nil {
		return s.readError(ctx, "touch_principal", err)
	}
	return nil
}

// BindWorker implements store.Identities.
func (s *Store) BindWorker(ctx context.Context, p store.BindWorkerParams) (string, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return "", err
	}
	if !store.ValidWorkerID(p.WorkerID) {
		return "", store.Invalid("worker_id", "must be 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	if err := store.ValidateText("principal_id", p.PrincipalID, store.NameMaxLen, true); err != nil {
		return "", err
	}
	var owner string
	err := s.withTx(ctx, "bind_worker", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, qBindWorker, p.Tenant, p.WorkerID, p.PrincipalID, now).Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) {
			return tx.QueryRow(ctx, qWorkerOwner, p.Tenant, p.WorkerID).Scan(&owner)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return owner, nil
}

func validWorkerKey(tenant, workerID string) error {
	if err := store.ValidateTenant(tenant); err != nil {
		return err
	}
	if !store.ValidWorkerID(workerID) {
		return store.Invalid("worker_id", "must be 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	return nil
}

// WorkerOwner implements store.Identities.
func (s *Store) WorkerOwner(ctx context.Context, tenant, workerID string) (string, error) {
	if err := validWorkerKey(tenant, workerID); err != nil {
		return "", err
	}
	var owner string
	err := s.pool.QueryRow(ctx, qValidWorkerOwner, tenant, workerID).Scan(&owner)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", s.readError(ctx, "worker_owner", err)
	}
	return owner, nil
}

// ReleaseWorker implements store.Identities.
func (s *Store) ReleaseWorker(ctx context.Context, tenant, workerID string) (string, error) {
	if err := validWorkerKey(tenant, workerID); err != nil {
		return "", err
	}
	var owner string
	err := s.withTx(ctx, "release_worker", func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, qReleaseWorker, tenant, workerID).Scan(&owner)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return owner, nil
}

// LeaseKey implements store.Identities.
func (s *Store) LeaseKey(ctx context.Context, candidate []byte) ([]byte, error) {
	if err := store.ValidateLeaseKey(candidate); err != nil {
		return nil, err
	}
	if _, err := s.pool.Exec(ctx, qStoreLeaseKey, candidate, time.Now()); err != nil {
		return nil, interpretError(err)
	}
	var key []byte
	if err := s.pool.QueryRow(ctx, qLeaseKey).Scan(&key); err != nil {
		return nil, interpretError(err)
	}
	return key, nil
}

// AppendAudit implements store.Identities.
func (s *Store) AppendAudit(ctx context.Context, p store.AppendAuditParams) (*store.AuditEvent, error) {
	if err := store.ValidateAppendAudit(p); err != nil {
		return nil, err
	}
	var out *store.AuditEvent
	err := s.withTx(ctx, "append_audit", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		out, err = s.insertAudit(ctx, tx, p, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListAudit implements store.Identities.
func (s *Store) ListAudit(ctx context.Context, p store.ListAuditParams) (*store.AuditPage, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	limit, err := store.PageLimit(p.Limit)
	if err != nil {
		return nil, err
	}
	var (
		afterAt *time.Time
		afterID string
	)
	if p.Cursor != "" {
		at, id, err := store.DecodeAuditCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		afterAt, afterID = &at, id
	}
	rows, err := s.pool.Query(ctx, qListAudit, p.Tenant, afterAt, afterID, limit+1)
	if err != nil {
		return nil, s.readError(ctx, "list_audit", err)
	}
	evs, err := collect(rows, scanAudit)
	if err != nil {
		return nil, s.readError(ctx, "list_audit", err)
	}
	page := &store.AuditPage{Events: make([]store.AuditEvent, 0, min(len(evs), limit))}
	for i, e := range evs {
		if i == limit {
			page.NextCursor = store.EncodeAuditCursor(page.Events[limit-1])
			break
		}
		page.Events = append(page.Events, *e)
	}
	return page, nil
}

// withActor adds the acting principal to an event's data, when there is
// one.
func withActor(data map[string]any, actor string) map[string]any {
	if actor != "" {
		data["actor"] = actor
	}
	return data
}
