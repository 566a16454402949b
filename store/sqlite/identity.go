package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/store"
)

// Identity records: principals, worker id owners and the audit log
// (store.Identities). These are cold paths (an authentication cache sits in
// front of them), so their statements are not prepared and live here
// rather than in queries.go; the names match the PostgreSQL engine's.

const principalColumns = `tenant, id, name, role, queues, key_hash, cert_subject,
       created_at, created_by, last_used_at, revoked_at`

// qInsertPrincipal stores a new principal.
const qInsertPrincipal = `
INSERT INTO principals (tenant, id, name, role, queues, key_hash, cert_subject, created_at, created_by)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
RETURNING ` + principalColumns

// qListPrincipals lists a tenant's principals, oldest first.
const qListPrincipals = `
SELECT ` + principalColumns + ` FROM principals
WHERE tenant = ?1 AND (?2 OR revoked_at IS NULL)
ORDER BY created_at, id`

// qValidPrincipals lists the valid principals of every tenant.
const qValidPrincipals = `
	SELECT ` + principalColumns + ` FROM principals WHERE revoked_at IS NULL LIMIT ?1`

// qPrincipalByKeyHash finds an API key's principal in any tenant.
const qPrincipalByKeyHash = `SELECT ` + principalColumns + ` FROM principals WHERE key_hash = ?1`

// qPrincipalByCertSubject finds the valid principal of a certificate
// subject in any tenant.
const qPrincipalByCertSubject = `
SELECT ` + principalColumns + ` FROM principals WHERE cert_subject = ?1 AND revoked_at IS NULL`

// qGetPrincipal reads one principal of a tenant.
const qGetPrincipal = `SELECT ` + principalColumns + ` FROM principals WHERE tenant = ?1 AND id = ?2`

// qRevokePrincipal revokes a valid principal; no row when it is missing or
// already revoked.
const qRevokePrincipal = `
UPDATE principals SET revoked_at = ?3
WHERE tenant = ?1 AND id = ?2 AND revoked_at IS NULL
RETURNING ` + principalColumns

// qTouchPrincipal refreshes last_used_at when it is older than ?4.
const qTouchPrincipal = `
UPDATE principals SET last_used_at = ?3
WHERE tenant = ?1 AND id = ?2 AND (last_used_at IS NULL OR last_used_at < ?4)`

// qStoreLeaseKey stores the lease key unless one exists; qLeaseKey reads
// it.
const (
	qStoreLeaseKey = `INSERT INTO lease_keys (id, key, created_at) VALUES (1, ?1, ?2) ON CONFLICT (id) DO NOTHING`
	qLeaseKey      = `SELECT key FROM lease_keys WHERE id = 1`
)

// qBindWorker makes ?3 the owner of a worker id that has none, or whose
// owner was revoked; no row when another valid principal owns it.
const qBindWorker = `
INSERT INTO worker_identities AS w (tenant, worker_id, principal_id, bound_at)
VALUES (?1, ?2, ?3, ?4)
ON CONFLICT (tenant, worker_id) DO UPDATE
   SET principal_id = excluded.principal_id, bound_at = excluded.bound_at
 WHERE w.principal_id = excluded.principal_id
    OR EXISTS (SELECT 1 FROM principals p
               WHERE p.tenant = w.tenant AND p.id = w.principal_id AND p.revoked_at IS NOT NULL)
RETURNING principal_id`

// qWorkerOwner reads a worker id's owner.
const qWorkerOwner = `SELECT principal_id FROM worker_identities WHERE tenant = ?1 AND worker_id = ?2`

// qValidWorkerOwner reads a worker id's owner unless it was revoked.
const qValidWorkerOwner = `
	SELECT w.principal_id FROM worker_identities w
	  JOIN principals p ON p.tenant = w.tenant AND p.id = w.principal_id
	 WHERE w.tenant = ?1 AND w.worker_id = ?2 AND p.revoked_at IS NULL`

// qReleaseWorker removes a worker id's binding.
const qReleaseWorker = `DELETE FROM worker_identities WHERE tenant = ?1 AND worker_id = ?2 RETURNING principal_id`

const auditColumns = `tenant, id, at, actor, actor_name, action, target, data`

// qInsertAudit records one operator action.
const qInsertAudit = `
INSERT INTO audit_events (tenant, id, at, actor, actor_name, action, target, data)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
RETURNING ` + auditColumns

// qListAudit pages a tenant's audit log newest first, after the cursor
// (?2, ?3) when ?2 is set.
const qListAudit = `
SELECT ` + auditColumns + ` FROM audit_events
WHERE tenant = ?1 AND (?2 IS NULL OR at < ?2 OR (at = ?2 AND id < ?3))
ORDER BY at DESC, id DESC
LIMIT ?4`

