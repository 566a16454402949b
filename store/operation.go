package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
)

// Bulk operations: one action (cancel, retry now, replay, abandon, delete,
// set priority) on every job a filter matches, tracked as an Operation.
//
// The model:
//
//   - StartOperation fixes the match: in one transaction it inserts the
//     operation and one item per matching job (INSERT … SELECT over the
//     filter). Jobs created afterwards are never items, so never touched.
//   - A coordinator claims a running operation with a lease (owner,
//     expiry: ClaimOperation) and works through its items in chunks
//     (RunOperationChunk). A chunk is one transaction fenced on the lease:
//     it locks up to OperationChunkMax pending items' jobs, decides each
//     with DecideOperationRow (the rules of the single-job call), applies
//     the actions, and marks each item with its result. The marks commit
//     with the actions, so a coordinator killed mid-chunk commits neither,
//     and whoever resumes after the lease expires acts on each job once.
//   - When no item is pending the chunk finishes the operation; a cancel
//     request finishes it as cancelled at the next chunk.
//   - Finished operations are pruned after a retention period
//     (PruneOperations).

// OperationKind is what an operation does to each job. The strings are
// stored.
type OperationKind string

// The kinds.
const (
	OperationCancel      OperationKind = "cancel"
	OperationRetry       OperationKind = "retry"
	OperationReplay      OperationKind = "replay"
	OperationAbandon     OperationKind = "abandon"
	OperationDelete      OperationKind = "delete"
	OperationSetPriority OperationKind = "set_priority"
)

// OperationState is where an operation is. The strings are stored.
type OperationState string

// The states. All but running are final.
const (
	OperationRunning   OperationState = "running"
	OperationSucceeded OperationState = "succeeded"
	OperationCancelled OperationState = "cancelled"
	OperationFailed    OperationState = "failed"
)

// RowResult is what an operation did to one matched job. The numbers are
// stored in the items table.
type RowResult int

// The results. RowPending is an item not handled yet.
const (
	RowPending RowResult = iota
	RowActed
	RowSkippedChanged
	RowSkippedOutOfScope
	RowFailed
)

// Bounds and defaults of operations.
const (
	// OperationChunkMax bounds the jobs of one chunk transaction.
	OperationChunkMax = 5000
	// OperationChunkDefault is the chunk size when the caller gives none.
	OperationChunkDefault = 1000
	// OperationsRunningDefault is how many operations a tenant may run at
	// once unless configured.
	OperationsRunningDefault = 2
	// OperationPriorityMax bounds SetJobsPriority's priority (both signs).
	OperationPriorityMax = 1_000_000
)

// ErrOperationLimit is returned when a tenant already runs as many
// operations as allowed.
var ErrOperationLimit = errors.New("operation limit reached")

// ErrOperationNotFound is returned when an operation does not exist for
// the tenant. It matches ErrNotFound.
var ErrOperationNotFound error = &notFound{what: "operation"}

// ErrOperationLeaseLost is returned by RunOperationChunk when the caller no
// longer holds the operation (its lease expired and another coordinator
// took it, or it finished): the caller must stop working on it.
var ErrOperationLeaseLost = errors.New("operation lease lost")

// OperationCounts counts an operation's items by result.
type OperationCounts struct {
	Matched, Acted, SkippedChanged, SkippedOutOfScope, Failed int64
}

// Remaining is how many items are still pending.
func (c *OperationCounts) Remaining() int64 {
	return c.Matched - c.Acted - c.SkippedChanged - c.SkippedOutOfScope - c.Failed
}

// Add counts one more item with result r.
func (c *OperationCounts) Add(r RowResult, n int64) {
	switch r {
	case RowActed:
		c.Acted += n
	case RowSkippedChanged:
		c.SkippedChanged += n
	case RowSkippedOutOfScope:
		c.SkippedOutOfScope += n
	case RowFailed:
		c.Failed += n
	case RowPending:
	}
}

