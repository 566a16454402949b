package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
)

// Breaker statements (see the PostgreSQL engine's, of the same names). The
// store decides every change; these only read and write the row.
const (
	breakerColumns = `tenant, dependency, state, detail, policy, last_event_seq, updated_at`

	qListBreakers = `SELECT ` + breakerColumns + ` FROM breakers WHERE tenant = ?1 ORDER BY dependency LIMIT 1000`

	qGetBreaker = `SELECT ` + breakerColumns + ` FROM breakers WHERE tenant = ?1 AND dependency = ?2`

	// qGateBreakers reads the tenant's breakers that are not closed, for a
	// claim to tell whether one is due for probes.
	qGateBreakers = `SELECT ` + breakerColumns + ` FROM breakers
WHERE tenant = ?1 AND state <> 'closed' ORDER BY dependency`

	qEnsureBreaker = `INSERT INTO breakers (tenant, dependency, state, detail, updated_at)
VALUES (?1, ?2, 'closed', ?3, ?4) ON CONFLICT (tenant, dependency) DO NOTHING`

	qUpsertBreaker = `INSERT INTO breakers (tenant, dependency, state, policy, detail, last_event_seq, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
ON CONFLICT (tenant, dependency) DO UPDATE SET
    state = excluded.state, policy = excluded.policy, detail = excluded.detail,
    last_event_seq = excluded.last_event_seq, updated_at = excluded.updated_at`

	qInsertBreakerEvent = `INSERT INTO breaker_events (tenant, dependency, seq, type, at, data)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)`

	qListBreakerEvents = `SELECT dependency, seq, type, at, data FROM breaker_events
WHERE tenant = ?1 AND dependency = ?2 AND seq > ?3 ORDER BY seq LIMIT ?4`
)

func scanBreaker(row rowScanner) (*store.Breaker, error) {
	var (
		tenant, dep, state, detail, policy string
		seq, updated                       int64
	)
	if err := row.Scan(&tenant, &dep, &state, &detail, &policy, &seq, &updated); err != nil {
		return nil, err
	}
	b, err := store.DecodeBreaker(tenant, dep, store.BreakerState(state), detail, policy, seq, fromMicros(updated))
	if err != nil {
		return nil, err
	}
	return &b, nil
}

// queryBreakers runs a breaker query and scans every row.
func queryBreakers(ctx context.Context, q interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}, query string, args ...any) ([]store.Breaker, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Breaker
	for rows.Next() {
		b, err := scanBreaker(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *b)
	}
	return out, rows.Err()
}

// lockBreaker reads one breaker in the write transaction (the single
// writer's read is a lock), creating it first when create is set; nil
// when there is none.
func lockBreaker(ctx context.Context, tx *writeTx, k store.BreakerKey, create bool, now time.Time) (*store.Breaker, error) {
	if create {
		fresh, _ := store.EncodeBreaker(store.NewBreaker(k))
		if _, err := tx.ExecContext(ctx, qEnsureBreaker, k.Tenant, k.Dependency, fresh, micros(now)); err != nil {
			return nil, fmt.Errorf("create breaker %q: %w", k.Dependency, err)
		}
	}
	b, err := scanBreaker(tx.QueryRowContext(ctx, qGetBreaker, k.Tenant, k.Dependency))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read breaker %q: %w", k.Dependency, err)
	}
	return b, nil
}

// writeBreakers writes decided breaker changes and their events.
func writeBreakers(ctx context.Context, tx *writeTx, changes []store.BreakerChange) error {
	for _, c := range changes {
		b := c.Breaker
		detail, policy := store.EncodeBreaker(b)
		if _, err := tx.ExecContext(ctx, qUpsertBreaker, b.Tenant, b.Dependency, string(b.State), policy, detail,
			b.EventSeq, micros(c.Now)); err != nil {
			return fmt.Errorf("write breaker %q: %w", b.Dependency, err)
		}
		for k, e := range c.Events {
			if _, err := tx.ExecContext(ctx, qInsertBreakerEvent, b.Tenant, b.Dependency, c.FirstSeq+int64(k),
				string(e.Type), micros(e.At), e.Data); err != nil {
				return fmt.Errorf("append breaker %s event: %w", e.Type, err)
			}
		}
	}
	return nil
}

// LockBreakers implements store.ReportTx.
func (r reportTx) LockBreakers(ctx context.Context, keys []store.BreakerKey) (map[store.BreakerKey]store.Breaker, error) {
	out := make(map[store.BreakerKey]store.Breaker, len(keys))
	now := r.s.clock(time.Time{})
	for _, k := range keys {
		b, err := lockBreaker(ctx, r.tx, k, true, now)
		if err != nil {
			return nil, err
		}
		out[k] = *b
	}
	return out, nil
}

