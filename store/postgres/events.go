package postgres

import (
	"context"
	"encoding/json"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

// event is one event to append. data holds small details (worker,
// generation, error, next run...), never a payload or result.
type event struct {
	typ  store.EventType
	data map[string]any
}

func (e event) json() string {
	if len(e.data) == 0 {
		return "{}"
	}
	b, err := json.Marshal(e.data)
	if err != nil {
		// Only strings, numbers, booleans and times go in data.
		panic("postgres: unencodable event data: " + err.Error())
	}
	return string(b)
}

// appendReserved inserts evs as the last len(evs) sequences of the job,
// which the statement that changed the job already reserved by raising
// last_event_seq to lastSeq under the row lock.
func appendReserved(ctx context.Context, tx pgx.Tx, tenant, jobID string, lastSeq int64, at time.Time, evs ...event) error {
	first := lastSeq - int64(len(evs)) + 1
	for i, e := range evs {
		if _, err := tx.Exec(ctx, qInsertEvent, tenant, jobID, first+int64(i), string(e.typ), at, e.json()); err != nil {
			return err
		}
	}
	return nil
}

// appendEvent reserves the job's next sequence (locking the row) and inserts
// e with it.
func appendEvent(ctx context.Context, tx pgx.Tx, tenant, jobID string, at time.Time, e event) error {
	var seq int64
	if err := tx.QueryRow(ctx, qBumpEventSeq, tenant, jobID, 1).Scan(&seq); err != nil {
		return err
	}
	return appendReserved(ctx, tx, tenant, jobID, seq, at, e)
}
