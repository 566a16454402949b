package store

import (
	"errors"
	"fmt"
	"time"
)

// A client's changes to one job from outside its lease: RequestCancel,
// ReplayDeadJob and AbandonDeadJob, and the bulk operations that apply
// them to many jobs (DecideOperationRow). The engines load and lock the
// row, ask the decision below, and write what it says.

// ClientChange is who changes a job and why: the principal's identity
// (Actor, "" for none), the reason, and the bulk operation the change is
// part of ("" for a single-job call). The change's events carry them.
type ClientChange struct {
	Actor     string
	Reason    string
	Operation string
}

// data is the event data of the change with kv's details.
func (c ClientChange) data(kv ...any) string {
	kv = append(kv, "reason", c.Reason)
	if c.Operation != "" {
		kv = append(kv, "operation", c.Operation)
	}
	if c.Actor != "" {
		kv = append(kv, "actor", c.Actor)
	}
	return eventJSON(kv...)
}

// ClientCancel is what a client's cancel does to a job.
type ClientCancel struct {
	// Action is ActCancelQueued (QUEUED → CANCELLED), ActRequestCancel
	// (LEASED → cancel requested), or ActNone for a job already asked to
	// cancel, which is answered unchanged with no second event.
	Action RowAction
	// Event is the action's event (none for ActNone).
	Event NewEvent
}

// DecideRequestCancel is RequestCancel's decision on the locked job j
// (CheckCancel's rule): ErrAlreadyFinal for a finished job.
func DecideRequestCancel(j *Job, c ClientChange) (ClientCancel, error) {
	err := CheckCancel(j)
	switch {
	case errors.Is(err, errCancelPending):
		return ClientCancel{Action: ActNone}, nil
	case err != nil:
		return ClientCancel{}, fmt.Errorf("cancel job %s (%s): %w", j.ID, j.State, err)
	case j.State == JobStateQueued:
		return ClientCancel{Action: ActCancelQueued, Event: CancelEvent(j, c)}, nil
	}
	return ClientCancel{Action: ActRequestCancel, Event: CancelEvent(j, c)}, nil
}

// CancelEvent is the event of a client's cancel of j as it was before the
// cancel: CANCELLED for a QUEUED job, CANCEL_REQUESTED naming the lease
// for a LEASED one.
func CancelEvent(j *Job, c ClientChange) NewEvent {
	if j.State == JobStateQueued {
		return NewEvent{Type: EventCancelled, Data: c.data("by", "client")}
	}
	return NewEvent{Type: EventCancelRequested, Data: c.data("worker_id", j.LeaseOwner, "lease_generation", j.LeaseGeneration)}
}

// DecideReplay is ReplayDeadJob's decision on the locked dead job
// (CheckReplay's rule): again is true when the job was replayed already,
// and the call answers that replay (replayedAs) instead of making one;
// ErrNotDead or ErrAbandoned when it may not be replayed.
func DecideReplay(dead *Job, abandoned bool, replayedAs string) (again bool, err error) {
	err = CheckReplay(dead.State, abandoned, replayedAs)
	switch {
	case errors.Is(err, ErrAlreadyReplayed):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("replay job %s (%s): %w", dead.ID, dead.State, err)
	}
	return false, nil
}

// ReplayGone is ReplayDeadJob's answer when the dead job's replay was
// pruned by retention: there is no job to answer with, and replaying again
// would break the one-replay rule.
func ReplayGone(deadID, replayedAs string) error {
	return fmt.Errorf("replay job %s: replayed as %s, which no longer exists: %w", deadID, replayedAs, ErrAlreadyReplayed)
}

// Replay is a replay's plan: the new job to insert, its QUEUED event
// (sequence 1), and the REPLAYED event appended to the dead job.
type Replay struct {
	Job      *Job
	Queued   NewEvent
	Replayed NewEvent
}

// PlanReplay is the replay of dead as a new job id at now under its
// queue's policy: QUEUED and available at once, with the dead job's spec
// (queue, kind, payload, metadata, priority, attempt budget, dependency,
// concurrency key), ReplayOf set and a fresh retry deadline. A bulk
// operation's replay carries its OperationReplayKey in both events.
func PlanReplay(policy QueuePolicy, dead *Job, id string, now time.Time, c ClientChange) Replay {
	now = now.UTC().Truncate(time.Microsecond)
	j := &Job{
		Tenant: dead.Tenant, ID: id, Queue: dead.Queue, Kind: dead.Kind, Payload: dead.Payload,
		Metadata: dead.Metadata, Priority: dead.Priority, State: JobStateQueued,
		MaxAttempts: dead.MaxAttempts, CreatedAt: now, AvailableAt: now, Dependency: dead.Dependency,
		ConcurrencyKey: dead.ConcurrencyKey, ReplayOf: dead.ID,
	}
	if d := policy.Retry.TotalRetryDeadline; d > 0 {
		j.RetryDeadline = now.Add(d)
	}
	var key []any
	if c.Operation != "" {
		key = []any{"replay_key", OperationReplayKey(c.Operation, dead.ID)}
	}
	return Replay{
		Job:      j,
		Queued:   NewEvent{Type: EventQueued, Data: c.data(append(key, "queue", j.Queue, "available_at", now, "replay_of", dead.ID)...)},
		Replayed: NewEvent{Type: EventReplayed, Data: c.data(append(key, "replayed_as", id)...)},
	}
}

// DecideAbandon is AbandonDeadJob's decision on the locked dead job
// (CheckAbandon's rule): change is false for a job already abandoned,
// answered unchanged; ErrNotDead or ErrAlreadyReplayed when it may not be
// abandoned.
func DecideAbandon(dead *Job, abandoned bool, replayedAs string) (change bool, err error) {
	err = CheckAbandon(dead.State, abandoned, replayedAs)
	switch {
	case errors.Is(err, ErrAbandoned):
		return false, nil
	case errors.Is(err, ErrAlreadyReplayed):
		return false, fmt.Errorf("abandon job %s (replayed as %s): %w", dead.ID, replayedAs, err)
	case err != nil:
		return false, fmt.Errorf("abandon job %s (%s): %w", dead.ID, dead.State, err)
	}
	return true, nil
}

// AbandonEvent is the ABANDONED event of an abandon.
func AbandonEvent(c ClientChange) NewEvent {
	return NewEvent{Type: EventAbandoned, Data: c.data()}
}
