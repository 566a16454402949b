package postgres

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// qQueueMetrics reads every queue's live gauges in one statement: one
// branch per state, each answered by that state's partial index (the claim
// index for queued jobs, the lease-expiry index for leased ones, the
// dead-letter index for dead ones), so its cost follows the live jobs, not
// the finished ones retention has yet to prune. Each row is (tenant,
// queue, state, count, second count, lag in microseconds): for queued
// jobs the second count is the available ones and the lag the age of the
// oldest available; for leased jobs the second count is the expired
// leases. $1 is the optional now.
//
// The last two branches make every known queue a row (state 'known', all
// zeros) so that its gauges read 0 instead of disappearing when it
// empties: the queues with a policy, and the queues with any job left in
// the table (finished ones until retention prunes them), found by a loose
// index scan of jobs_queue_state_idx, one probe per queue.
const qQueueMetrics = `WITH RECURSIVE clock AS MATERIALIZED (SELECT coalesce($1::timestamptz, now()) AS now),
known AS (
    (SELECT tenant, queue FROM jobs ORDER BY tenant, queue LIMIT 1)
    UNION ALL
    SELECT n.tenant, n.queue FROM known k, LATERAL (
        SELECT tenant, queue FROM jobs WHERE (tenant, queue) > (k.tenant, k.queue)
        ORDER BY tenant, queue LIMIT 1) n
)
SELECT tenant, queue, 'queued', count(*),
       count(*) FILTER (WHERE available_at <= (SELECT now FROM clock)),
       coalesce((extract(epoch FROM (SELECT now FROM clock)
           - min(available_at) FILTER (WHERE available_at <= (SELECT now FROM clock))) * 1000000)::bigint, 0)
FROM jobs WHERE state = 'queued' GROUP BY tenant, queue
UNION ALL
SELECT tenant, queue, 'leased', count(*),
       count(*) FILTER (WHERE lease_expires_at <= (SELECT now FROM clock)), 0
FROM jobs WHERE state = 'leased' GROUP BY tenant, queue
UNION ALL
SELECT tenant, queue, 'dead', count(*), 0, 0
FROM jobs WHERE state = 'dead' AND NOT abandoned GROUP BY tenant, queue
UNION ALL
SELECT tenant, queue, 'known', 0, 0, 0 FROM known
UNION ALL
SELECT tenant, queue, 'known', 0, 0, 0 FROM queue_policies`

// QueueMetrics implements store.Store.
func (s *Store) QueueMetrics(ctx context.Context, p store.QueueMetricsParams) (*store.QueueMetricsSnapshot, error) {
	rows, err := s.pool.Query(ctx, qQueueMetrics, nowArg(p.Now))
	if err != nil {
		return nil, s.readError(ctx, "queue_metrics", err)
	}
	defer rows.Close()
	var fold store.QueueMetricsFold
	for rows.Next() {
		var (
			tenant, queue, state string
			n, second, lagMicros int64
		)
		if err := rows.Scan(&tenant, &queue, &state, &n, &second, &lagMicros); err != nil {
			return nil, s.readError(ctx, "queue_metrics", err)
		}
		fold.Add(tenant, queue, store.JobState(state), n, second, time.Duration(lagMicros)*time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return nil, s.readError(ctx, "queue_metrics", err)
	}
	return fold.Snapshot(), nil
}

// qCountFinished counts the jobs finished in [$1, $2) by tenant, queue and
// state: a range of jobs_dead_finished_idx and of each jobs_done
// partition's BRIN on finished_at, so its cost follows the window.
const qCountFinished = `SELECT tenant, queue, state, count(*) FROM jobs
WHERE finished_at >= $1 AND finished_at < $2
GROUP BY tenant, queue, state`

// CountFinished implements store.Store.
func (s *Store) CountFinished(ctx context.Context, p store.CountFinishedParams) ([]store.FinishedCount, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qCountFinished, p.From, p.To)
	if err != nil {
		return nil, s.readError(ctx, "count_finished", err)
	}
	out, err := collect(rows, func(r pgx.Row) (*store.FinishedCount, error) {
		var c store.FinishedCount
		var state string
		if err := r.Scan(&c.Tenant, &c.Queue, &state, &c.N); err != nil {
			return nil, err
		}
		c.State = store.JobState(state)
		return &c, nil
	})
	if err != nil {
		return nil, s.readError(ctx, "count_finished", err)
	}
	counts := make([]store.FinishedCount, len(out))
	for i, c := range out {
		counts[i] = *c
	}
	return counts, nil
}

// ListQueuePolicies implements store.Store.
func (s *Store) ListQueuePolicies(ctx context.Context, tenant string) ([]store.QueuePolicy, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qListPolicies, tenant)
	if err != nil {
		return nil, s.readError(ctx, "list_queue_policies", err)
	}
	policies, err := collect(rows, scanPolicy)
	if err != nil {
		return nil, s.readError(ctx, "list_queue_policies", err)
	}
	out := make([]store.QueuePolicy, len(policies))
	for i, p := range policies {
		out[i] = *p
	}
	slices.SortFunc(out, func(a, b store.QueuePolicy) int { return strings.Compare(a.Queue, b.Queue) })
	return out, nil
}
