package sqlite

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/leasehold/leasehold/store"
)

// qQueueMetrics reads every queue's live gauges in one statement, one
// branch per state (the queue-state index answers each). Rows are
// (tenant, queue, state, count, second count, lag in microseconds): for
// queued jobs the second count is the available ones and the lag the age
// of the oldest available; for leased jobs the second count is the expired
// leases. ?1 is now in microseconds.
//
// The last two branches make every known queue a row (state 'known', all
// zeros) so that its gauges read 0 instead of disappearing when it
// empties: the queues with a policy, and the queues with any job left in
// the table (finished ones until retention prunes them).
const qQueueMetrics = `
SELECT tenant, queue, 'queued', count(*), coalesce(sum(available_at <= ?1), 0),
       coalesce(?1 - min(CASE WHEN available_at <= ?1 THEN available_at END), 0)
FROM jobs WHERE state = 'queued' GROUP BY tenant, queue
UNION ALL
SELECT tenant, queue, 'leased', count(*), coalesce(sum(lease_expires_at <= ?1), 0), 0
FROM jobs WHERE state = 'leased' GROUP BY tenant, queue
UNION ALL
SELECT tenant, queue, 'dead', count(*), 0, 0
FROM jobs WHERE state = 'dead' AND abandoned = 0 GROUP BY tenant, queue
UNION ALL
SELECT DISTINCT tenant, queue, 'known', 0, 0, 0 FROM jobs
UNION ALL
SELECT tenant, queue, 'known', 0, 0, 0 FROM queue_policies`

// QueueMetrics implements store.Store.
func (s *Store) QueueMetrics(ctx context.Context, p store.QueueMetricsParams) (*store.QueueMetricsSnapshot, error) {
	now := s.clock(p.Now)
	var fold store.QueueMetricsFold
	err := s.read(ctx, "queue metrics", func(tx *preparedTx) error {
		rows, err := tx.QueryContext(ctx, qQueueMetrics, micros(now))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				tenant, queue, state string
				n, second, lagMicros int64
			)
			if err := rows.Scan(&tenant, &queue, &state, &n, &second, &lagMicros); err != nil {
				return err
			}
			fold.Add(tenant, queue, store.JobState(state), n, second, time.Duration(lagMicros)*time.Microsecond)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return fold.Snapshot(), nil
}

// qCountFinished counts the jobs finished in [?1, ?2) by tenant, queue and
// state: a range of jobs_retention_idx, so its cost follows the window.
const qCountFinished = `SELECT tenant, queue, state, count(*) FROM jobs
WHERE finished_at IS NOT NULL AND finished_at >= ?1 AND finished_at < ?2
GROUP BY tenant, queue, state`

// CountFinished implements store.Store.
func (s *Store) CountFinished(ctx context.Context, p store.CountFinishedParams) ([]store.FinishedCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	var out []store.FinishedCount
	err := s.read(ctx, "count finished", func(tx *preparedTx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, qCountFinished, micros(p.From), micros(p.To))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var c store.FinishedCount
			var state string
			if err := rows.Scan(&c.Tenant, &c.Queue, &state, &c.N); err != nil {
				return err
			}
			c.State = store.JobState(state)
			out = append(out, c)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListQueuePolicies implements store.Store.
func (s *Store) ListQueuePolicies(ctx context.Context, tenant string) ([]store.QueuePolicy, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	var out []store.QueuePolicy
	err := s.read(ctx, "list queue policies", func(tx *preparedTx) error {
		out = out[:0]
		rows, err := tx.QueryContext(ctx, qListPolicies, tenant)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			pol, err := scanPolicy(rows)
			if err != nil {
				return err
			}
			out = append(out, *pol)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b store.QueuePolicy) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}
