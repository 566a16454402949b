package postgres

import (
	"cmp"
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// pruneBatchSizeMax caps one retention transaction whatever the caller asks,
// so retention never holds many row locks for long.
const pruneBatchSizeMax = 10_000

// Prune implements store.Store. Each batch is its own short transaction:
// up to BatchSize terminal jobs finished before FinishedBefore, across
// tenants, with their idempotency records (counted in IdempotencyRecords),
// events, attempts, checkpoints and effects. Batches
// repeat until one comes back short; then expired idempotency records go
// the same way, and then expired unique-key period records.
func (s *Store) Prune(ctx context.Context, p store.PruneParams) (store.PruneResult, error) {
	var res store.PruneResult
	if p.BatchSize < 0 {
		return res, store.Invalid("batch_size", "must not be negative")
	}
	batch := min(cmp.Or(p.BatchSize, store.PruneBatchSizeDefault), pruneBatchSizeMax)
	before := normTime(p.FinishedBefore)
	for {
		var jobs, keys int64
		err := s.withTx(ctx, "prune", func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, qPruneJobs, before, batch).Scan(&jobs, &keys)
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
	for {
		var n int64
		err := s.withTx(ctx, "prune", func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, qPruneIdempotencyKeys, nowArg(p.Now), batch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return res, err
		}
		res.IdempotencyRecords += n
		if n < int64(batch) {
			break
		}
	}
	for {
		var n int64
		err := s.withTx(ctx, "prune", func(tx pgx.Tx) error {
			tag, err := tx.Exec(ctx, qPruneUniqueKeys, nowArg(p.Now), batch)
			n = tag.RowsAffected()
			return err
		})
		if err != nil {
			return res, err
		}
		res.UniqueKeys += n
		if n < int64(batch) {
			break
		}
	}
	return res, nil
}