// Operation is one bulk action.
type Operation struct {
	Tenant   string
	ID       string
	Kind     OperationKind
	State    OperationState
	Filter   string // as given; parsed again by each chunk
	Reason   string
	Priority int32 // OperationSetPriority only
	// Actor and ActorName name the principal that started it; QueueScope
	// is its queue patterns (empty: every queue), applied to each job.
	Actor, ActorName string
	QueueScope       []string
	CreatedAt        time.Time
	UpdatedAt        time.Time // zero until the first chunk
	FinishedAt       time.Time // zero while running
	Counts           OperationCounts
	Error            string
	CancelRequested  bool
	// LeaseOwner and LeaseExpiresAt: the coordinator working on it.
	LeaseOwner     string
	LeaseExpiresAt time.Time
}

// Done reports whether the operation is final.
func (o *Operation) Done() bool { return o.State != OperationRunning }

// StartOperationParams starts an operation.
type StartOperationParams struct {
	Tenant     string
	ID         string // "" = a new id
	Kind       OperationKind
	Filter     JobFilter // parsed, narrowed by OperationFilter
	FilterText string
	Reason     string
	Priority   int32
	Actor      string
	ActorName  string
	QueueScope []string
	// Limit is how many running operations the tenant may have, this one
	// included; 0 means OperationsRunningDefault.
	Limit int
	Now   time.Time
}

// ListOperationsParams pages operations newest first.
type ListOperationsParams struct {
	Tenant string
	State  OperationState // "" = all
	Limit  int
	Cursor string
}

// OperationPage is one page of operations.
type OperationPage struct {
	Operations []*Operation
	NextCursor string
}

// ClaimOperationParams claims a running operation nobody holds.
type ClaimOperationParams struct {
	Owner    string
	LeaseTTL time.Duration
	Now      time.Time
}

// RunChunkParams runs one chunk of an operation the caller holds.
type RunChunkParams struct {
	Tenant, ID string
	Owner      string
	// LeaseTTL extends the lease from the chunk's commit.
	LeaseTTL time.Duration
	// Limit bounds the chunk's items: 0 = OperationChunkDefault, at most
	// OperationChunkMax.
	Limit int
	Now   time.Time
}

// FailOperationParams fails an operation.
type FailOperationParams struct {
	Tenant, ID, Owner string
	Error             string
	Now               time.Time
}

// ChunkResult is what one chunk did.
type ChunkResult struct {
	// Operation after the chunk (final when it finished it).
	Operation *Operation
	// Rows counts the chunk's items by result.
	Rows OperationCounts
	// Handled is how many items the chunk handled.
	Handled int
	// Finished is true when the chunk finished the operation (nothing
	// pending, or cancel requested).
	Finished bool
	// Queues are the queues that got available jobs (to wake dispatchers).
	Queues []QueueRef
}

// Operations keeps bulk operations (operation.go has the model).
type Operations interface {
	// StartOperation fixes the match and stores a running operation, in
	// one transaction. ErrOperationLimit when the tenant already runs
	// Limit operations.
	StartOperation(ctx context.Context, p StartOperationParams) (*Operation, error)
	// GetOperation returns one operation (ErrOperationNotFound).
	GetOperation(ctx context.Context, tenant, id string) (*Operation, error)
	// ListOperations pages a tenant's operations newest first.
	ListOperations(ctx context.Context, p ListOperationsParams) (*OperationPage, error)
	// CancelOperation asks a running operation to stop: it stops at its
	// next chunk. Repeating it, or cancelling a finished operation,
	// returns the operation unchanged.
	CancelOperation(ctx context.Context, tenant, id string, now time.Time) (*Operation, error)
	// ClaimOperation leases to Owner, across tenants, the oldest running
	// operation whose lease is free or expired (or held by Owner), or
	// returns nil when there is none.
	ClaimOperation(ctx context.Context, p ClaimOperationParams) (*Operation, error)
	// RunOperationChunk handles up to Limit pending items of an operation
	// Owner holds, in one transaction (see the model above).
	// ErrOperationLeaseLost when Owner no longer holds it.
	RunOperationChunk(ctx context.Context, p RunChunkParams) (ChunkResult, error)
	// FailOperation ends an operation Owner holds as failed, with the
	// error (a chunk that keeps failing). ErrOperationLeaseLost when Owner
	// no longer holds it.
	FailOperation(ctx context.Context, p FailOperationParams) (*Operation, error)
	// PruneOperations deletes, across tenants, up to Limit operations
	// finished before Before, with their items.
	PruneOperations(ctx context.Context, before time.Time, limit int) (int64, error)
}

