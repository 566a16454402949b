package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// Breaker statements. The breaker row is the breaker: the store decides
// every change (store.DecideBreakerOutcome, DecideProbes, DecideReset, …)
// and these statements only read, lock and write it.
const (
	breakerColumns = `tenant, dependency, state, detail, policy, last_event_seq, updated_at`

	qListBreakers = `SELECT ` + breakerColumns + ` FROM breakers WHERE tenant = $1 ORDER BY dependency LIMIT 1000`

	qGetBreaker = `SELECT ` + breakerColumns + ` FROM breakers WHERE tenant = $1 AND dependency = $2`

	qLockBreaker = `SELECT ` + breakerColumns + ` FROM breakers WHERE tenant = $1 AND dependency = $2 FOR UPDATE`

	// qTryLockBreaker is qLockBreaker for a probe claim: while another
	// claimer admits probes (or a report batch folds outcomes in), this
	// round leaves the breaker to it instead of queueing behind it.
	qTryLockBreaker = qLockBreaker + ` SKIP LOCKED`

	// qGateBreakers reads the tenant's breakers that are not closed (the
	// partial index holds only those) with the instant they were read at
	// ($2, NULL: the database clock), pipelined with the claim that skips
	// their jobs, so the claimer can tell whether one is due for probes.
	qGateBreakers = `SELECT ` + breakerColumns + `, coalesce($2::timestamptz, now()) FROM breakers
	WHERE tenant = $1 AND state <> 'closed' ORDER BY dependency`

	// qEnsureBreakers creates the missing breakers of ($1 tenants, $2
	// dependencies), closed, with detail $3, at $4.
	qEnsureBreakers = `INSERT INTO breakers (tenant, dependency, state, detail, updated_at)
	SELECT u.t, u.d, 'closed', $3, coalesce($4::timestamptz, now())
	FROM unnest($1::text[], $2::text[]) AS u(t, d)
	ON CONFLICT (tenant, dependency) DO NOTHING`

	// qLockBreakers locks the breakers of ($1 tenants, $2 dependencies) in
	// key order.
	qLockBreakers = `SELECT b.tenant, b.dependency, b.state, b.detail, b.policy, b.last_event_seq, b.updated_at
	FROM breakers b JOIN unnest($1::text[], $2::text[]) AS u(t, d) ON b.tenant = u.t AND b.dependency = u.d
	ORDER BY b.tenant, b.dependency
	FOR UPDATE OF b`

	// qUpsertBreakers writes breakers as decided; each was locked (or
	// created) by the same transaction.
	qUpsertBreakers = `INSERT INTO breakers (tenant, dependency, state, policy, detail, last_event_seq, updated_at)
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[], $7::timestamptz[])
	ON CONFLICT (tenant, dependency) DO UPDATE SET
		state = excluded.state, policy = excluded.policy, detail = excluded.detail,
		last_event_seq = excluded.last_event_seq, updated_at = excluded.updated_at`

	qInsertBreakerEvents = `INSERT INTO breaker_events (tenant, dependency, seq, type, at, data)
	SELECT u.t, u.d, u.s, u.ty, u.a, u.da::jsonb
	FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::timestamptz[], $6::text[]) AS u(t, d, s, ty, a, da)`

	qListBreakerEvents = `SELECT dependency, seq, type, at, data::text FROM breaker_events
	WHERE tenant = $1 AND dependency = $2 AND seq > $3 ORDER BY seq LIMIT $4`
)

// scanBreaker reads breakerColumns (then extra).
func scanBreaker(row pgx.Row, extra ...any) (*store.Breaker, error) {
	var (
		tenant, dep, state, detail, policy string
		seq                                int64
		updated                            time.Time
	)
	if err := row.Scan(append([]any{&tenant, &dep, &state, &detail, &policy, &seq, &updated}, extra...)...); err != nil {
		return nil, err
	}
	b, err := store.DecodeBreaker(tenant, dep, store.BreakerState(state), detail, policy, seq, updated.UTC())
	if err != nil {
		return nil, engineErrorf("%v", err)
	}
	return &b, nil
}

// queueBreakerChanges queues the writes of changes (the breakers, then
// their events) on b and returns how many statements it queued.
func queueBreakerChanges(b *pgx.Batch, changes []store.BreakerChange) int {
	n := len(changes)
	if n == 0 {
		return 0
	}
	tenants, deps, states, policies, details := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	seqs, nows := make([]int64, n), make([]time.Time, n)
	var ev struct {
		tenants, deps, types, data []string
		seqs                       []int64
		at                         []time.Time
	}
	for i, c := range changes {
		br := c.Breaker
		tenants[i], deps[i], states[i], seqs[i], nows[i] = br.Tenant, br.Dependency, string(br.State), br.EventSeq, c.Now
		details[i], policies[i] = store.EncodeBreaker(br)
		for k, e := range c.Events {
			ev.tenants = append(ev.tenants, br.Tenant)
			ev.deps = append(ev.deps, br.Dependency)
			ev.seqs = append(ev.seqs, c.FirstSeq+int64(k))
			ev.types = append(ev.types, string(e.Type))
			ev.at = append(ev.at, e.At)
			ev.data = append(ev.data, e.Data)
		}
	}
	b.Queue(qUpsertBreakers, tenants, deps, states, policies, details, seqs, nowArgs(nows))
	if len(ev.seqs) == 0 {
		return 1
	}
	b.Queue(qInsertBreakerEvents, ev.tenants, ev.deps, ev.seqs, ev.types, nowArgs(ev.at), ev.data)
	return 2
}

