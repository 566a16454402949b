package sqlite

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/leasehold/leasehold/store"
)

// pruneBatchMax caps BatchSize: a batch is one write transaction, and every
// other write of the process waits for it.
const pruneBatchMax = 10_000

// Prune implements store.Store. Each batch is its own short transaction, so
// claims and reports interleave with a long prune instead of waiting for it.
func (s *Store) Prune(ctx context.Context, p store.PruneParams) (store.PruneResult, error) {
	var res store.PruneResult
	if p.BatchSize < 0 {
		return res, store.Invalid("batch_size", "must not be negative")
	}
	batch := min(cmp.Or(p.BatchSize, store.PruneBatchSizeDefault), pruneBatchMax)
	before := micros(p.FinishedBefore.UTC().Truncate(time.Microsecond))

	// Finished jobs first: their idempotency records go with them (they are
	// counted), then the job rows, whose events, attempts, checkpoints and
	// effects cascade.
	for {
		var jobs, keys int64
		err := s.write(ctx, "prune", func(tx *writeTx) error {
			r, err := tx.ExecContext(ctx, qPruneJobIdempotencyKeys, before, batch)
			if err != nil {
				return fmt.Errorf("prune idempotency records of finished jobs: %w", err)
			}
			if keys, err = r.RowsAffected(); err != nil {
				return err
			}
			r, err = tx.ExecContext(ctx, qPruneJobs, before, batch)
			if err != nil {
				return fmt.Errorf("prune finished jobs: %w", err)
			}
			jobs, err = r.RowsAffected()
			return err
		})
		if err != nil {
			return res, err
		}
		res.Jobs += jobs
		res.IdempotencyRecords += keys
		if jobs < int64(batch) {
			break
		}
	}

	// Then idempotency records whose window closed, at the store clock.
	for {
		var keys int64
		err := s.write(ctx, "prune", func(tx *writeTx) error {
			now := s.clock(p.Now)
			r, err := tx.ExecContext(ctx, qPruneIdempotencyKeys, micros(now), batch)
			if err != nil {
				return fmt.Errorf("prune expired idempotency records: %w", err)
			}
			keys, err = r.RowsAffected()
			return err
		})
		if err != nil {
			return res, err
		}
		res.IdempotencyRecords += keys
		if keys < int64(batch) {
			break
		}
	}

	// Then unique-key period records that expired.
	for {
		var keys int64
		err := s.write(ctx, "prune", func(tx *writeTx) error {
			r, err := tx.ExecContext(ctx, qPruneUniqueKeys, micros(s.clock(p.Now)), batch)
			if err != nil {
				return fmt.Errorf("prune expired unique keys: %w", err)
			}
			keys, err = r.RowsAffected()
			return err
		})
		if err != nil {
			return res, err
		}
		res.UniqueKeys += keys
		if keys < int64(batch) {
			break
		}
	}
	return res, nil
}
