package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlite3 "modernc.org/sqlite/lib"

	"github.com/leasehold/leasehold/store"
)

// Checkpoints and the effect ledger: progress and side effects an attempt
// reports, fenced by its lease like every other report.

// SaveCheckpoint implements store.Store.
func (s *Store) SaveCheckpoint(ctx context.Context, p store.SaveCheckpointParams) (*store.Checkpoint, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, err
	}
	if err := store.ValidatePhase(p.Phase); err != nil {
		return nil, err
	}
	if err := store.ValidateBlob("state", p.State); err != nil {
		return nil, err
	}
	var cp *store.Checkpoint
	err := s.write(ctx, "save_checkpoint", func(tx *writeTx) error {
		now := s.clock(p.Now)
		h, err := holdLease(ctx, tx, p.Tenant, p.Token, now)
		if err != nil {
			return err
		}
		if h == nil {
			return leaseLost(ctx, tx, p.Tenant, p.Token)
		}
		var parent string
		err = tx.QueryRowContext(ctx, qLatestCheckpoint, p.Tenant, p.Token.JobID).Scan(&parent)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("read latest checkpoint: %w", err)
		}
		c := &store.Checkpoint{
			ID:              s.opts.NewID(),
			JobID:           p.Token.JobID,
			Phase:           p.Phase,
			State:           emptyNil(p.State),
			LeaseGeneration: p.Token.Generation,
			ParentID:        parent,
			CreatedAt:       now,
		}
		data := eventData("checkpoint_id", c.ID, "phase", c.Phase, "parent_id", parent, "lease_generation", c.LeaseGeneration)
		seq, err := appendEvent(ctx, tx, p.Tenant, c.JobID, store.EventCheckpointSaved, now, data)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, qInsertCheckpoint, p.Tenant, c.ID, c.JobID, seq, c.Phase, blob(p.State),
			c.LeaseGeneration, c.ParentID, micros(now))
		if isConstraint(err, sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
			return fmt.Errorf("insert checkpoint: checkpoint id %q already exists; the id generator returned a duplicate", c.ID)
		}
		if err != nil {
			return fmt.Errorf("insert checkpoint: %w", err)
		}
		if _, err := tx.ExecContext(ctx, qTrimCheckpoints, p.Tenant, c.JobID, store.CheckpointHistoryLimit); err != nil {
			return fmt.Errorf("trim checkpoints: %w", err)
		}
		cp = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return cp, nil
}

// ReserveEffect implements store.Store.
func (s *Store) ReserveEffect(ctx context.Context, p store.ReserveEffectParams) (*store.Effect, bool, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, false, err
	}
	if err := store.ValidateEffectKey(p.Key); err != nil {
		return nil, false, err
	}
	var (
		eff      *store.Effect
		reserved bool
	)
	err := s.write(ctx, "reserve_effect", func(tx *writeTx) error {
		now := s.clock(p.Now)
		h, err := holdLease(ctx, tx, p.Tenant, p.Token, now)
		if err != nil {
			return err
		}
		if h == nil {
			return leaseLost(ctx, tx, p.Tenant, p.Token)
		}
		existing, err := scanEffect(tx.QueryRowContext(ctx, qGetEffect, p.Tenant, p.Token.JobID, p.Key))
		switch {
		case errors.Is(err, sql.ErrNoRows):
			eff, err = scanEffect(tx.QueryRowContext(ctx, qInsertEffect, p.Tenant, p.Token.JobID, p.Key, p.Token.Generation, micros(now)))
			if err != nil {
				return fmt.Errorf("reserve effect: %w", err)
			}
			reserved = true
		case err != nil:
			return fmt.Errorf("read effect: %w", err)
		case existing.Status == store.EffectFailed:
			// A failed effect did not happen: this generation may try again.
			eff, err = scanEffect(tx.QueryRowContext(ctx, qReReserveEffect, p.Tenant, p.Token.JobID, p.Key, p.Token.Generation, micros(now)))
			if err != nil {
				return fmt.Errorf("reserve effect: %w", err)
			}
			reserved = true
		default:
			// Succeeded: skip it. Reserved or unknown: reconcile first.
			eff, reserved = existing, false
		}
		return nil
	})
	if err != nil {
		return nil, false, err
	}
	return eff, reserved, nil
}

// RecordEffect implements store.Store. A succeeded entry is final:
// recording on it again returns it unchanged, so the caller sees the outcome
// that counts.
func (s *Store) RecordEffect(ctx context.Context, p store.RecordEffectParams) (*store.Effect, error) {
	if err := store.ValidateRecordEffect(p); err != nil {
		return nil, err
	}
	var eff *store.Effect
	err := s.write(ctx, "record_effect", func(tx *writeTx) error {
		now := s.clock(p.Now)
		h, err := holdLease(ctx, tx, p.Tenant, p.Token, now)
		if err != nil {
			return err
		}
		if h == nil {
			return leaseLost(ctx, tx, p.Tenant, p.Token)
		}
		eff, err = scanEffect(tx.QueryRowContext(ctx, qRecordEffect, p.Tenant, p.Token.JobID, p.Key,
			string(p.Status), p.Token.Generation, p.ProviderOperationID, p.Result, micros(now)))
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("record effect: %w", err)
		}
		// Nothing updated: either never reserved, or already succeeded.
		eff, err = scanEffect(tx.QueryRowContext(ctx, qGetEffect, p.Tenant, p.Token.JobID, p.Key))
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("effect %q of job %q was never reserved: %w", p.Key, p.Token.JobID, store.ErrEffectNotFound)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return eff, nil
}

// ListEffects implements store.Store.
func (s *Store) ListEffects(ctx context.Context, tenant, jobID string) ([]store.Effect, error) {
	if err := store.ValidateJobRef(tenant, jobID); err != nil {
		return nil, err
	}
	var out []store.Effect
	err := s.read(ctx, "list effects", func(tx *preparedTx) error {
		if err := requireJob(ctx, tx, tenant, jobID); err != nil {
			return err
		}
		var err error
		out, err = listEffectsTx(ctx, tx, tenant, jobID)
		return err
	})
	return out, err
}

// ListCheckpoints implements store.Store.
func (s *Store) ListCheckpoints(ctx context.Context, tenant, jobID string) ([]store.Checkpoint, error) {
	if err := store.ValidateJobRef(tenant, jobID); err != nil {
		return nil, err
	}
	var out []store.Checkpoint
	err := s.read(ctx, "list checkpoints", func(tx *preparedTx) error {
		if err := requireJob(ctx, tx, tenant, jobID); err != nil {
			return err
		}
		rows, err := tx.QueryContext(ctx, qListCheckpoints, tenant, jobID)
		if err != nil {
			return fmt.Errorf("list checkpoints: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var (
				c       store.Checkpoint
				state   []byte
				created int64
			)
			if err := rows.Scan(&c.ID, &c.JobID, &c.Phase, &state, &c.LeaseGeneration, &c.ParentID, &created); err != nil {
				return err
			}
			c.State, c.CreatedAt = emptyNil(state), fromMicros(created)
			out = append(out, c)
		}
		return rows.Err()
	})
	return out, err
}

func listEffectsTx(ctx context.Context, q querier, tenant, jobID string) ([]store.Effect, error) {
	rows, err := q.QueryContext(ctx, qListEffects, tenant, jobID)
	if err != nil {
		return nil, fmt.Errorf("list effects: %w", err)
	}
	defer rows.Close()
	var out []store.Effect
	for rows.Next() {
		e, err := scanEffect(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, *e)
	}
	return out, rows.Err()
}