func scanPrincipal(r rowScanner) (*store.Principal, error) {
	var (
		p                 store.Principal
		role, queues      string
		certSubject       sql.NullString
		created           int64
		lastUsed, revoked sql.NullInt64
	)
	if err := r.Scan(&p.Tenant, &p.ID, &p.Name, &role, &queues, &p.KeyHash, &certSubject,
		&created, &p.CreatedBy, &lastUsed, &revoked); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(queues), &p.Queues); err != nil {
		return nil, fmt.Errorf("decode stored queue patterns: %w", err)
	}
	if len(p.Queues) == 0 {
		p.Queues = nil
	}
	p.Role, p.CertSubject = store.Role(role), certSubject.String
	p.CreatedAt, p.LastUsedAt, p.RevokedAt = fromMicros(created), fromNullMicros(lastUsed), fromNullMicros(revoked)
	return &p, nil
}

func scanAudit(r rowScanner) (*store.AuditEvent, error) {
	var (
		e      store.AuditEvent
		action string
		at     int64
	)
	if err := r.Scan(&e.Tenant, &e.ID, &at, &e.Actor, &e.ActorName, &action, &e.Target, &e.Data); err != nil {
		return nil, err
	}
	e.At, e.Action = fromMicros(at), store.AuditAction(action)
	return &e, nil
}

// compactJSON normalises audit data the way PostgreSQL's jsonb does not
// need to: "" becomes "{}", anything else must be a JSON object.
func compactJSON(data string) (string, error) {
	if data == "" {
		return "{}", nil
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(data), &m); err != nil {
		return "", store.Invalid("data", "must be a JSON object")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", store.Invalid("data", "must be a JSON object")
	}
	return string(b), nil
}

// insertAudit records an audit event inside tx.
func (s *Store) insertAudit(ctx context.Context, tx *writeTx, p store.AppendAuditParams, at time.Time) (*store.AuditEvent, error) {
	data, err := compactJSON(p.Data)
	if err != nil {
		return nil, err
	}
	return scanAudit(tx.QueryRowContext(ctx, qInsertAudit, p.Tenant, s.opts.NewID(), micros(at),
		p.Actor, p.ActorName, string(p.Action), p.Target, data))
}

