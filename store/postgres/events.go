package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// appendReserved inserts evs as the last len(evs) sequences of the job,
// which the statement that changed the job already reserved by raising
// last_event_seq to lastSeq under the row lock.
func appendReserved(ctx context.Context, tx pgx.Tx, tenant, jobID string, lastSeq int64, at time.Time, evs ...store.NewEvent) error {
	first := lastSeq - int64(len(evs)) + 1
	for i, e := range evs {
		if _, err := tx.Exec(ctx, qInsertEvent, tenant, jobID, first+int64(i), string(e.Type), at, e.Data); err != nil {
			return err
		}
	}
	return nil
}

// appendEvent reserves the job's next sequence (locking the row) and inserts
// e with it.
func appendEvent(ctx context.Context, tx pgx.Tx, tenant, jobID string, at time.Time, e store.NewEvent) error {
	var seq int64
	if err := tx.QueryRow(ctx, qBumpEventSeq, tenant, jobID, 1).Scan(&seq); err != nil {
		return err
	}
	return appendReserved(ctx, tx, tenant, jobID, seq, at, e)
}