// LockBreakers implements store.ReportTx: missing breakers are created and
// all are locked, in one round trip.
func (r reportTx) LockBreakers(ctx context.Context, keys []store.BreakerKey) (map[store.BreakerKey]store.Breaker, error) {
	tenants, deps := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		tenants[i], deps[i] = k.Tenant, k.Dependency
	}
	fresh, _ := store.EncodeBreaker(store.NewBreaker(store.BreakerKey{}))
	b := &pgx.Batch{}
	b.Queue(qEnsureBreakers, tenants, deps, fresh, nil)
	b.Queue(qLockBreakers, tenants, deps)
	br := r.tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	list, err := collect(rows, func(row pgx.Row) (*store.Breaker, error) { return scanBreaker(row) })
	if err != nil {
		return nil, err
	}
	out := make(map[store.BreakerKey]store.Breaker, len(list))
	for _, x := range list {
		out[x.Key()] = *x
	}
	return out, br.Close()
}

// claimProbes runs, for each breaker of gate that DecideProbes says is due
// at now, one transaction that locks the breaker, decides again under the
// lock (another coordinator may have admitted its probes meanwhile),
// claims at most that many jobs of the dependency for the remaining slots
// (owners, leases) and records them as probes. Only a half-open breaker
// (or an open one whose delay ran out) costs these transactions; claims
// of a tenant whose breakers are all closed never get here.
func (s *Store) claimProbes(ctx context.Context, p store.ClaimManyParams, queues []string,
	policies map[store.QueueRef]store.QueuePolicy, limited bool, gate []store.Breaker, now time.Time,
	owners []string, leases []int64) ([]*jobRecord, error) {
	var out []*jobRecord
	for _, g := range gate {
		if len(owners) == 0 {
			break
		}
		if admit, _, _ := store.DecideProbes(g, now); admit == 0 {
			continue
		}
		var (
			recs    []*jobRecord
			written []store.BreakerChange
		)
		err := s.withTx(ctx, "claim_probe", func(tx pgx.Tx) error {
			recs, written = nil, nil
			b, err := scanBreaker(tx.QueryRow(ctx, qTryLockBreaker, p.Tenant, g.Dependency))
			if errors.Is(err, pgx.ErrNoRows) {
				return nil // held by another claimer or a report batch: the next round looks again
			}
			if err != nil {
				return err
			}
			at, err := txNow(ctx, tx, p.Now)
			if err != nil {
				return err
			}
			admit, next, events := store.DecideProbes(*b, at)
			if n := min(admit, len(owners)); n > 0 {
				var st *limitState
				if limited {
					if st, err = lockLimited(ctx, tx, p, queues, policies); err != nil {
						return err
					}
				}
				if recs, err = claimStatement(ctx, tx, p, queues, policies, st, owners[:n], leases[:n], g.Dependency); err != nil {
					return err
				}
				if st != nil {
					if err := addRateStarts(ctx, tx, p.Tenant, policies, st, recs); err != nil {
						return err
					}
				}
			}
			if len(recs) == 0 && len(events) == 0 {
				return nil // half-open with nothing to probe: nothing changes
			}
			toks := make([]store.LeaseToken, len(recs))
			for i, r := range recs {
				toks[i] = store.LeaseToken{JobID: r.job.ID, Generation: r.job.LeaseGeneration, WorkerID: r.job.LeaseOwner}
			}
			next = store.AdmitProbes(next, toks, at)
			first := next.EventSeq + 1
			next.EventSeq += int64(len(events))
			written = []store.BreakerChange{{Breaker: next, FirstSeq: first, Events: events, Now: at}}
			return s.writeBreakers(ctx, tx, written)
		})
		if err != nil {
			return out, err
		}
		s.opts.BreakersChanged(written)
		out = append(out, recs...)
		owners, leases = owners[len(recs):], leases[len(recs):]
	}
	return out, nil
}

