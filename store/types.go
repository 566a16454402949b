package store

import (
	"cmp"
	"context"
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

// The error a Claim records (as the job's LastError and in its RUN_FAILED
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

// RetryPolicy says how failed attempts are retried. See NextRetryDelay.
type RetryPolicy struct {
	MaxAttempts            int32
	InitialDelay           time.Duration
	MaxDelay               time.Duration
	Multiplier             float64
	JitterFraction         float64
	RetryableErrorCodes    []string
	NonRetryableErrorCodes []string
	// TotalRetryDeadline is the time budget from creation; 0 means none.
	TotalRetryDeadline time.Duration
}

// QueuePolicy is the configuration of one queue.
type QueuePolicy struct {
	Queue                string
	Retry                RetryPolicy
	DefaultLeaseDuration time.Duration
	// MaxLeaseDuration bounds every lease of the queue: what a claim, a
	// worker stream or a renewal asks for is cut to it. Zero means
	// MaxLeaseDurationDefault.
	MaxLeaseDuration time.Duration
	// ConcurrencyLimit caps leased jobs of the queue fleet-wide; 0 = none.
	ConcurrencyLimit int32
	// KeyConcurrencyLimit caps leased jobs of each concurrency key of the
	// queue fleet-wide; 0 = none. Jobs with no key are not limited by it.
	KeyConcurrencyLimit int32
	// RateLimit caps how many of the queue's jobs start (are leased) per
	// interval, fleet-wide.
	RateLimit RateLimit
	// DefaultDependency is the dependency of jobs created without one.
	DefaultDependency string
	Paused            bool
}

// RateLimit is at most Starts leases per Interval, counted in fixed
// windows of Interval: over any span T at most Starts × (T/Interval + 1)
// start. Starts = 0 means no limit.
type RateLimit struct {
	Starts   int32
	Interval time.Duration
	// PerKey counts each concurrency key on its own (jobs with no key are
	// not limited); otherwise the queue as a whole.
	PerKey bool
}

// LeaseFor is the lease a claim or renewal asking for d gets in the queue:
// the queue's default when d is zero, never more than its maximum.
func (p QueuePolicy) LeaseFor(d time.Duration) time.Duration {
	if d == 0 {
		d = cmp.Or(p.DefaultLeaseDuration, LeaseDurationDefault)
	}
	return min(d, cmp.Or(p.MaxLeaseDuration, MaxLeaseDurationDefault))
}

// QueueStats counts a queue's jobs by state.
type QueueStats struct {
	Queue     string
	Queued    int64
	Available int64
	Leased    int64
	Succeeded int64
	Failed    int64
	Cancelled int64
	Dead      int64
	Paused    bool
}

// Add counts n jobs of a queue in state (available of them claimable now,
// for queued jobs). Engines use it to fold a GROUP BY state result.
func (st *QueueStats) Add(state JobState, n, available int64) {
	switch state {
	case JobStateQueued:
		st.Queued += n
		st.Available += available
	case JobStateLeased:
		st.Leased += n
	case JobStateSucceeded:
		st.Succeeded += n
	case JobStateFailed:
		st.Failed += n
	case JobStateCancelled:
		st.Cancelled += n
	case JobStateDead:
		st.Dead += n
	}
}

// QueueSummary is a queue's effective policy and its stats.
type QueueSummary struct {
	Policy QueuePolicy
	Stats  QueueStats
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

// CreateRequest is one job to create.
type CreateRequest struct {
	Spec JobSpec
	// RequestID is the producer's idempotency key; empty means none.
	RequestID string
}

// CreateJobsParams creates jobs in one transaction.
type CreateJobsParams struct {
	Tenant   string
	Requests []CreateRequest
	// IdempotencyWindow is how long idempotency records live; zero means
	// IdempotencyWindowDefault.
	IdempotencyWindow time.Duration
	Now               time.Time
}

// CreateResult is one created or replayed job.
type CreateResult struct {
	Job *Job
	// Replayed is true when the request matched an earlier equivalent one
	// and Job is that request's job.
	Replayed bool
}

// ListJobsParams filters and pages jobs.
type ListJobsParams struct {
	Tenant string
	Queue  string
	Kind   string
	States []JobState
	Limit  int
	// Cursor is an opaque value from a previous JobPage; empty for the first.
	Cursor string
	// View is how much of each job to read. Default JobViewFull.
	View JobView
	// MaxBytes is the page's byte budget (JobSize of its jobs): a page
	// that would exceed it ends early, with NextCursor set. It always
	// holds at least one job. 0 means PageBytesDefault.
	MaxBytes int
}

// JobPage is one page of jobs.
type JobPage struct {
	Jobs       []*Job
	NextCursor string
}

// ListEventsParams pages a job's events.
type ListEventsParams struct {
	Tenant        string
	JobID         string
	AfterSequence int64
	Limit         int
}

// ClaimParams asks for up to Max jobs.
type ClaimParams struct {
	Tenant string
	Worker string
	Queues []string
	Max    int
	// LeaseDuration of zero means each queue's DefaultLeaseDuration.
	LeaseDuration time.Duration
	Now           time.Time
}

// Many is p as a ClaimMany for its one worker.
func (p ClaimParams) Many() ClaimManyParams {
	return ClaimManyParams{
		Tenant: p.Tenant, Queues: p.Queues, Now: p.Now,
		Waiters: []ClaimWaiter{{Worker: p.Worker, Max: p.Max, LeaseDuration: p.LeaseDuration}},
	}
}

// ClaimManyParams claims for several waiters of one tenant and queue set at
// once, in one statement.
type ClaimManyParams struct {
	Tenant string
	Queues []string
	// Waiters share the claim. Each gets at most its Max jobs; when fewer
	// jobs are available than asked for, shares are in proportion to Max.
	Waiters []ClaimWaiter
	Now     time.Time
}

// ClaimWaiter is one worker asking for jobs in a ClaimMany.
type ClaimWaiter struct {
	Worker string
	Max    int
	// LeaseDuration of zero means each queue's DefaultLeaseDuration; it is
	// cut to each queue's MaxLeaseDuration.
	LeaseDuration time.Duration
}

// ReapParams bounds one pass of ReapExpired.
type ReapParams struct {
	// Limit bounds the leases ended in one transaction; zero means
	// ReapBatchDefault.
	Limit int
	Now   time.Time
}

// ReapResult says what ReapExpired did.
type ReapResult struct {
	// Jobs are the jobs whose expired leases were ended, as they are now:
	// QUEUED again, CANCELLED or DEAD.
	Jobs []*Job
	// Requeued lists the queues (once each) that got jobs back.
	Requeued []QueueRef
	// NextExpiry is the earliest expiry of the leases still held, zero when
	// none is.
	NextExpiry time.Time
}

// ClaimedJob is a job leased by Claim.
type ClaimedJob struct {
	Job   *Job
	Token LeaseToken
	// Effects are the job's ledger entries so far (earlier attempts').
	Effects []Effect
}

// RenewParams renews leases of one worker.
type RenewParams struct {
	Tenant        string
	Tokens        []LeaseToken
	LeaseDuration time.Duration
	Now           time.Time
}

// RenewStatus is the per-lease outcome of Renew.
type RenewStatus string

// The renew outcomes.
const (
	RenewRenewed         RenewStatus = "renewed"
	RenewLost            RenewStatus = "lost"
	RenewCancelRequested RenewStatus = "cancel_requested"
)

// RenewResult is the answer for one token.
type RenewResult struct {
	Token     LeaseToken
	Status    RenewStatus
	ExpiresAt time.Time // set unless lost
}

// CompleteParams finishes a job.
type CompleteParams struct {
	Tenant string
	Token  LeaseToken
	Result []byte
	Now    time.Time
}

// RetryParams reports a failed attempt.
type RetryParams struct {
	Tenant string
	Token  LeaseToken
	Error  JobError
	// RetryAfter, when longer than the computed backoff, is the delay used.
	RetryAfter time.Duration
	Now        time.Time
}

// CancelByHolderParams ends the holder's attempt as cancelled.
type CancelByHolderParams struct {
	Tenant string
	Token  LeaseToken
	Reason string
	Now    time.Time
}

// ReleaseParams gives a job back.
type ReleaseParams struct {
	Tenant string
	Token  LeaseToken
	Now    time.Time
}

// RequestCancelParams is a client's cancel.
type RequestCancelParams struct {
	Tenant string
	JobID  string
	Reason string
	// Actor is the identity of the principal that asked (store.Principal
	// Identity, or "anonymous"); when set it is recorded as "actor" in the
	// data of the event the call appends.
	Actor string
	Now   time.Time
}

// SaveCheckpointParams saves progress.
type SaveCheckpointParams struct {
	Tenant string
	Token  LeaseToken
	Phase  string
	State  []byte
	Now    time.Time
}

// ReserveEffectParams reserves an effect key.
type ReserveEffectParams struct {
	Tenant string
	Token  LeaseToken
	Key    string
	Now    time.Time
}

// RecordEffectParams records an effect's outcome.
type RecordEffectParams struct {
	Tenant              string
	Token               LeaseToken
	Key                 string
	Status              EffectStatus // succeeded, failed or unknown
	ProviderOperationID string
	Result              []byte
	Now                 time.Time
}

// ListDeadJobsParams pages dead jobs.
type ListDeadJobsParams struct {
	Tenant           string
	Queue            string
	IncludeAbandoned bool
	Limit            int
	Cursor           string
	// View and MaxBytes are as in ListJobsParams; the budget counts
	// DeadJobSize.
	View     JobView
	MaxBytes int
}

// DeadJobPage is one page of dead jobs.
type DeadJobPage struct {
	DeadJobs   []*DeadJob
	NextCursor string
}

// ReplayDeadJobParams replays a dead job.
type ReplayDeadJobParams struct {
	Tenant string
	JobID  string
	Reason string
	// Actor is the identity of the principal that asked (store.Principal
	// Identity, or "anonymous"); when set it is recorded as "actor" in the
	// data of the event the call appends.
	Actor string
	Now   time.Time
}

// AbandonDeadJobParams abandons a dead job.
type AbandonDeadJobParams struct {
	Tenant string
	JobID  string
	Reason string
	// Actor is the identity of the principal that asked (store.Principal
	// Identity, or "anonymous"); when set it is recorded as "actor" in the
	// data of the event the call appends.
	Actor string
	Now   time.Time
}

// QueueStatsParams names a queue.
type QueueStatsParams struct {
	Tenant string
	Queue  string
	Now    time.Time
}

// PruneParams says what retention removes.
type PruneParams struct {
	// FinishedBefore: terminal jobs finished before it are removed.
	FinishedBefore time.Time
	// BatchSize bounds each transaction; zero means PruneBatchSizeDefault.
	BatchSize int
	Now       time.Time
}

// PruneResult counts what Prune removed.
type PruneResult struct {
	Jobs               int64
	IdempotencyRecords int64
}

// QueueRef names a queue of a tenant.
type QueueRef struct {
	Tenant string
	Queue  string
}

// JobNotifier is implemented by engines that can wake dispatchers when jobs
// become available (created, rescheduled, released), so that idle worker
// streams do not have to poll. PostgreSQL uses LISTEN/NOTIFY, which reaches
// every coordinator on the database; SQLite notifies within the process.
type JobNotifier interface {
	// SubscribeJobs delivers the queues that got available jobs until ctx is
	// done, then closes the channel. Notifications are coalesced and may be
	// dropped when the receiver is slow: they are hints, and the dispatcher
	// still polls as a fallback.
	SubscribeJobs(ctx context.Context) (<-chan QueueRef, error)
}

// JobRef names a job of a tenant.
type JobRef struct {
	Tenant string
	ID     string
}

// JobChanges is a subscription to the jobs whose history grew (an event
// was appended: every state change, checkpoint, cancel request, replay).
type JobChanges struct {
	// Jobs gets each changed job after its change committed. Delivery is
	// best effort: see Lost.
	Jobs <-chan JobRef
	// Lost gets a value when changes may have been missed (the subscriber
	// fell behind, or the notification connection dropped and came back):
	// whoever waits for a change should read again. Both channels close
	// when the subscription ends.
	Lost <-chan struct{}
}

// JobChangeNotifier is implemented by engines that tell every process
// sharing the database which jobs changed, so that a WatchJob on one
// coordinator wakes for a change made through another. Engines without
// it (SQLite: one file, one coordinator) leave it to the coordinator,
// which sees every write made through it.
//
// Changes are only sent while some coordinator has announced watchers
// (AnnounceWatchers), so that a database nobody watches pays nothing for
// them.
type JobChangeNotifier interface {
	// SubscribeJobChanges delivers job changes until ctx is done or the
	// store closes. It returns once changes committed after it are
	// delivered, provided watchers are announced.
	SubscribeJobChanges(ctx context.Context) (JobChanges, error)
	// AnnounceWatchers records that the coordinator id has watchers, for
	// ttl: until then every job change is sent. It returns once that is
	// committed. Call it again before ttl passes while watchers last.
	AnnounceWatchers(ctx context.Context, id string, ttl time.Duration) error
	// WithdrawWatchers removes id's announcement.
	WithdrawWatchers(ctx context.Context, id string) error
}
