package postgres

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// getPolicy returns the effective policy of one queue.
func getPolicy(ctx context.Context, q querier, tenant, queue string) (*store.QueuePolicy, error) {
	p, err := scanPolicy(q.QueryRow(ctx, qGetPolicy, tenant, queue))
	if errors.Is(err, pgx.ErrNoRows) {
		d := store.DefaultQueuePolicy(queue)
		return &d, nil
	}
	return p, err
}

func validateQueue(field, queue string) error {
	if !store.ValidName(queue) {
		return store.Invalid(field, "must be 1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit")
	}
	return nil
}

// GetQueuePolicy implements store.Store.
func (s *Store) GetQueuePolicy(ctx context.Context, tenant, queue string) (*store.QueuePolicy, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if err := validateQueue("queue", queue); err != nil {
		return nil, err
	}
	p, err := getPolicy(ctx, s.pool, tenant, queue)
	if err != nil {
		return nil, s.readError(ctx, "get_queue_policy", err)
	}
	return p, nil
}

// UpdateQueuePolicy implements store.Store.
func (s *Store) UpdateQueuePolicy(ctx context.Context, tenant string, policy store.QueuePolicy) (*store.QueuePolicy, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	p := policy.WithDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out *store.QueuePolicy
	err := s.withTx(ctx, "update_policy", func(tx pgx.Tx) error {
		args := append([]any{tenant, p.Queue}, policyArgs(p)...)
		args = append(args, nil, store.EncodeQueueLimits(p))
		var err error
		out, err = scanPolicy(tx.QueryRow(ctx, qUpsertPolicy, args...))
		return err
	})
	s.policies.Invalidate(store.QueueRef{Tenant: tenant, Queue: p.Queue})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetQueuePaused implements store.Store. Resuming a queue wakes its
// subscribers, since its jobs just became claimable.
func (s *Store) SetQueuePaused(ctx context.Context, tenant, queue string, paused bool) (*store.QueuePolicy, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if err := validateQueue("queue", queue); err != nil {
		return nil, err
	}
	var out *store.QueuePolicy
	err := s.withTx(ctx, "set_paused", func(tx pgx.Tx) error {
		args := append([]any{tenant, queue}, policyArgs(store.DefaultQueuePolicy(queue))...)
		args = append(args, paused, nil)
		var err error
		out, err = scanPolicy(tx.QueryRow(ctx, qSetPaused, args...))
		if err != nil {
			return err
		}
		if !paused {
			return s.notify(ctx, tx, tenant, queue)
		}
		return nil
	})
	s.policies.Invalidate(store.QueueRef{Tenant: tenant, Queue: queue})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListQueues implements store.Store.
func (s *Store) ListQueues(ctx context.Context, tenant string) ([]store.QueueSummary, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	stats, err := s.queueCounts(ctx, tenant, "", time.Time{})
	if err != nil {
		return nil, s.readError(ctx, "list_queues", err)
	}
	rows, err := s.pool.Query(ctx, qListPolicies, tenant)
	if err != nil {
		return nil, s.readError(ctx, "list_queues", err)
	}
	policies, err := collect(rows, scanPolicy)
	if err != nil {
		return nil, s.readError(ctx, "list_queues", err)
	}
	byName := map[string]store.QueuePolicy{}
	for _, p := range policies {
		byName[p.Queue] = *p
	}
	names := make([]string, 0, len(stats)+len(byName))
	for name := range stats {
		names = append(names, name)
	}
	for name := range byName {
		if _, ok := stats[name]; !ok {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	out := make([]store.QueueSummary, 0, len(names))
	for _, name := range names {
		p, ok := byName[name]
		if !ok {
			p = store.DefaultQueuePolicy(name)
		}
		st := stats[name]
		if st == nil {
			st = &store.QueueStats{Queue: name}
		}
		st.Paused = p.Paused
		out = append(out, store.QueueSummary{Policy: p, Stats: *st})
	}
	return out, nil
}

// QueueStats implements store.Store. A queue without jobs has zero counts.
func (s *Store) QueueStats(ctx context.Context, p store.QueueStatsParams) (*store.QueueStats, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := validateQueue("queue", p.Queue); err != nil {
		return nil, err
	}
	stats, err := s.queueCounts(ctx, p.Tenant, p.Queue, p.Now)
	if err != nil {
		return nil, s.readError(ctx, "queue_stats", err)
	}
	policy, err := getPolicy(ctx, s.pool, p.Tenant, p.Queue)
	if err != nil {
		return nil, s.readError(ctx, "queue_stats", err)
	}
	st := stats[p.Queue]
	if st == nil {
		st = &store.QueueStats{Queue: p.Queue}
	}
	st.Paused = policy.Paused
	return st, nil
}

// queueCounts counts jobs by queue and state (one queue, or all when queue
// is empty).
func (s *Store) queueCounts(ctx context.Context, tenant, queue string, now time.Time) (map[string]*store.QueueStats, error) {
	rows, err := s.pool.Query(ctx, qQueueCounts, tenant, queue, nowArg(now))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]*store.QueueStats{}
	for rows.Next() {
		var name, state string
		var n, available, lagMicros int64
		if err := rows.Scan(&name, &state, &n, &available, &lagMicros); err != nil {
			return nil, err
		}
		st := out[name]
		if st == nil {
			st = &store.QueueStats{Queue: name}
			out[name] = st
		}
		st.Add(store.JobState(state), n, available)
		st.AddLag(time.Duration(lagMicros) * time.Microsecond)
	}
	return out, rows.Err()
}

// loadPolicyRefs reads the effective policies of (tenant, queue) pairs in
// one query: the store's PolicyCache loader.
func (s *Store) loadPolicyRefs(ctx context.Context, queues []store.QueueRef) (map[store.QueueRef]store.QueuePolicy, error) {
	tenants, names := make([]string, len(queues)), make([]string, len(queues))
	for i, q := range queues {
		tenants[i], names[i] = q.Tenant, q.Queue
	}
	rows, err := s.pool.Query(ctx, qPoliciesForTenantQueues, tenants, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[store.QueueRef]store.QueuePolicy, len(queues))
	for rows.Next() {
		var tenant string
		p, err := scanPolicy(prefixed{rows, &tenant})
		if err != nil {
			return nil, err
		}
		out[store.QueueRef{Tenant: tenant, Queue: p.Queue}] = *p
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, q := range queues {
		if _, ok := out[q]; !ok {
			out[q] = store.DefaultQueuePolicy(q.Queue)
		}
	}
	return out, nil
}
