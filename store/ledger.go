package store

import (
	"fmt"
	"time"
)

// Checkpoints and the effect ledger: what an attempt reports about its
// progress and its side effects, fenced by its lease. The engines lock the
// lease, read the record the decision needs, and write what it says.

// PlanCheckpoint is the checkpoint a holder saves (id, phase and state, at
// now), whose parent is the job's latest checkpoint (parentID, "" for the
// first), and its CHECKPOINT_SAVED event. The engine then keeps only the
// newest CheckpointHistoryLimit of the job's checkpoints.
func PlanCheckpoint(tok LeaseToken, id, phase string, state []byte, parentID string, now time.Time) (*Checkpoint, NewEvent) {
	if len(state) == 0 {
		state = nil // empty and absent read back the same on both engines
	}
	c := &Checkpoint{
		ID: id, JobID: tok.JobID, Phase: phase, State: state,
		LeaseGeneration: tok.Generation, ParentID: parentID, CreatedAt: now,
	}
	return c, NewEvent{Type: EventCheckpointSaved, Data: eventJSON(
		"checkpoint_id", id, "phase", phase, "parent_id", parentID, "lease_generation", tok.Generation)}
}

// EffectAction is what a ReserveEffect does to the ledger.
type EffectAction int

// The actions.
const (
	// EffectKeep leaves the record as it is and answers it, not reserved:
	// a SUCCEEDED effect is skipped, a RESERVED or UNKNOWN one is
	// reconciled first.
	EffectKeep EffectAction = iota
	// EffectInsert reserves a new key for the current generation.
	EffectInsert
	// EffectTakeOver reserves a FAILED effect again for the current
	// generation: a failed effect did not happen, so it may be tried again.
	EffectTakeOver
)

// DecideReserve is ReserveEffect's decision on the key's record (nil when
// the key has none).
func DecideReserve(existing *Effect) EffectAction {
	switch {
	case existing == nil:
		return EffectInsert
	case existing.Status == EffectFailed:
		return EffectTakeOver
	}
	return EffectKeep
}

// DecideRecord is RecordEffect's decision on the key's record (nil when
// the key has none): ErrNotFound for a key never reserved; write is false
// for a SUCCEEDED record, which is final and answered unchanged, so the
// caller sees the outcome that counts.
func DecideRecord(existing *Effect, p RecordEffectParams) (write bool, err error) {
	switch {
	case existing == nil:
		return false, fmt.Errorf("effect %q of job %s was never reserved: %w", p.Key, p.Token.JobID, ErrEffectNotFound)
	case existing.Status == EffectSucceeded:
		return false, nil
	}
	return true, nil
}
