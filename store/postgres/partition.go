package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

var _ store.PartitionMaintainer = (*Store)(nil)

const (
	// qPartitionLock is a session advisory lock on this schema's
	// partition maintenance: one coordinator at a time does it.
	qPartitionLock   = `SELECT pg_try_advisory_lock(hashtext(current_schema() || '.leasehold_partitions'))`
	qPartitionUnlock = `SELECT pg_advisory_unlock(hashtext(current_schema() || '.leasehold_partitions'))`

	// qDonePartitions lists the partitions of jobs_done with their row
	// estimates.
	qDonePartitions = `SELECT c.relname, greatest(c.reltuples, 0)::bigint FROM pg_inherits i
	JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = 'jobs_done'::regclass`

	// sweepBatch bounds each delete of the rows that hung off dropped jobs.
	sweepBatch = 5_000
)

// qSweepOrphans deletes up to $3 rows of a table hanging off jobs whose
// ids are in [$1, $2) and that no partition of jobs holds any more.
// Each runs as its own statement: no row lock is held between batches.
func qSweepOrphans(table string) string {
	return `DELETE FROM ` + table + ` WHERE ctid = ANY(ARRAY(
		SELECT x.ctid FROM ` + table + ` x
		WHERE x.job_id >= $1 AND x.job_id < $2
		  AND NOT EXISTS (SELECT 1 FROM jobs j WHERE j.tenant = x.tenant AND j.id = x.job_id)
		LIMIT $3))`
}

// MaintainPartitions implements store.PartitionMaintainer: under a session
// advisory lock (another coordinator's pass makes this one a no-op), it
// creates the day partitions of jobs_done from today to AheadDays ahead,
// drops the expired ones (store.DonePartition.Expired), and then deletes,
// in bounded batches, the events, attempts, checkpoints and effects of the
// dropped jobs. Idempotency records and unique-key records go by their
// own expiry in Prune (a record whose job is gone counts as expired).
//
// Detaching takes an ACCESS EXCLUSIVE lock on jobs_done, waited for at
// most LockTimeout; a pass that times out leaves the partition for the
// next one. DETACH … CONCURRENTLY is not used: PostgreSQL refuses it on a
// table with a DEFAULT partition, and the default is what keeps a report
// from failing when a day's partition is missing.
func (s *Store) MaintainPartitions(ctx context.Context, p store.MaintainPartitionsParams) (store.MaintainPartitionsResult, error) {
	var res store.MaintainPartitionsResult
	if err := store.ValidateMaintainPartitions(p); err != nil {
		return res, err
	}
	ahead := cmp.Or(p.AheadDays, store.PartitionAheadDaysDefault)
	timeout := cmp.Or(p.LockTimeout, store.PartitionLockTimeoutDefault)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return res, s.readError(ctx, "maintain_partitions", err)
	}
	defer conn.Release()
	var locked bool
	if err := conn.QueryRow(ctx, qPartitionLock).Scan(&locked); err != nil {
		return res, s.readError(ctx, "maintain_partitions", err)
	}
	if !locked {
		res.Skipped = true
		return res, nil
	}
	defer func() {
		// A fresh context: the lock must go even when ctx has ended.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, qPartitionUnlock); err != nil {
			// Closing the session releases its lock.
			_ = conn.Conn().Close(uctx)
		}
	}()

	now := p.Now
	if now.IsZero() {
		if err := conn.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return res, s.readError(ctx, "maintain_partitions", err)
		}
	}
	existing, err := donePartitions(ctx, conn.Conn())
	if err != nil {
		return res, s.readError(ctx, "maintain_partitions", err)
	}
	// At least 1 ms: 0 would turn the timeout off.
	lockTimeout := fmt.Sprintf("SET LOCAL lock_timeout = '%dms'", max(timeout.Milliseconds(), 1))
	created, errs := createAhead(ctx, conn.Conn(), existing, now, ahead, lockTimeout)
	res.Created = created

	if p.FinishedBefore.IsZero() {
		return res, errors.Join(errs...)
	}
	dropped, estimate, dropErrs := s.dropExpired(ctx, conn.Conn(), existing, normTime(p.FinishedBefore), lockTimeout)
	errs = append(errs, dropErrs...)
	res.Dropped, res.DroppedJobs = len(dropped), estimate
	for _, part := range dropped {
		for _, table := range []string{"job_events", "job_attempts", "job_checkpoints", "job_effects"} {
			for {
				tag, err := conn.Exec(ctx, qSweepOrphans(table), part.From(), part.To(), sweepBatch)
				if err != nil {
					return res, errors.Join(append(errs, s.readError(ctx, "maintain_partitions", err))...)
				}
				res.SweptRows += tag.RowsAffected()
				if tag.RowsAffected() < sweepBatch {
					break
				}
			}
		}
	}
	return res, errors.Join(errs...)
}

