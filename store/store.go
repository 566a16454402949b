package store

import (
	"context"
	"time"
)

// Store is the durable core the coordinator runs on. Every method is
// tenant-scoped: a row of another tenant is never read, returned or changed,
// and is reported exactly like a missing row (ErrNotFound).
//
// Every Params struct has a Now field. Zero means "use the store's clock":
// PostgreSQL's now() in production (one clock for several coordinators), the
// process clock for SQLite. Tests set it to cross lease expiry without
// sleeping.
//
// Lease-bound methods (Renew, Complete, Retry, CancelByHolder, Release,
// SaveCheckpoint, ReserveEffect, RecordEffect) are compare-and-sets on
// (tenant, job, state = leased, owner, generation, expires_at > now). When
// that does not hold they return ErrLeaseLost, except that a terminal report
// repeated by the generation that already made it (Complete, Retry,
// CancelByHolder) returns the same outcome again.
type Store interface {
	// Engine names the engine: "postgres" or "sqlite".
	Engine() string

	// CreateJobs accepts one or more jobs in one transaction: each job row,
	// its QUEUED event (sequence 1) and its idempotency record commit together
	// or not at all. Results are in request order. Any invalid request or
	// idempotency conflict fails the whole batch (ErrInvalid /
	// ErrIdempotencyConflict, wrapped with the index of the request).
	CreateJobs(ctx context.Context, p CreateJobsParams) ([]CreateResult, error)
	// GetJob returns a job with its latest checkpoint.
	GetJob(ctx context.Context, tenant, jobID string) (*Job, error)
	// ListJobs pages jobs newest first.
	ListJobs(ctx context.Context, p ListJobsParams) (*JobPage, error)
	// CountJobs answers how many jobs of the tenant match p.Filter (up to
	// p.Limit, when set) and up to p.SampleSize of them, newest first: the
	// dry run of a bulk operation.
	CountJobs(ctx context.Context, p CountJobsParams) (JobCount, error)
	// ListEvents returns events with sequence > AfterSequence, in order.
	ListEvents(ctx context.Context, p ListEventsParams) ([]Event, error)
	// ListAttempts returns a job's attempt history, oldest first.
	ListAttempts(ctx context.Context, tenant, jobID string) ([]Attempt, error)

	// Claim leases up to Max available jobs from Queues to Worker: it is
	// ClaimMany for one waiter.
	Claim(ctx context.Context, p ClaimParams) ([]ClaimedJob, error)
	// ClaimMany leases available QUEUED jobs of Queues to several workers
	// at once, in one statement: jobs in claim order (priority desc,
	// available_at, id) are handed out in turn, each waiter getting at
	// most its Max and, when jobs are short, a share in proportion to it.
	// The state change is persisted by the statement that selects the rows
	// (a row lock is not a lease). Each lease sets owner, expiry (the
	// waiter's lease, or the queue's default, cut to the queue's maximum),
	// generation+1, attempts+1 and leased_at, and records a LEASED event.
	// Paused queues, jobs with cancel requested and queues at their
	// concurrency limit are skipped. A job whose lease expired is not taken
	// over here: ReapExpired ends such leases first. Jobs of a later
	// attempt come with their latest checkpoint and effect ledger.
	ClaimMany(ctx context.Context, p ClaimManyParams) ([]ClaimedJob, error)
	// ReapExpired ends, across tenants, up to Limit leases that expired
	// with no report from their holder, each as store.DecideExpiry says,
	// in one transaction; concurrent reapers skip
	// each other's rows, so each lease is ended once. It also returns the
	// earliest expiry still pending, so the caller can sleep until then.
	ReapExpired(ctx context.Context, p ReapParams) (ReapResult, error)
	// Renew extends every listed lease that is still current, in one
	// transaction, and reports per token (renewed, lost, cancel requested).
	// It never fails because one lease is lost.
	Renew(ctx context.Context, p RenewParams) ([]RenewResult, error)
	// Complete finishes a job: SUCCEEDED, result stored, terminal event.
	Complete(ctx context.Context, p CompleteParams) (*Job, error)
	// Retry records a failed attempt and decides, with the queue policy (or
	// the job's max attempts) and the injected random source: non-retryable
	// → FAILED; retryable with budget left → QUEUED at now + backoff
	// (RUN_FAILED event); attempts or retry deadline spent → DEAD (RUN_FAILED
	// and DEAD events in the same transaction). A job whose cancellation was
	// requested is never queued again: where the decision is QUEUED it ends
	// CANCELLED (RUN_FAILED then CANCELLED); FAILED and DEAD stand.
	Retry(ctx context.Context, p RetryParams) (*Job, error)
	// CancelByHolder ends the holder's attempt as CANCELLED (terminal).
	CancelByHolder(ctx context.Context, p CancelByHolderParams) (*Job, error)
	// Release puts the job back to QUEUED, available now, without spending
	// the attempt (attempts - 1). If a cancel was requested the job becomes
	// CANCELLED instead.
	Release(ctx context.Context, p ReleaseParams) (*Job, error)
	// ApplyReports applies lease-bound reports (renewals, completions,
	// retries, holder cancels, releases) in one transaction, judged in
	// order as if each ran alone, and answers each: a report whose fence
	// does not hold gets its own ErrLeaseLost (or the replayed outcome)
	// without failing the others. Every other report method goes through
	// the same batching, so concurrent callers share commits.
	ApplyReports(ctx context.Context, reports []Report) ([]ReportResult, error)
	// RequestCancel is a client's cancel: QUEUED → CANCELLED at once; LEASED
	// → cancel_requested (no new claims; the holder learns it on renew);
	// repeated requests on a cancel-requested job return it unchanged;
	// terminal → ErrAlreadyFinal.
	RequestCancel(ctx context.Context, p RequestCancelParams) (*Job, error)

	// SaveCheckpoint stores a checkpoint fenced by the lease; its parent is
	// the job's previous latest checkpoint. Only the newest
	// CheckpointHistoryLimit checkpoints per job are kept.
	SaveCheckpoint(ctx context.Context, p SaveCheckpointParams) (*Checkpoint, error)
	// ReserveEffect reserves (job, key) fenced by the lease. When a record
	// exists it is returned with reserved = false. A record left RESERVED or
	// UNKNOWN by an earlier generation is returned as is (reconcile first);
	// a FAILED one is re-reserved by the current generation (reserved = true).
	ReserveEffect(ctx context.Context, p ReserveEffectParams) (eff *Effect, reserved bool, err error)
	// RecordEffect records the outcome of a reserved effect, fenced by the
	// lease. ErrNotFound when the key was never reserved.
	RecordEffect(ctx context.Context, p RecordEffectParams) (*Effect, error)
	// ListEffects returns a job's effect ledger ordered by key.
	ListEffects(ctx context.Context, tenant, jobID string) ([]Effect, error)
	// ListCheckpoints returns a job's kept checkpoints (at most
	// CheckpointHistoryLimit), newest first; ErrNotFound when the job does
	// not exist.
	ListCheckpoints(ctx context.Context, tenant, jobID string) ([]Checkpoint, error)

	// ListDeadJobs pages DEAD jobs newest first (finished_at desc, id desc).
	ListDeadJobs(ctx context.Context, p ListDeadJobsParams) (*DeadJobPage, error)
	// GetDeadJob returns a dead job with its evidence; ErrNotDead when the
	// job exists but is not DEAD.
	GetDeadJob(ctx context.Context, tenant, jobID string) (*DeadJob, error)
	// ReplayDeadJob creates a new QUEUED job from a dead one (same queue,
	// kind, payload, metadata, priority, max attempts; replay_of set) and
	// appends a REPLAYED event to the dead job, in one transaction.
	// Idempotent: a second replay returns the first replay's job with
	// alreadyReplayed = true. ErrNotDead when not DEAD, ErrAbandoned when
	// abandoned.
	ReplayDeadJob(ctx context.Context, p ReplayDeadJobParams) (job *Job, alreadyReplayed bool, err error)
	// AbandonDeadJob marks a dead job abandoned (ABANDONED event). Repeating
	// it is a no-op that returns the job. ErrNotDead when not DEAD,
	// ErrAlreadyReplayed when it was replayed.
	AbandonDeadJob(ctx context.Context, p AbandonDeadJobParams) (*DeadJob, error)

	// GetQueuePolicy returns the stored policy, or DefaultQueuePolicy(queue)
	// when none is stored.
	GetQueuePolicy(ctx context.Context, tenant, queue string) (*QueuePolicy, error)
	// UpdateQueuePolicy validates and stores a policy (keeping the paused
	// flag as stored) and returns it with defaults filled in.
	UpdateQueuePolicy(ctx context.Context, tenant string, policy QueuePolicy) (*QueuePolicy, error)
	// SetQueuePaused pauses or resumes a queue, creating its policy row with
	// defaults when needed.
	SetQueuePaused(ctx context.Context, tenant, queue string, paused bool) (*QueuePolicy, error)
	// ListQueues lists every queue that has jobs or a stored policy, by name,
	// with stats.
	ListQueues(ctx context.Context, tenant string) ([]QueueSummary, error)
	// QueueStats counts one queue's jobs by state.
	QueueStats(ctx context.Context, p QueueStatsParams) (*QueueStats, error)
	// QueueMetrics reads the live gauges (queued, available, lag, leased,
	// expired, dead) of every queue of every tenant in one statement, for
	// metrics; queues with none of those jobs are left out.
	QueueMetrics(ctx context.Context, p QueueMetricsParams) (*QueueMetricsSnapshot, error)
	// ListQueuePolicies returns a tenant's stored policies (no counts), by
	// queue: what ListQueues reads besides its counts, for callers that
	// keep counts of their own.
	ListQueuePolicies(ctx context.Context, tenant string) ([]QueuePolicy, error)
	// CountFinished counts, across tenants, the jobs that finished in
	// [From, To) by tenant, queue and terminal state, through the
	// finished-at index: its cost follows the jobs finished in the window,
	// not the table. Jobs pruned or replayed since are not counted.
	CountFinished(ctx context.Context, p CountFinishedParams) ([]FinishedCount, error)

	// Prune deletes, across all tenants, terminal jobs finished before
	// FinishedBefore (with their events, attempts, checkpoints, effects and
	// idempotency records) and idempotency records that expired, each in
	// transactions of at most BatchSize rows. It never deletes a job that is
	// not terminal.
	Prune(ctx context.Context, p PruneParams) (PruneResult, error)

	// Breakers keeps the fleet-wide circuit breakers (breaker.go).
	Breakers

	// Schedules keeps schedules and fires their ticks (schedule_store.go).
	Schedules

	// Operations keeps bulk operations (operation.go).
	Operations

	// Identities keeps principals, worker id owners and the audit log
	// (identity.go).
	Identities

	// Now is the store's authoritative clock (PostgreSQL now(), or the
	// process clock for SQLite).
	Now(ctx context.Context) (time.Time, error)

	// Close releases the store's connections.
	Close() error
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
