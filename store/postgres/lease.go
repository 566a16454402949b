package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// errNoLease is lockLease's answer when the token is not the current lease;
// diagnose turns it into the caller's answer.
var errNoLease = errors.New("no current lease")

// lockLease is the fencing compare-and-set shared by every lease-bound call:
// it locks the job only if tok is its current, unexpired lease, and returns
// the transaction's instant.
func lockLease(ctx context.Context, tx pgx.Tx, tenant string, tok store.LeaseToken, now time.Time) (time.Time, error) {
	var at time.Time
	_, err := scanJob(tx.QueryRow(ctx, qLockLease, tenant, tok.JobID, tok.WorkerID, tok.Generation, nowArg(now)), &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return time.Time{}, errNoLease
	}
	if err != nil {
		return time.Time{}, err
	}
	return at.UTC(), nil
}

// diagnose answers a lease-bound call whose compare-and-set matched nothing:
// ErrNotFound when the tenant has no such job, ErrLeaseLost otherwise.
func diagnose(ctx context.Context, tx pgx.Tx, tenant string, tok store.LeaseToken) error {
	_, err := getJob(ctx, tx, tenant, tok.JobID)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("job %s: %w", tok.JobID, store.ErrNotFound)
	}
	if err != nil {
		return err
	}
	return fmt.Errorf("job %s generation %d: %w", tok.JobID, tok.Generation, store.ErrLeaseLost)
}

// RequestCancel implements store.Store: QUEUED → CANCELLED at once; LEASED
// → cancel requested (the holder learns it from Renew and acknowledges with
// CancelByHolder, or the next Claim ends the job once its lease expires);
// a repeated request returns the job unchanged; terminal → ErrAlreadyFinal.
func (s *Store) RequestCancel(ctx context.Context, p store.RequestCancelParams) (*store.Job, error) {
	if err := store.ValidateTenant(p.Tenant); err != nil {
		return nil, err
	}
	if err := validateJobID(p.JobID); err != nil {
		return nil, err
	}
	if err := store.ValidateReason(p.Reason); err != nil {
		return nil, err
	}
	var out *store.Job
	err := s.withTx(ctx, "request_cancel", func(tx pgx.Tx) error {
		now, err := txNow(ctx, tx, p.Now)
		if err != nil {
			return err
		}
		rec, err := scanJob(tx.QueryRow(ctx, qLockJob, p.Tenant, p.JobID))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("job %s: %w", p.JobID, store.ErrNotFound)
		}
		if err != nil {
			return err
		}
		plan, err := store.DecideRequestCancel(rec.job, store.ClientChange{Actor: p.Actor, Reason: p.Reason})
		if err != nil {
			return err
		}
		switch plan.Action {
		case store.ActCancelQueued:
			rec, err = scanJob(tx.QueryRow(ctx, qCancelQueued, p.Tenant, p.JobID, now, p.Reason))
		case store.ActRequestCancel:
			rec, err = scanJob(tx.QueryRow(ctx, qRequestCancelLeased, p.Tenant, p.JobID, p.Reason))
		default: // already requested: unchanged, no second event
			out, err = getJob(ctx, tx, p.Tenant, p.JobID)
			return err
		}
		if err != nil {
			return err
		}
		if err := appendReserved(ctx, tx, p.Tenant, p.JobID, rec.lastEventSeq, now, plan.Event); err != nil {
			return err
		}
		if err := attachCheckpoint(ctx, tx, rec.job); err != nil {
			return err
		}
		out = rec.job
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func validateJobID(id string) error {
	return store.ValidateText("job_id", id, store.NameMaxLen, true)
}