// donePartitions lists the partitions of jobs_done with their planner row
// estimates.
func donePartitions(ctx context.Context, conn *pgx.Conn) (map[string]int64, error) {
	existing := map[string]int64{}
	rows, err := conn.Query(ctx, qDonePartitions)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, err
		}
		existing[name] = n
	}
	return existing, rows.Err()
}

// createAhead creates the missing day partitions from now's day to ahead
// days later, each in its own transaction under lockTimeout.
func createAhead(ctx context.Context, conn *pgx.Conn, existing map[string]int64, now time.Time, ahead int, lockTimeout string) (int, []error) {
	var created int
	var errs []error
	for d := range ahead + 1 {
		part := store.DonePartitionOf(now.AddDate(0, 0, d))
		if _, ok := existing[part.Name()]; ok {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lockTimeout); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF jobs_done FOR VALUES FROM ('%s') TO ('%s')`,
				pgx.Identifier{part.Name()}.Sanitize(), part.From(), part.To()))
			return err
		})
		if err != nil {
			// Rows of that day already in the default partition, or the
			// lock not had in time: the rows stay in the default, which
			// Prune empties in batches.
			errs = append(errs, fmt.Errorf("create partition %s: %w", part.Name(), err))
			continue
		}
		created++
	}
	return created, errs
}

// dropExpired detaches and drops the expired day partitions
// (store.DonePartition.Expired at cutoff), each in its own transaction
// under lockTimeout, and returns them with their row estimates' sum.
func (s *Store) dropExpired(ctx context.Context, conn *pgx.Conn, existing map[string]int64, cutoff time.Time, lockTimeout string) ([]store.DonePartition, int64, []error) {
	var dropped []store.DonePartition
	var estimates int64
	var errs []error
	for name, estimate := range existing {
		part, ok := store.ParseDonePartition(name)
		if !ok || !part.Expired(cutoff, time.Time{}) {
			continue
		}
		var newest *time.Time
		// The BRIN on finished_at answers this from a few pages.
		q := fmt.Sprintf(`SELECT max(finished_at) FROM %s WHERE finished_at >= $1`, pgx.Identifier{name}.Sanitize())
		if err := conn.QueryRow(ctx, q, cutoff).Scan(&newest); err != nil {
			errs = append(errs, fmt.Errorf("read partition %s: %w", name, err))
			continue
		}
		if newest != nil && !part.Expired(cutoff, *newest) {
			continue
		}
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lockTimeout); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `ALTER TABLE jobs_done DETACH PARTITION `+pgx.Identifier{name}.Sanitize()); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize())
			return err
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("drop partition %s: %w", name, err))
			continue
		}
		dropped = append(dropped, part)
		estimates += estimate
		s.logger.InfoContext(ctx, "dropped a partition of finished jobs", slog.String("partition", name), slog.Int64("jobs_estimate", estimate))
	}
	return dropped, estimates, errs
}