// writeBreakers writes decided breaker changes in tx, in one round trip.
func (s *Store) writeBreakers(ctx context.Context, tx pgx.Tx, changes []store.BreakerChange) error {
	b := &pgx.Batch{}
	n := queueBreakerChanges(b, changes)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range n {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	return br.Close()
}

// ListBreakers implements store.Store.
func (s *Store) ListBreakers(ctx context.Context, tenant string) ([]store.Breaker, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qListBreakers, tenant)
	if err != nil {
		return nil, s.readError(ctx, "list_breakers", err)
	}
	list, err := collect(rows, func(row pgx.Row) (*store.Breaker, error) { return scanBreaker(row) })
	if err != nil {
		return nil, s.readError(ctx, "list_breakers", err)
	}
	out := make([]store.Breaker, len(list))
	for i, b := range list {
		out[i] = *b
	}
	return out, nil
}

// GetBreaker implements store.Store.
func (s *Store) GetBreaker(ctx context.Context, tenant, dependency string) (*store.Breaker, error) {
	if err := store.ValidateBreakerRef(tenant, dependency); err != nil {
		return nil, err
	}
	b, err := scanBreaker(s.pool.QueryRow(ctx, qGetBreaker, tenant, dependency))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("breaker %q: %w", dependency, store.ErrBreakerNotFound)
	}
	if err != nil {
		return nil, s.readError(ctx, "get_breaker", err)
	}
	return b, nil
}

// changeBreaker runs one operator change of a breaker in a transaction:
// it locks the breaker (creating it first when create is set; ErrNotFound
// otherwise), decides with decide at the transaction's instant and writes
// the result with its events.
func (s *Store) changeBreaker(ctx context.Context, op string, k store.BreakerKey, now time.Time, create bool,
	decide func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent, error)) (*store.Breaker, error) {
	var (
		out     store.Breaker
		written []store.BreakerChange
	)
	err := s.withTx(ctx, op, func(tx pgx.Tx) error {
		at, err := txNow(ctx, tx, now)
		if err != nil {
			return err
		}
		if create {
			fresh, _ := store.EncodeBreaker(store.NewBreaker(k))
			if _, err := tx.Exec(ctx, qEnsureBreakers, []string{k.Tenant}, []string{k.Dependency}, fresh, at); err != nil {
				return err
			}
		}
		b, err := scanBreaker(tx.QueryRow(ctx, qLockBreaker, k.Tenant, k.Dependency))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("breaker %q: %w", k.Dependency, store.ErrBreakerNotFound)
		}
		if err != nil {
			return err
		}
		next, events, err := decide(*b, at)
		if err != nil {
			return err
		}
		first := next.EventSeq + 1
		next.EventSeq += int64(len(events))
		next.UpdatedAt = at
		out = next
		written = []store.BreakerChange{{Breaker: next, FirstSeq: first, Events: events, Now: at}}
		return s.writeBreakers(ctx, tx, written)
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
		func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent, error) {
			next, ev := store.DecideReset(b, p.Actor, p.Reason, now)
			return next, ev, nil
		})
}

// ForceOpenBreaker implements store.Store.
func (s *Store) ForceOpenBreaker(ctx context.Context, p store.ForceOpenBreakerParams) (*store.Breaker, error) {
	if err := store.ValidateForceOpen(p); err != nil {
		return nil, err
	}
	return s.changeBreaker(ctx, "force_open_breaker", store.BreakerKey{Tenant: p.Tenant, Dependency: p.Dependency}, p.Now, true,
		func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent, error) {
			next, ev := store.DecideForceOpen(b, p.Duration, p.Actor, p.Reason, now)
			return next, ev, nil
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
		func(b store.Breaker, now time.Time) (store.Breaker, []store.NewBreakerEvent, error) {
			next, ev := store.DecideBreakerPolicy(b, pol, p.Actor, now)
			return next, ev, nil
		})
}

// ListBreakerEvents implements store.Store.
func (s *Store) ListBreakerEvents(ctx context.Context, p store.ListBreakerEventsParams) ([]store.BreakerEvent, error) {
	if err := store.ValidateListBreakerEvents(p); err != nil {
		return nil, err
	}
	if _, err := s.GetBreaker(ctx, p.Tenant, p.Dependency); err != nil {
		return nil, err
	}
	limit := p.Limit
	if limit == 0 {
		limit = store.ListLimitMax
	}
	rows, err := s.pool.Query(ctx, qListBreakerEvents, p.Tenant, p.Dependency, p.AfterSequence, limit)
	if err != nil {
		return nil, s.readError(ctx, "list_breaker_events", err)
	}
	evs, err := collect(rows, func(row pgx.Row) (*store.BreakerEvent, error) {
		var (
			e   store.BreakerEvent
			typ string
		)
		if err := row.Scan(&e.Dependency, &e.Sequence, &typ, &e.Time, &e.Data); err != nil {
			return nil, err
		}
		e.Type, e.Time = store.BreakerEventType(typ), e.Time.UTC()
		return &e, nil
	})
	if err != nil {
		return nil, s.readError(ctx, "list_breaker_events", err)
	}
	out := make([]store.BreakerEvent, len(evs))
	for i, e := range evs {
		out[i] = *e
	}
	return out, nil
}