// ListBreakers implements store.Store.
func (s *Store) ListBreakers(ctx context.Context, tenant string) ([]store.Breaker, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	var out []store.Breaker
	err := s.read(ctx, "list_breakers", func(tx *preparedTx) error {
		var err error
		out, err = queryBreakers(ctx, tx, qListBreakers, tenant)
		return err
	})
	return out, err
}

// GetBreaker implements store.Store.
func (s *Store) GetBreaker(ctx context.Context, tenant, dependency string) (*store.Breaker, error) {
	if err := store.ValidateBreakerRef(tenant, dependency); err != nil {
		return nil, err
	}
	var out *store.Breaker
	err := s.read(ctx, "get_breaker", func(tx *preparedTx) error {
		b, err := scanBreaker(tx.QueryRowContext(ctx, qGetBreaker, tenant, dependency))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("breaker %q: %w", dependency, store.ErrBreakerNotFound)
		}
		out = b
		return err
	})
	return out, err
}

// changeBreaker is one operator change of a breaker in a write
// transaction (see the PostgreSQL engine's).
func (s *Store) changeBreaker(ctx context.Context, op string, k store.BreakerKey, now time.Time, create bool,
	decide func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent)) (*store.Breaker, error) {
	var (
		out     store.Breaker
		written []store.BreakerChange
	)
	err := s.write(ctx, op, func(tx *writeTx) error {
		at := s.clock(now)
		b, err := lockBreaker(ctx, tx, k, create, at)
		if err != nil {
			return err
		}
		if b == nil {
			return fmt.Errorf("breaker %q: %w", k.Dependency, store.ErrBreakerNotFound)
		}
		next, events := decide(*b, at)
		first := next.EventSeq + 1
		next.EventSeq += int64(len(events))
		next.UpdatedAt = at
		out = next
		written = []store.BreakerChange{{Breaker: next, FirstSeq: first, Events: events, Now: at}}
		return writeBreakers(ctx, tx, written)
	})
	if err != nil {
		return nil, err
	}
	s.opts.BreakersChanged(written)
	return &out, nil
}

// ResetBreaker implements store.Store.
func (s *Store) ResetBreaker(ctx context.Context, p store.ResetBreakerParams) (*store.Breaker, error) {
	if err := store.ValidateReset(p); err != nil {
		return nil, err
	}
	return s.changeBreaker(ctx, "reset_breaker", store.BreakerKey{Tenant: p.Tenant, Dependency: p.Dependency}, p.Now, false,
		func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent) {
			return store.DecideReset(b, p.Actor, p.Reason, now)
		})
}

// ForceOpenBreaker implements store.Store.
func (s *Store) ForceOpenBreaker(ctx context.Context, p store.ForceOpenBreakerParams) (*store.Breaker, error) {
	if err := store.ValidateForceOpen(p); err != nil {
		return nil, err
	}
	return s.changeBreaker(ctx, "force_open_breaker", store.BreakerKey{Tenant: p.Tenant, Dependency: p.Dependency}, p.Now, true,
		func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent) {
			return store.DecideForceOpen(b, p.Duration, p.Actor, p.Reason, now)
		})
}

// UpdateBreakerPolicy implements store.Store.
func (s *Store) UpdateBreakerPolicy(ctx context.Context, p store.UpdateBreakerPolicyParams) (*store.Breaker, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	pol := p.Policy.WithDefaults()
	if err := pol.Validate(); err != nil {
		return nil, err
	}
	return s.changeBreaker(ctx, "update_breaker_policy", store.BreakerKey{Tenant: p.Tenant, Dependency: pol.Dependency}, p.Now, true,
		func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent) {
			return store.DecideBreakerPolicy(b, pol, p.Actor, now)
		})
}

// ListBreakerEvents implements store.Store.
func (s *Store) ListBreakerEvents(ctx context.Context, p store.ListBreakerEventsParams) ([]store.BreakerEvent, error) {
	if err := store.ValidateListBreakerEvents(p); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = store.ListLimitMax
	}
	var out []store.BreakerEvent
	err := s.read(ctx, "list_breaker_events", func(tx *preparedTx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM breakers WHERE tenant = ?1 AND dependency = ?2`, p.Tenant, p.Dependency).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("breaker %q: %w", p.Dependency, store.ErrBreakerNotFound)
		}
		if err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, qListBreakerEvents, p.Tenant, p.Dependency, p.AfterSequence, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				e   store.BreakerEvent
				typ string
				at  int64
			)
			if err := rows.Scan(&e.Dependency, &e.Sequence, &typ, &at, &e.Data); err != nil {
				return err
			}
			e.Type, e.Time = store.BreakerEventType(typ), fromMicros(at)
			out = append(out, e)
		}
		return rows.Err()
	})
	return out, err
}
