package store

import (
	"time"
)

// JobState is the public lifecycle state of a job. The strings are stored in
// the database.
type JobState string

// The job states. Succeeded, Failed, Cancelled and Dead are terminal.
const (
	JobStateQueued    JobState = "queued"
	JobStateLeased    JobState = "leased"
	JobStateSucceeded JobState = "succeeded"
	JobStateFailed    JobState = "failed"
	JobStateCancelled JobState = "cancelled"
	JobStateDead      JobState = "dead"
)

// Terminal reports whether no transition leaves s.
func (s JobState) Terminal() bool {
	switch s {
	case JobStateSucceeded, JobStateFailed, JobStateCancelled, JobStateDead:
		return true
	default:
		return false
	}
}

// EventType is the type of a job event. The strings are stored.
type EventType string

// The event types. Succeeded, Failed, Cancelled and Dead are terminal: each
// job has exactly one of them, committed with its terminal state.
const (
	EventQueued          EventType = "queued"
	EventLeased          EventType = "leased"
	EventLeaseExpired    EventType = "lease_expired"
	EventReleased        EventType = "released"
	EventCheckpointSaved EventType = "checkpoint_saved"
	EventCancelRequested EventType = "cancel_requested"
	EventRunFailed       EventType = "run_failed"
	EventSucceeded       EventType = "succeeded"
	EventFailed          EventType = "failed"
	EventCancelled       EventType = "cancelled"
	EventDead            EventType = "dead"
	EventReplayed        EventType = "replayed"
	EventAbandoned       EventType = "abandoned"
)

// JobError is an error a worker reported for one attempt.
type JobError struct {
	Code      string
	Message   string
	Retryable bool
}

// The error the reaper records (as the job's LastError and in its RUN_FAILED
// event) when it dead-letters a job whose lease expired with no report and
// whose budget is spent. No worker reported it; it is retryable because a
// crashed or partitioned worker says nothing about the job itself. Both
// engines use these strings so the evidence reads the same.
const (
	ErrorCodeLeaseExpired    = "LEASE_EXPIRED"
	ErrorMessageLeaseExpired = "the lease expired with no report from the worker"
)

// Job is one durable unit of work.
type Job struct {
	Tenant   string
	ID       string
	Queue    string
	Kind     string
	Payload  []byte
	Metadata map[string]string
	Priority int32
	State    JobState

	Attempts    int32
	MaxAttempts int32

	// Lease ownership is kept apart from State: who holds the job is
	// (LeaseOwner, LeaseGeneration, LeaseExpiresAt). LeaseExpiresAt is zero
	// when the job is not leased; LeaseOwner and LeaseGeneration keep the last
	// holder.
	LeaseOwner      string
	LeaseGeneration int64
	LeaseExpiresAt  time.Time
	// LeasedAt is when the current (or last) lease began: the running
	// attempt's claim time.
	LeasedAt time.Time

	CancelRequested bool
	CreatedAt       time.Time
	AvailableAt     time.Time
	FinishedAt      time.Time // zero until terminal
	RetryDeadline   time.Time // zero: no time budget
	LastError       *JobError
	Result          []byte
	ReplayOf        string
	Dependency      string
	// ConcurrencyKey groups jobs for the queue's per-key limits (a
	// customer id, say); empty: the job is in no group.
	ConcurrencyKey string

	// Checkpoint is the latest checkpoint, or nil.
	Checkpoint *Checkpoint
}

// Event is one entry of a job's history. Sequence is gapless per job and
// starts at 1 with EventQueued.
type Event struct {
	JobID    string
	Sequence int64
	Type     EventType
	Time     time.Time
	// Data is a JSON object with details; never the payload or result.
	Data string
}

// Checkpoint is progress saved by an attempt.
type Checkpoint struct {
	ID              string
	JobID           string
	Phase           string
	State           []byte
	LeaseGeneration int64
	ParentID        string
	CreatedAt       time.Time
}

// EffectStatus is the state of a ledger entry. The strings are stored.
type EffectStatus string

// The effect statuses.
const (
	EffectReserved  EffectStatus = "reserved"
	EffectSucceeded EffectStatus = "succeeded"
	EffectFailed    EffectStatus = "failed"
	EffectUnknown   EffectStatus = "unknown"
)

// Effect is one entry of the effect ledger, scoped by (job, key).
type Effect struct {
	JobID               string
	Key                 string
	Status              EffectStatus
	LeaseGeneration     int64
	ProviderOperationID string
	Result              []byte
	CreatedAt           time.Time
	UpdatedAt           time.Time
}

// AttemptOutcome says how an attempt ended. The strings are stored.
type AttemptOutcome string

// The attempt outcomes.
const (
	AttemptRunning      AttemptOutcome = "running"
	AttemptSucceeded    AttemptOutcome = "succeeded"
	AttemptFailed       AttemptOutcome = "failed"
	AttemptLeaseExpired AttemptOutcome = "lease_expired"
	AttemptReleased     AttemptOutcome = "released"
	AttemptCancelled    AttemptOutcome = "cancelled"
)

// Attempt is one claim of a job.
type Attempt struct {
	JobID           string
	Attempt         int32
	LeaseGeneration int64
	WorkerID        string
	ClaimedAt       time.Time
	FinishedAt      time.Time // zero while running
	Outcome         AttemptOutcome
	Error           *JobError
}

// DeadJob is a DEAD job with its evidence.
type DeadJob struct {
	Job        *Job
	Attempts   []Attempt
	ReplayedAs string
	Abandoned  bool
}

// LeaseToken is the fencing token of one lease generation.
type LeaseToken struct {
	JobID      string
	Generation int64
	WorkerID   string
}

// JobSpec is what a producer submits.
type JobSpec struct {
	Queue    string
	Kind     string
	Payload  []byte
	Metadata map[string]string
	Priority int32
	// RunAt is the earliest time to run; zero means now. RunAfter, when
	// positive, wins: now + RunAfter.
	RunAt    time.Time
	RunAfter time.Duration
	// MaxAttempts overrides the queue policy; 0 means the queue's.
	MaxAttempts int32
	Dependency  string
	// ConcurrencyKey groups the job for the queue's per-key limits.
	ConcurrencyKey string
}

// AvailableFrom is when a job created from s at now may first be claimed:
// now, RunAfter later, or RunAt.
func (s JobSpec) AvailableFrom(now time.Time) time.Time {
	switch {
	case s.RunAfter > 0:
		return now.Add(s.RunAfter)
	case !s.RunAt.IsZero():
		return s.RunAt.UTC().Truncate(time.Microsecond)
	}
	return now
}