// operationStates are the job states each kind can act on: its match is
// narrowed to them.
var operationStates = map[OperationKind][]JobState{
	OperationCancel:      {JobStateQueued, JobStateLeased},
	OperationRetry:       {JobStateQueued},
	OperationReplay:      {JobStateDead},
	OperationAbandon:     {JobStateDead},
	OperationDelete:      {JobStateSucceeded, JobStateFailed, JobStateCancelled, JobStateDead},
	OperationSetPriority: {JobStateQueued},
}

// ValidOperationKind reports whether k is a known kind.
func ValidOperationKind(k OperationKind) bool {
	_, ok := operationStates[k]
	return ok
}

// OperationFilter narrows f to the states kind acts on: the filter's
// states, when it names any, must be among them (a filter that names only
// others could match nothing, and is refused as a mistake).
func OperationFilter(kind OperationKind, f JobFilter) (JobFilter, error) {
	allowed, ok := operationStates[kind]
	if !ok {
		return f, Invalid("kind", fmt.Sprintf("unknown operation kind %q", kind))
	}
	if len(f.States) == 0 {
		f.States = slices.Clone(allowed)
		return f, nil
	}
	var keep []JobState
	for _, s := range f.States {
		if slices.Contains(allowed, s) {
			keep = append(keep, s)
		}
	}
	if len(keep) == 0 {
		names := make([]string, len(allowed))
		for i, s := range allowed {
			names[i] = string(s)
		}
		return f, &FilterError{Field: "state", Description: fmt.Sprintf("a %s acts on %v jobs only", kind, names)}
	}
	f.States = keep
	return f, nil
}

// ValidateStartOperation checks a StartOperationParams.
func ValidateStartOperation(p StartOperationParams) error {
	if err := ValidateTenant(p.Tenant); err != nil {
		return err
	}
	if !ValidOperationKind(p.Kind) {
		return Invalid("kind", fmt.Sprintf("unknown operation kind %q", p.Kind))
	}
	if p.Filter.IsZero() {
		return &FilterError{Field: "", Description: "is required: an empty filter would act on every job of the tenant"}
	}
	if p.Priority > OperationPriorityMax || p.Priority < -OperationPriorityMax {
		return Invalid("priority", fmt.Sprintf("must be between %d and %d", -OperationPriorityMax, OperationPriorityMax))
	}
	return ValidateReason(p.Reason)
}

// OperationRow is one matched job as a chunk reads it: the job (nil when
// it is gone), whether it still matches the operation's filter, and the
// dead-letter marks the single-job calls look at.
type OperationRow struct {
	JobID      string
	Job        *Job
	Matches    bool
	ReplayedAs string
	Abandoned  bool
	// LastEventSeq is the job's newest event sequence (locked: the next
	// event appended is LastEventSeq+1).
	LastEventSeq int64
}

// RowAction is what a chunk does to one job it acts on.
type RowAction int

// The actions.
const (
	ActNone RowAction = iota
	// ActCancelQueued: QUEUED → CANCELLED (CANCELLED event).
	ActCancelQueued
	// ActRequestCancel: LEASED → cancel requested (CANCEL_REQUESTED event).
	ActRequestCancel
	// ActMakeAvailable: a waiting QUEUED job becomes available now.
	ActMakeAvailable
	// ActReplay: a new job from the dead one (ReplayDeadJob).
	ActReplay
	// ActAbandon: the dead job is abandoned (AbandonDeadJob).
	ActAbandon
	// ActDelete: the finished job and its history are deleted.
	ActDelete
	// ActSetPriority: the QUEUED job's priority is set.
	ActSetPriority
)

// RowDecision is DecideOperationRow's answer.
type RowDecision struct {
	Result RowResult
	Action RowAction
}

