package store

import (
	"fmt"
	"time"
)

// CreateRequest is one job to create.
type CreateRequest struct {
	Spec JobSpec
	// RequestID is the producer's idempotency key; empty means none.
	RequestID string
	// Unique makes the job unique (unique.go); nil: it is not.
	Unique *UniqueOptions
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
	// Duplicate is true when the request was unique, its key was held
	// (by a live job, or within its period) and Job is the holder.
	Duplicate bool
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
	// Filter is ANDed with Queue, Kind and States; a cursor is only valid
	// with the filter of the list that returned it.
	Filter JobFilter
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
	// RenewReported: the lease is gone because a report made with its own
	// token (worker and generation) ended it — the holder's complete,
	// retry, cancel or release, or a release the coordinator made in its
	// name — not because it expired or another worker took the job.
	RenewReported RenewStatus = "reported"
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
	// Filter is ANDed with Queue, IncludeAbandoned and the DEAD state
	// itself (a filter on other states matches nothing here).
	Filter JobFilter
}

// CountJobsParams asks how many jobs of a tenant match a filter.
type CountJobsParams struct {
	Tenant string
	Filter JobFilter
	// SampleSize is how many of the matching jobs to return, newest first
	// (0 to CountSampleMax).
	SampleSize int
	// Limit stops counting past this many jobs (Capped then says so); 0
	// counts them all.
	Limit int64
}

// JobCount answers CountJobs.
type JobCount struct {
	// Count is the number of matching jobs, or Limit when Capped.
	Count int64
	// Capped is true when more than Limit jobs match.
	Capped bool
	// Sample holds up to SampleSize matching jobs, newest first (created
	// desc, id desc), in the BASIC view: no payload, result or
	// checkpoint.
	Sample []*Job
}

// CountSampleMax bounds CountJobsParams.SampleSize.
const CountSampleMax = 100

// ValidateCount checks a CountJobsParams.
func ValidateCount(p CountJobsParams) error {
	if err := ValidateTenant(p.Tenant); err != nil {
		return err
	}
	if p.SampleSize < 0 || p.SampleSize > CountSampleMax {
		return Invalid("sample_size", fmt.Sprintf("must be in [0, %d]", CountSampleMax))
	}
	if p.Limit < 0 {
		return Invalid("limit", "must not be negative")
	}
	return p.Filter.Validate()
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
	// UniqueKeys counts the expired unique-key period records removed.
	UniqueKeys int64
}
