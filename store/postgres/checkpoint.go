package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// SaveCheckpoint implements store.Store. The new checkpoint's parent is the
// job's latest one; a CHECKPOINT_SAVED event records it; only the newest
// store.CheckpointHistoryLimit checkpoints are kept (the oldest kept one may
// name a parent that was trimmed).
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
	var out *store.Checkpoint
	err := s.withTx(ctx, "save_checkpoint", func(tx pgx.Tx) error {
		now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			return diagnose(ctx, tx, p.Tenant, p.Token)
		}
		if err != nil {
			return err
		}
		var parentID string
		parent, err := scanCheckpoint(tx.QueryRow(ctx, qLatestCheckpoint, p.Tenant, p.Token.JobID))
		switch {
		case err == nil:
			parentID = parent.ID
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		id, err := s.newID()
		if err != nil {
			return err
		}
		out, err = scanCheckpoint(tx.QueryRow(ctx, qInsertCheckpoint, p.Tenant, id, p.Token.JobID, p.Phase,
			blobArg(p.State), p.Token.Generation, parentID, now))
		if err != nil {
			return err
		}
		if err := appendEvent(ctx, tx, p.Tenant, p.Token.JobID, now, event{typ: store.EventCheckpointSaved, data: map[string]any{
			"checkpoint_id": id, "phase": p.Phase, "parent_id": parentID, "lease_generation": p.Token.Generation,
		}}); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, qTrimCheckpoints, p.Tenant, p.Token.JobID, store.CheckpointHistoryLimit)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ReserveEffect implements store.Store. A new key is reserved by the
// current generation (reserved = true). An existing record is returned as
// is (reserved = false) — succeeded means skip, reserved or unknown means
// reconcile first — except a FAILED one, which the current generation
// reserves again (reserved = true).
func (s *Store) ReserveEffect(ctx context.Context, p store.ReserveEffectParams) (*store.Effect, bool, error) {
	if err := store.ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return nil, false, err
	}
	if err := store.ValidateEffectKey(p.Key); err != nil {
		return nil, false, err
	}
	var (
		out      *store.Effect
		reserved bool
	)
	err := s.withTx(ctx, "reserve_effect", func(tx pgx.Tx) error {
		now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			return diagnose(ctx, tx, p.Tenant, p.Token)
		}
		if err != nil {
			return err
		}
		out, err = scanEffect(tx.QueryRow(ctx, qInsertEffect, p.Tenant, p.Token.JobID, p.Key, p.Token.Generation, now))
		if err == nil {
			reserved = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		// The job row lock serialises every ledger write of the job, so
		// the record cannot change under us.
		out, err = scanEffect(tx.QueryRow(ctx, qReReserveEffect, p.Tenant, p.Token.JobID, p.Key, p.Token.Generation, now))
		if err == nil {
			reserved = true
			return nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		reserved = false
		out, err = scanEffect(tx.QueryRow(ctx, qGetEffect, p.Tenant, p.Token.JobID, p.Key))
		return err
	})
	if err != nil {
		return nil, false, err
	}
	return out, reserved, nil
}

// RecordEffect implements store.Store. Any current holder may record the
// outcome of any reserved key of its job, e.g. after reconciling an effect
// an earlier generation left unknown; the record then names its generation.
func (s *Store) RecordEffect(ctx context.Context, p store.RecordEffectParams) (*store.Effect, error) {
	if err := store.ValidateRecordEffect(p); err != nil {
		return nil, err
	}
	var out *store.Effect
	err := s.withTx(ctx, "record_effect", func(tx pgx.Tx) error {
		now, err := lockLease(ctx, tx, p.Tenant, p.Token, p.Now)
		if errors.Is(err, errNoLease) {
			return diagnose(ctx, tx, p.Tenant, p.Token)
		}
		if err != nil {
			return err
		}
		out, err = scanEffect(tx.QueryRow(ctx, qRecordEffect, p.Tenant, p.Token.JobID, p.Key, string(p.Status),
			p.Token.Generation, p.ProviderOperationID, p.Result, now))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("effect %q of job %s was never reserved: %w", p.Key, p.Token.JobID, store.ErrEffectNotFound)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ListCheckpoints implements store.Store.
func (s *Store) ListCheckpoints(ctx context.Context, tenant, jobID string) ([]store.Checkpoint, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(jobID); err != nil {
		return nil, err
	}
	if err := s.jobExists(ctx, tenant, jobID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qListCheckpoints, tenant, jobID)
	if err != nil {
		return nil, s.readError(ctx, "list_checkpoints", err)
	}
	cps, err := collect(rows, scanCheckpoint)
	if err != nil {
		return nil, s.readError(ctx, "list_checkpoints", err)
	}
	out := make([]store.Checkpoint, 0, len(cps))
	for _, c := range cps {
		out = append(out, *c)
	}
	return out, nil
}

// ListEffects implements store.Store.
func (s *Store) ListEffects(ctx context.Context, tenant, jobID string) ([]store.Effect, error) {
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(jobID); err != nil {
		return nil, err
	}
	if err := s.jobExists(ctx, tenant, jobID); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, qListEffects, tenant, jobID)
	if err != nil {
		return nil, s.readError(ctx, "list_effects", err)
	}
	effs, err := collect(rows, scanEffect)
	if err != nil {
		return nil, s.readError(ctx, "list_effects", err)
	}
	var out []store.Effect
	for _, e := range effs {
		out = append(out, *e)
	}
	return out, nil
}

// jobExists returns ErrNotFound when the tenant has no job id.
func (s *Store) jobExists(ctx context.Context, tenant, id string) error {
	var ok bool
	err := s.pool.QueryRow(ctx, qJobExists, tenant, id).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return s.readError(ctx, "job_exists", err)
	}
	return nil
}