// DecideOperationRow decides what op does to one matched job at now, by the
// rules of the single-job call of its kind: a job outside the starter's
// queue scope is skipped out of scope; one that is gone or no longer
// matches the filter is skipped as changed; then the call's own rules
// (CancelJob refuses a finished job and repeats a pending cancel request;
// ReplayDeadJob refuses an abandoned job and answers an earlier replay;
// AbandonDeadJob refuses a replayed job and repeats an abandon): a job the
// call would refuse or leave unchanged is skipped as changed.
func DecideOperationRow(op *Operation, row OperationRow, now time.Time) RowDecision {
	skip := RowDecision{Result: RowSkippedChanged}
	j := row.Job
	if j == nil {
		return skip
	}
	if !MatchQueue(op.QueueScope, j.Queue) {
		return RowDecision{Result: RowSkippedOutOfScope}
	}
	if !row.Matches {
		return skip
	}
	act := func(a RowAction) RowDecision { return RowDecision{Result: RowActed, Action: a} }
	switch op.Kind {
	case OperationCancel:
		if err := CheckCancel(j); err != nil {
			return skip
		}
		if j.State == JobStateQueued {
			return act(ActCancelQueued)
		}
		return act(ActRequestCancel)
	case OperationRetry:
		if j.State == JobStateQueued && j.AvailableAt.After(now) {
			return act(ActMakeAvailable)
		}
	case OperationReplay:
		if CheckReplay(j.State, row.Abandoned, row.ReplayedAs) == nil {
			return act(ActReplay)
		}
	case OperationAbandon:
		if CheckAbandon(j.State, row.Abandoned, row.ReplayedAs) == nil {
			return act(ActAbandon)
		}
	case OperationDelete:
		if j.State.Terminal() {
			return act(ActDelete)
		}
	case OperationSetPriority:
		if j.State == JobStateQueued && j.Priority != op.Priority {
			return act(ActSetPriority)
		}
	}
	return skip
}

// CheckCancel is CancelJob's rule: nil when a cancel would change the job
// (QUEUED, or LEASED without a pending request); ErrAlreadyFinal for a
// finished job; errCancelPending for a job already asked to cancel.
func CheckCancel(j *Job) error {
	switch {
	case j.State.Terminal():
		return ErrAlreadyFinal
	case j.State == JobStateLeased && j.CancelRequested:
		return errCancelPending
	}
	return nil
}

var errCancelPending = errors.New("cancel already requested")

// CheckReplay is ReplayDeadJob's rule: nil when the job may be replayed now.
func CheckReplay(state JobState, abandoned bool, replayedAs string) error {
	switch {
	case state != JobStateDead:
		return ErrNotDead
	case abandoned:
		return ErrAbandoned
	case replayedAs != "":
		return ErrAlreadyReplayed
	}
	return nil
}

// CheckAbandon is AbandonDeadJob's rule: nil when the job may be abandoned
// now (an already abandoned job answers ErrAbandoned: nothing to do).
func CheckAbandon(state JobState, abandoned bool, replayedAs string) error {
	switch {
	case state != JobStateDead:
		return ErrNotDead
	case replayedAs != "":
		return ErrAlreadyReplayed
	case abandoned:
		return ErrAbandoned
	}
	return nil
}

// OperationReplayKey is the idempotency key of the replay an operation
// makes of a dead job: recorded on the replay's events, it derives from
// the operation and the job, so a resumed operation that meets a job it
// already replayed recognises it.
func OperationReplayKey(opID, jobID string) string { return "operation:" + opID + ":" + jobID }

// EncodeQueueScope is the stored form of a queue scope.
func EncodeQueueScope(scope []string) string {
	if len(scope) == 0 {
		return "[]"
	}
	b, err := json.Marshal(scope)
	if err != nil { // a []string always marshals
		return "[]"
	}
	return string(b)
}

// DecodeQueueScope reads EncodeQueueScope's form.
func DecodeQueueScope(s string) ([]string, error) {
	var out []string
	if s == "" {
		return nil, nil
	}
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, fmt.Errorf("decode queue scope: %w", err)
	}
	return out, nil
}

// FinishState is the state a chunk leaves op in after handling its items,
// with pending items still left or not.
func FinishState(op *Operation, pendingLeft bool) (OperationState, bool) {
	switch {
	case op.CancelRequested:
		return OperationCancelled, true
	case !pendingLeft:
		return OperationSucceeded, true
	}
	return OperationRunning, false
}

// ChunkLimit is the chunk size for a requested limit.
func ChunkLimit(n int) int {
	if n <= 0 {
		return OperationChunkDefault
	}
	return min(n, OperationChunkMax)
}