// CreatePrincipal implements store.Identities.
func (s *Store) CreatePrincipal(ctx context.Context, p store.CreatePrincipalParams) (*store.Principal, error) {
	if err := store.ValidateCreatePrincipal(p); err != nil {
		return nil, err
	}
	queues, err := json.Marshal(nonNilCodes(p.Queues))
	if err != nil {
		return nil, err
	}
	var (
		keyHash     any
		certSubject any
	)
	if len(p.KeyHash) > 0 {
		keyHash = p.KeyHash
	}
	if p.CertSubject != "" {
		certSubject = p.CertSubject
	}
	actor := p.Actor
	if actor == "" {
		actor = store.ActorOffline
	}
	var out *store.Principal
	err = s.write(ctx, "create_principal", func(tx *writeTx) error {
		now := s.clock(p.Now)
		pr, err := scanPrincipal(tx.QueryRowContext(ctx, qInsertPrincipal, p.Tenant, s.opts.NewID(), p.Name,
			string(p.Role), string(queues), keyHash, certSubject, micros(now), actor))
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_UNIQUE) && p.CertSubject != "" {
			return fmt.Errorf("principal for %s: %w", p.CertSubject, store.ErrAlreadyExists)
		}
		if err != nil {
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
	var out []store.Principal
	err := s.read(ctx, "list principals", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qListPrincipals, tenant, includeRevoked)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p, err := scanPrincipal(rows)
			if err != nil {
				return err
			}
			out = append(out, *p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ValidPrincipals implements store.Identities.
func (s *Store) ValidPrincipals(ctx context.Context, limit int) ([]store.Principal, error) {
	var out []store.Principal
	err := s.read(ctx, "valid principals", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qValidPrincipals, max(limit, 0))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			p, err := scanPrincipal(rows)
			if err != nil {
				return err
			}
			out = append(out, *p)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PrincipalByKeyHash implements store.Identities.
func (s *Store) PrincipalByKeyHash(ctx context.Context, hash []byte) (*store.Principal, error) {
	if len(hash) != store.KeyHashLen {
		return nil, store.Invalid("key_hash", fmt.Sprintf("must be %d bytes", store.KeyHashLen))
	}
	return s.principalBy(ctx, qPrincipalByKeyHash, hash)
}

// PrincipalByCertSubject implements store.Identities.
func (s *Store) PrincipalByCertSubject(ctx context.Context, subject string) (*store.Principal, error) {
	if err := store.ValidateText("cert_subject", subject, 512, true); err != nil {
		return nil, err
	}
	return s.principalBy(ctx, qPrincipalByCertSubject, subject)
}

func (s *Store) principalBy(ctx context.Context, query string, arg any) (*store.Principal, error) {
	var out *store.Principal
	err := s.read(ctx, "find principal", func(tx *preparedTx) error {
		p, err := scanPrincipal(tx.QueryRowContext(ctx, query, arg))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("principal: %w", store.ErrNotFound)
		}
		out = p
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// RevokePrincipal implements store.Identities.
func (s *Store) RevokePrincipal(ctx context.Context, p store.RevokePrincipalParams) (*store.Principal, error) {
	if err := store.ValidateJobRef(p.Tenant, p.ID); err != nil {
		return nil, err
	}
	var out *store.Principal
	err := s.write(ctx, "revoke_principal", func(tx *writeTx) error {
		now := s.clock(p.Now)
		pr, err := scanPrincipal(tx.QueryRowContext(ctx, qRevokePrincipal, p.Tenant, p.ID, micros(now)))
		if errors.Is(err, sql.ErrNoRows) {
			// Missing, or revoked already (a no-op).
			pr, err = scanPrincipal(tx.QueryRowContext(ctx, qGetPrincipal, p.Tenant, p.ID))
			if errors.Is(err, sql.ErrNoRows) {
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
	return s.write(ctx, "touch_principal", func(tx *writeTx) error {
		t := s.clock(now)
		_, err := tx.ExecContext(ctx, qTouchPrincipal, tenant, id, micros(t), micros(t.Add(-store.PrincipalTouchInterval)))
		return err
	})
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
	err := s.write(ctx, "bind_worker", func(tx *writeTx) error {
		now := s.clock(p.Now)
		err := tx.QueryRowContext(ctx, qBindWorker, p.Tenant, p.WorkerID, p.PrincipalID, micros(now)).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			return tx.QueryRowContext(ctx, qWorkerOwner, p.Tenant, p.WorkerID).Scan(&owner)
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
	err := s.read(ctx, "worker owner", func(tx *preparedTx) error {
		err := tx.QueryRowContext(ctx, qValidWorkerOwner, tenant, workerID).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return owner, nil
}

// ReleaseWorker implements store.Identities.
func (s *Store) ReleaseWorker(ctx context.Context, tenant, workerID string) (string, error) {
	if err := validWorkerKey(tenant, workerID); err != nil {
		return "", err
	}
	var owner string
	err := s.write(ctx, "release_worker", func(tx *writeTx) error {
		err := tx.QueryRowContext(ctx, qReleaseWorker, tenant, workerID).Scan(&owner)
		if errors.Is(err, sql.ErrNoRows) {
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
	var key []byte
	err := s.write(ctx, "lease_key", func(tx *writeTx) error {
		if _, err := tx.ExecContext(ctx, qStoreLeaseKey, candidate, micros(time.Now())); err != nil {
			return err
		}
		return tx.QueryRowContext(ctx, qLeaseKey).Scan(&key)
	})
	if err != nil {
		return nil, err
	}
	return key, nil
}

// AppendAudit implements store.Identities.
func (s *Store) AppendAudit(ctx context.Context, p store.AppendAuditParams) (*store.AuditEvent, error) {
	if err := store.ValidateAppendAudit(p); err != nil {
		return nil, err
	}
	var out *store.AuditEvent
	err := s.write(ctx, "append_audit", func(tx *writeTx) error {
		var err error
		out, err = s.insertAudit(ctx, tx, p, s.clock(p.Now))
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
		after   sql.NullInt64
		afterID string
	)
	if p.Cursor != "" {
		at, id, err := store.DecodeAuditCursor(p.Cursor)
		if err != nil {
			return nil, err
		}
		after, afterID = sql.NullInt64{Int64: micros(at), Valid: true}, id
	}
	page := &store.AuditPage{}
	err = s.read(ctx, "list audit events", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qListAudit, p.Tenant, after, afterID, limit+1)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			e, err := scanAudit(rows)
			if err != nil {
				return err
			}
			page.Events = append(page.Events, *e)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	if len(page.Events) > limit {
		page.Events = page.Events[:limit]
		page.NextCursor = store.EncodeAuditCursor(page.Events[limit-1])
	}
	return page, nil
}

// withActor appends the acting principal to an event's key-value data,
// when there is one.
func withActor(actor string, kv ...any) []any {
	if actor != "" {
		kv = append(kv, "actor", actor)
	}
	return kv
}
