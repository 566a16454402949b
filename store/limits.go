package store

import "time"

// Bounds enforced by both engines (and, earlier, by the API layer). Both
// engines must answer identically, so they are checked in Go before any SQL
// runs rather than left to each database.
const (
	// NameMaxLen bounds queue, kind, dependency and worker names.
	NameMaxLen = 128
	// PayloadMaxBytes bounds payloads, results, checkpoint state and effect
	// results in the store. The API may configure a lower limit.
	PayloadMaxBytes = 16 << 20
	// MetadataMaxEntries bounds the number of metadata entries.
	MetadataMaxEntries = 64
	// MetadataKeyMaxLen bounds a metadata key.
	MetadataKeyMaxLen = 128
	// MetadataValueMaxLen bounds a metadata value.
	MetadataValueMaxLen = 4096
	// RequestIDMaxLen bounds an idempotency key.
	RequestIDMaxLen = 256
	// EffectKeyMaxLen bounds an effect key.
	EffectKeyMaxLen = 256
	// ProviderOperationIDMaxLen bounds a provider operation id.
	ProviderOperationIDMaxLen = 256
	// PhaseMaxLen bounds a checkpoint phase name.
	PhaseMaxLen = 128
	// ReasonMaxLen bounds cancel/replay/abandon reasons.
	ReasonMaxLen = 1024
	// ErrorCodeMaxLen bounds a worker error code.
	ErrorCodeMaxLen = 128
	// ErrorMessageMaxLen bounds a worker error message.
	ErrorMessageMaxLen = 8192
	// PriorityMin and PriorityMax bound a job's priority.
	PriorityMin = -1000
	PriorityMax = 1000
	// MaxAttemptsMax bounds a job's or policy's attempt budget.
	MaxAttemptsMax = 1000
	// BatchMaxItems bounds CreateJobs, Claim and Renew batch sizes.
	BatchMaxItems = 1000
	// QueuesMax bounds the number of queues in one claim.
	QueuesMax = 32
	// LeaseDurationMin and LeaseDurationMax bound a lease.
	LeaseDurationMin = time.Second
	LeaseDurationMax = time.Hour
	// RunAfterMax bounds how far into the future a job may be scheduled.
	RunAfterMax = 365 * 24 * time.Hour
	// RetryAfterMax bounds a worker's retry-after.
	RetryAfterMax = 7 * 24 * time.Hour
	// RetryDelayMax bounds a policy's delays and total retry deadline.
	RetryDelayMax = 30 * 24 * time.Hour
	// CheckpointHistoryLimit is how many checkpoints are kept per job.
	CheckpointHistoryLimit = 16
	// ListLimitMax caps list page sizes.
	ListLimitMax = 1000
	// ListLimitDefault is the page size of a list that asks for 0.
	ListLimitDefault = 50
)

// PageLimit applies the list default and cap to a requested page size; a
// negative one is invalid.
func PageLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, Invalid("limit", "must not be negative")
	case limit == 0:
		return ListLimitDefault, nil
	}
	return min(limit, ListLimitMax), nil
}

// Defaults.
const (
	// LeaseDurationDefault is the lease when neither the claim nor the queue
	// policy names one.
	LeaseDurationDefault = 30 * time.Second
	// MaxLeaseDurationDefault is a queue's longest lease when its policy
	// names none: a claim, stream or renewal asking for more gets this.
	MaxLeaseDurationDefault = 10 * time.Minute
	// ReapBatchDefault bounds the expired leases one reaper transaction
	// ends.
	ReapBatchDefault = 500
	// IdempotencyWindowDefault is how long an idempotency record lives.
	IdempotencyWindowDefault = 24 * time.Hour
	// PruneBatchSizeDefault bounds one retention transaction.
	PruneBatchSizeDefault = 500
	// MaxAttemptsDefault is a queue's default attempt budget.
	MaxAttemptsDefault = 25
	// RetryInitialDelayDefault is the delay after the first failure.
	RetryInitialDelayDefault = time.Second
	// RetryMaxDelayDefault caps the backoff.
	RetryMaxDelayDefault = time.Hour
	// RetryMultiplierDefault is the backoff growth factor.
	RetryMultiplierDefault = 2.0
	// RetryJitterFractionDefault is the random extra delay fraction.
	RetryJitterFractionDefault = 0.1
)
