package sqlite

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/leasehold/leasehold/store"
)

func validateQueue(tenant, queue string) error {
	if err := store.ValidateTenant(tenant); err != nil {
		return err
	}
	if !store.ValidName(queue) {
		return store.Invalid("queue", "must be 1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit")
	}
	return nil
}

// policyArgs are the ?3-?13 parameters of qUpsertPolicy and
// qSetPaused.
func policyArgs(p store.QueuePolicy) ([]any, error) {
	retryable, err := json.Marshal(nonNilCodes(p.Retry.RetryableErrorCodes))
	if err != nil {
		return nil, err
	}
	nonRetryable, err := json.Marshal(nonNilCodes(p.Retry.NonRetryableErrorCodes))
	if err != nil {
		return nil, err
	}
	return []any{
		p.Retry.MaxAttempts, int64(p.Retry.InitialDelay), int64(p.Retry.MaxDelay), p.Retry.Multiplier,
		p.Retry.JitterFraction, string(retryable), string(nonRetryable), int64(p.Retry.TotalRetryDeadline),
		int64(p.DefaultLeaseDuration), p.ConcurrencyLimit, int64(p.MaxLeaseDuration),
	}, nil
}

func nonNilCodes(c []string) []string {
	if c == nil {
		return []string{}
	}
	return c
}

// GetQueuePolicy implements store.Store.
func (s *Store) GetQueuePolicy(ctx context.Context, tenant, queue string) (*store.QueuePolicy, error) {
	if err := validateQueue(tenant, queue); err != nil {
		return nil, err
	}
	var pol *store.QueuePolicy
	err := s.read(ctx, "get queue policy", func(tx *preparedTx) error {
		var err error
		pol, err = policyTx(ctx, tx, tenant, queue)
		return err
	})
	return pol, err
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
	args, err := policyArgs(p)
	if err != nil {
		return nil, err
	}
	var out *store.QueuePolicy
	err = s.write(ctx, "update_policy", func(tx *writeTx) error {
		now := s.clock(time.Time{})
		all := append(append([]any{tenant, p.Queue}, args...), false, micros(now), store.EncodeQueueLimits(p))
		stored, err := scanPolicy(tx.QueryRowContext(ctx, qUpsertPolicy, all...))
		if err != nil {
			return fmt.Errorf("store policy of %q: %w", p.Queue, err)
		}
		out = stored
		return nil
	})
	s.policies.Invalidate(store.QueueRef{Tenant: tenant, Queue: p.Queue})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SetQueuePaused implements store.Store. Resuming signals subscribers: the
// queue's waiting jobs are claimable again.
func (s *Store) SetQueuePaused(ctx context.Context, tenant, queue string, paused bool) (*store.QueuePolicy, error) {
	if err := validateQueue(tenant, queue); err != nil {
		return nil, err
	}
	args, err := policyArgs(store.DefaultQueuePolicy(queue))
	if err != nil {
		return nil, err
	}
	var out *store.QueuePolicy
	err = s.write(ctx, "set_paused", func(tx *writeTx) error {
		now := s.clock(time.Time{})
		all := append(append([]any{tenant, queue}, args...), paused, micros(now))
		stored, err := scanPolicy(tx.QueryRowContext(ctx, qSetPaused, all...))
		if err != nil {
			return fmt.Errorf("pause %q: %w", queue, err)
		}
		out = stored
		if !paused {
			tx.wake = append(tx.wake, store.QueueRef{Tenant: tenant, Queue: queue})
		}
		return nil
	})
	s.policies.Invalidate(store.QueueRef{Tenant: tenant, Queue: queue})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// QueueStats implements store.Store. A queue with no jobs has zero counts.
func (s *Store) QueueStats(ctx context.Context, p store.QueueStatsParams) (*store.QueueStats, error) {
	if err := validateQueue(p.Tenant, p.Queue); err != nil {
		return nil, err
	}
	now := s.clock(p.Now)
	st := &store.QueueStats{Queue: p.Queue}
	err := s.read(ctx, "queue stats", func(tx *preparedTx) error {
		pol, err := policyTx(ctx, tx, p.Tenant, p.Queue)
		if err != nil {
			return err
		}
		st.Paused = pol.Paused
		rows, err := tx.QueryContext(ctx, qQueueStats, p.Tenant, p.Queue, micros(now))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				state               string
				n, available, lagUs int64
			)
			if err := rows.Scan(&state, &n, &available, &lagUs); err != nil {
				return err
			}
			st.Add(store.JobState(state), n, available)
			st.AddLag(time.Duration(lagUs) * time.Microsecond)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// ListQueues implements store.Store: every queue with jobs or a stored
// policy, by name, with its effective policy and stats at the store clock.
func (s *Store) ListQueues(ctx context.Context, tenant string) ([]store.QueueSummary, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	now := s.clock(time.Time{})
	byQueue := make(map[string]*store.QueueSummary)
	get := func(queue string) *store.QueueSummary {
		if q, ok := byQueue[queue]; ok {
			return q
		}
		q := &store.QueueSummary{Policy: store.DefaultQueuePolicy(queue), Stats: store.QueueStats{Queue: queue}}
		byQueue[queue] = q
		return q
	}
	err := s.read(ctx, "list queues", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qListPolicies, tenant)
		if err != nil {
			return err
		}
		for rows.Next() {
			pol, err := scanPolicy(rows)
			if err != nil {
				rows.Close()
				return err
			}
			q := get(pol.Queue)
			q.Policy = *pol
			q.Stats.Paused = pol.Paused
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = tx.QueryContext(ctx, qQueueCounts, tenant, micros(now))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				queue, state        string
				n, available, lagUs int64
			)
			if err := rows.Scan(&queue, &state, &n, &available, &lagUs); err != nil {
				return err
			}
			get(queue).Stats.Add(store.JobState(state), n, available)
			get(queue).Stats.AddLag(time.Duration(lagUs) * time.Microsecond)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	out := make([]store.QueueSummary, 0, len(byQueue))
	for _, q := range byQueue {
		out = append(out, *q)
	}
	slices.SortFunc(out, func(a, b store.QueueSummary) int {
		switch {
		case a.Policy.Queue < b.Policy.Queue:
			return -1
		case a.Policy.Queue > b.Policy.Queue:
			return 1
		}
		return 0
	})
	return out, nil
}

// loadPolicyRefs reads the effective policies of (tenant, queue) pairs:
// the store's PolicyCache loader.
func (s *Store) loadPolicyRefs(ctx context.Context, queues []store.QueueRef) (map[store.QueueRef]store.QueuePolicy, error) {
	out := make(map[store.QueueRef]store.QueuePolicy, len(queues))
	err := s.read(ctx, "load policies", func(tx *preparedTx) error {
		for _, q := range queues {
			p, err := policyTx(ctx, tx, q.Tenant, q.Queue)
			if err != nil {
				return err
			}
			out[q] = *p
		}
		return nil
	})
	return out, err
}
