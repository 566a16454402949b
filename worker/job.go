package worker

import (
	"context"
	"errors"
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Job is one leased job handed to a Handler. Its fields are a snapshot taken
// when the lease was granted; the handler may read them freely but should
// not modify them.
type Job struct {
	ID    string
	Queue string
	Kind  string
	// Payload is the producer's opaque input.
	Payload []byte
	// Metadata is the producer's string metadata, including the W3C trace
	// context ("traceparent", "tracestate") when the producer had one.
	Metadata map[string]string
	// Attempt is this attempt's number, from 1; MaxAttempts the budget.
	Attempt, MaxAttempts int32
	// Checkpoint is the latest checkpoint saved by any earlier attempt (or
	// nil): resume from Checkpoint.Phase instead of starting over.
	Checkpoint *Checkpoint
	// Effects are the effect ledger entries recorded so far, by earlier
	// attempts. Job.Effect consults the ledger itself; these are for
	// inspection and reconciliation.
	Effects []Effect
	// Token is the lease's fencing token.
	Token LeaseToken

	// exec is the lease the job's reports are published through.
	exec *execution
}

// LeaseToken identifies one lease generation of a job. Only the current
// generation may publish; an older one is fenced out.
type LeaseToken struct {
	JobID      string
	Generation int64
	WorkerID   string
}

// Checkpoint is progress saved by an attempt.
type Checkpoint struct {
	ID    string
	Phase string
	State []byte
	// Generation is the lease generation that saved it.
	Generation int64
	// ParentID is the checkpoint this one superseded ("" for the first).
	ParentID string
}

// EffectStatus is the state of a ledger entry.
type EffectStatus string

// Effect statuses.
const (
	// EffectReserved: reserved before the call, outcome not recorded. Seen
	// by a later attempt it means the call may or may not have happened.
	EffectReserved EffectStatus = "reserved"
	// EffectSucceeded: the call succeeded; its result is recorded.
	EffectSucceeded EffectStatus = "succeeded"
	// EffectFailed: the call failed definitively; a later attempt calls again.
	EffectFailed EffectStatus = "failed"
	// EffectUnknown: the outcome could not be known; reconcile first.
	EffectUnknown EffectStatus = "unknown"
)

// Effect is one entry of the job's effect ledger.
type Effect struct {
	Key    string
	Status EffectStatus
	// Generation is the lease generation that last reserved or recorded it.
	Generation          int64
	ProviderOperationID string
	Result              []byte
}

// errDetached is returned by Job methods on a Job the worker did not hand
// out (e.g. one built in a unit test).
var errDetached = errors.New("worker: job is not attached to a lease (only jobs passed to a Handler can publish)")

// SaveCheckpoint saves progress under phase, fenced by the lease: the next
// attempt finds it in Job.Checkpoint. It returns an error wrapping
// ErrLeaseLost once the lease is gone; stop working then.
func (j *Job) SaveCheckpoint(ctx context.Context, phase string, state []byte) error {
	e := j.exec
	if e == nil {
		return errDetached
	}
	if err := e.checkPublishable(); err != nil {
		return fmt.Errorf("save checkpoint %q: %w", phase, err)
	}
	req := &leaseholdv1.SaveCheckpointRequest{Token: e.token, Phase: phase, State: state}
	err := retryTransient(ctx, func(ctx context.Context) error {
		_, err := e.w.api.SaveCheckpoint(ctx, req)
		return err
	})
	if err != nil {
		return fmt.Errorf("save checkpoint %q: %w", phase, e.publishError(err))
	}
	return nil
}

// Effect runs call at most once per key across all attempts of the job,
// through the coordinator's effect ledger:
//
//   - It reserves key. When an earlier attempt already recorded the effect
//     SUCCEEDED, it returns the recorded result without calling.
//   - When an earlier attempt reserved it but never recorded the outcome, or
//     recorded it UNKNOWN, it returns an *UnknownEffectError without
//     calling: reconcile with the provider first.
//   - Otherwise it calls, records the outcome (SUCCEEDED with the provider
//     operation id and result; UNKNOWN when the call's error wraps
//     ErrEffectUnknown; FAILED otherwise, so a later attempt may call again)
//     and returns call's result and error.
//
// Lease-bound calls fail with an error wrapping ErrLeaseLost once the lease
// is gone.
func (j *Job) Effect(ctx context.Context, key string, call func(ctx context.Context) (providerOpID string, result []byte, err error)) ([]byte, error) {
	e := j.exec
	if e == nil {
		return nil, errDetached
	}
	if err := e.checkPublishable(); err != nil {
		return nil, fmt.Errorf("effect %q: %w", key, err)
	}
	var resp *leaseholdv1.ReserveEffectResponse
	err := retryTransient(ctx, func(ctx context.Context) error {
		var err error
		resp, err = e.w.api.ReserveEffect(ctx, &leaseholdv1.ReserveEffectRequest{Token: e.token, EffectKey: key})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("effect %q: reserve: %w", key, e.publishError(err))
	}
	existing := effectFromProto(resp.GetEffect())
	firstCall := e.startEffect(key)
	reserved := resp.GetReserved()
	// A RESERVED record of our own generation that this attempt never
	// called is our own reservation whose answer was lost and retried:
	// nobody has made the call yet.
	if !reserved && existing.Status == EffectReserved && existing.Generation == e.token.GetLeaseGeneration() && firstCall {
		reserved = true
	}
	if !reserved {
		switch existing.Status {
		case EffectSucceeded:
			return existing.Result, nil
		case EffectReserved, EffectUnknown:
			return nil, &UnknownEffectError{Effect: existing}
		default:
			return nil, fmt.Errorf("effect %q: the ledger holds it as %q and did not reserve it again; reconcile before calling", key, existing.Status)
		}
	}

	opID, result, callErr := call(ctx)
	st := leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED
	switch {
	case errors.Is(callErr, ErrEffectUnknown):
		st = leaseholdv1.EffectStatus_EFFECT_STATUS_UNKNOWN
	case callErr != nil:
		st = leaseholdv1.EffectStatus_EFFECT_STATUS_FAILED
	}
	rec := &leaseholdv1.RecordEffectRequest{Token: e.token, EffectKey: key, Status: st, ProviderOperationId: opID, Result: result}
	// The call has happened: its outcome must be recorded even when the
	// handler's context was cancelled meanwhile, or a later attempt would
	// have to reconcile an effect whose outcome was known here.
	recCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), reportTimeout)
	defer cancel()
	recErr := retryTransient(recCtx, func(ctx context.Context) error {
		_, err := e.w.api.RecordEffect(ctx, rec)
		return err
	})
	if recErr != nil {
		recErr = fmt.Errorf("effect %q: the call returned but its outcome was not recorded (a later attempt will have to reconcile): %w", key, e.publishError(recErr))
		if callErr != nil {
			return nil, errors.Join(callErr, recErr)
		}
		return nil, recErr
	}
	if callErr != nil {
		return nil, callErr
	}
	return result, nil
}

