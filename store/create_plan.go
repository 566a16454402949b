package store

import (
	"fmt"
	"time"
)

// The create plan: how a create call's requests resolve their request ids
// (idempotency) and unique keys, the same on both engines. PlanCreate
// decides what the call alone says (repeats within the call); the engine
// then reads each new request id's stored record and asks DecideRequestID.

// CreateStep is one request of a create call as PlanCreate decides it.
type CreateStep struct {
	// Fingerprint is the spec's Fingerprint, "" for a request without a
	// request id.
	Fingerprint string
	// RepeatOf is the earlier request of the call with the same request
	// id and spec, which this one replays (its answer, Replayed); -1 when
	// none.
	RepeatOf int
	// Unique is the request's uniqueness (PlanUnique).
	Unique UniqueRequest
}

// PlanCreate plans a call's requests: PlanUnique's uniqueness, then each
// request id's first use in the call. A request id repeated with the same
// spec replays its first request; with another spec it fails the whole
// call with ErrIdempotencyConflict naming the repeat.
func PlanCreate(reqs []CreateRequest) ([]CreateStep, error) {
	uq, err := PlanUnique(reqs)
	if err != nil {
		return nil, err
	}
	steps := make([]CreateStep, len(reqs))
	first := map[string]int{}
	for i, r := range reqs {
		steps[i] = CreateStep{RepeatOf: -1, Unique: uq[i]}
		if r.RequestID == "" {
			continue
		}
		steps[i].Fingerprint = Fingerprint(r.Spec)
		j, ok := first[r.RequestID]
		switch {
		case !ok:
			first[r.RequestID] = i
		case steps[j].Fingerprint != steps[i].Fingerprint:
			return nil, IdempotencyConflictError(i, len(reqs))
		default:
			steps[i].RepeatOf = j
		}
	}
	return steps, nil
}

// IdempotencyConflictError is the refusal of a call whose request i (of
// n) reuses a request id for another spec, naming the request the way
// ValidateCreate does.
func IdempotencyConflictError(i, n int) error {
	field := "request_id"
	if n > 1 {
		field = fmt.Sprintf("requests[%d].request_id", i)
	}
	return fmt.Errorf("%s: %w", field, ErrIdempotencyConflict)
}

// IdempotencyRecord is a request id's stored record as an engine read it.
type IdempotencyRecord struct {
	Fingerprint string
	ExpiresAt   time.Time
	// Job is the record's job; nil when retention pruned it.
	Job *Job
}

// KeyDecision is what a new request does with its request id's record.
type KeyDecision int

// The decisions.
const (
	// KeyTake: the request id is free (no record, an expired one, or one
	// whose job was pruned): the new job takes it.
	KeyTake KeyDecision = iota
	// KeyReplay: the record's job answers the request, Replayed.
	KeyReplay
	// KeyConflict: the request id was used for another spec; the call
	// fails with ErrIdempotencyConflict.
	KeyConflict
)

// DecideRequestID is a request's decision at now on its request id's
// record (nil when there is none), for its spec's fingerprint fp.
func DecideRequestID(fp string, rec *IdempotencyRecord, now time.Time) KeyDecision {
	switch {
	case rec == nil || !rec.ExpiresAt.After(now) || rec.Job == nil:
		return KeyTake
	case rec.Fingerprint != fp:
		return KeyConflict
	}
	return KeyReplay
}