// jobFromProto builds the handler's view of a pushed lease.
func jobFromProto(l *leaseholdv1.LeasedJob) *Job {
	pj := l.GetJob()
	j := &Job{
		ID:          pj.GetId(),
		Queue:       pj.GetQueue(),
		Kind:        pj.GetKind(),
		Payload:     pj.GetPayload(),
		Metadata:    pj.GetMetadata(),
		Attempt:     pj.GetAttempts(),
		MaxAttempts: pj.GetMaxAttempts(),
		Token: LeaseToken{
			JobID:      l.GetToken().GetJobId(),
			Generation: l.GetToken().GetLeaseGeneration(),
			WorkerID:   l.GetToken().GetWorkerId(),
		},
	}
	if j.Metadata == nil {
		j.Metadata = map[string]string{}
	}
	if c := pj.GetCheckpoint(); c != nil {
		j.Checkpoint = &Checkpoint{
			ID:         c.GetId(),
			Phase:      c.GetPhase(),
			State:      c.GetState(),
			Generation: c.GetLeaseGeneration(),
			ParentID:   c.GetParentId(),
		}
	}
	for _, e := range l.GetEffects() {
		j.Effects = append(j.Effects, effectFromProto(e))
	}
	return j
}

func effectFromProto(e *leaseholdv1.Effect) Effect {
	return Effect{
		Key:                 e.GetEffectKey(),
		Status:              effectStatusFromProto(e.GetStatus()),
		Generation:          e.GetLeaseGeneration(),
		ProviderOperationID: e.GetProviderOperationId(),
		Result:              e.GetResult(),
	}
}

func effectStatusFromProto(s leaseholdv1.EffectStatus) EffectStatus {
	switch s {
	case leaseholdv1.EffectStatus_EFFECT_STATUS_RESERVED:
		return EffectReserved
	case leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED:
		return EffectSucceeded
	case leaseholdv1.EffectStatus_EFFECT_STATUS_FAILED:
		return EffectFailed
	case leaseholdv1.EffectStatus_EFFECT_STATUS_UNKNOWN:
		return EffectUnknown
	default:
		return EffectStatus(s.String())
	}
}
