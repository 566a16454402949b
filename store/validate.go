package store

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// ValidName reports whether s is a valid queue, kind or dependency name:
// 1–NameMaxLen characters of [A-Za-z0-9._:-], starting with a letter or
// digit.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > NameMaxLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if i == 0 && !alnum {
			return false
		}
		if !alnum && c != '.' && c != '_' && c != ':' && c != '-' {
			return false
		}
	}
	return true
}

// ValidWorkerID reports whether s is a valid worker id: 1–NameMaxLen
// characters of [A-Za-z0-9._:@/-].
func ValidWorkerID(s string) bool {
	if len(s) == 0 || len(s) > NameMaxLen {
		return false
	}
	for i := range len(s) {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("._:@/-", c) >= 0
		if !ok {
			return false
		}
	}
	return true
}

const nameRule = "must be 1-128 characters of [A-Za-z0-9._:-], starting with a letter or digit"

// checkText validates a free-text field: valid UTF-8, no NUL byte (PostgreSQL
// rejects NUL in text; SQLite would store it, so both refuse it here), at most
// maxLen bytes, and non-empty when required.
func checkText(field, s string, maxLen int, required bool) error {
	switch {
	case required && s == "":
		return Invalid(field, "is required")
	case len(s) > maxLen:
		return Invalid(field, fmt.Sprintf("must be at most %d bytes", maxLen))
	case strings.IndexByte(s, 0) >= 0:
		return Invalid(field, "must not contain NUL bytes")
	case !utf8.ValidString(s):
		return Invalid(field, "must be valid UTF-8")
	}
	return nil
}

// ValidateSpec checks a JobSpec against the store's bounds. field prefixes
// the field names in the error (e.g. "requests[2].job"): they are the
// API's field paths, so the API passes the error on as it is.
func ValidateSpec(field string, s JobSpec) error {
	if !ValidName(s.Queue) {
		return Invalid(field+".queue", nameRule)
	}
	if !ValidName(s.Kind) {
		return Invalid(field+".kind", nameRule)
	}
	if s.Dependency != "" && !ValidName(s.Dependency) {
		return Invalid(field+".dependency", nameRule)
	}
	if err := checkText(field+".concurrency_key", s.ConcurrencyKey, NameMaxLen, false); err != nil {
		return err
	}
	if len(s.Payload) > PayloadMaxBytes {
		return Invalid(field+".payload", fmt.Sprintf("must be at most %d bytes", PayloadMaxBytes))
	}
	if err := ValidateMetadata(field+".metadata", s.Metadata); err != nil {
		return err
	}
	if s.Priority < PriorityMin || s.Priority > PriorityMax {
		return Invalid(field+".priority", fmt.Sprintf("must be in [%d, %d]", PriorityMin, PriorityMax))
	}
	if s.RunAfter < 0 || s.RunAfter > RunAfterMax {
		return Invalid(field+".run_after", "must be between 0 and 365 days")
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > MaxAttemptsMax {
		return Invalid(field+".max_attempts", fmt.Sprintf("must be in [0, %d]", MaxAttemptsMax))
	}
	return nil
}

// ValidateMetadata checks metadata bounds.
func ValidateMetadata(field string, md map[string]string) error {
	if len(md) > MetadataMaxEntries {
		return Invalid(field, fmt.Sprintf("must have at most %d entries", MetadataMaxEntries))
	}
	for k, v := range md {
		if err := checkText(field+" key", k, MetadataKeyMaxLen, true); err != nil {
			return err
		}
		if err := checkText(field+"["+k+"]", v, MetadataValueMaxLen, false); err != nil {
			return err
		}
	}
	return nil
}

// ValidateCreate checks a CreateJobsParams.
func ValidateCreate(p CreateJobsParams) error {
	if err := checkText("tenant", p.Tenant, NameMaxLen, true); err != nil {
		return err
	}
	if len(p.Requests) == 0 || len(p.Requests) > BatchMaxItems {
		return Invalid("requests", fmt.Sprintf("must have 1-%d items", BatchMaxItems))
	}
	if p.IdempotencyWindow < 0 {
		return Invalid("idempotency_window", "must not be negative")
	}
	for i, r := range p.Requests {
		// One request reads as CreateJobRequest does (job.queue), several
		// as BatchCreateJobsRequest (requests[2].job.queue).
		prefix := ""
		if len(p.Requests) > 1 {
			prefix = fmt.Sprintf("requests[%d].", i)
		}
		if err := checkText(prefix+"request_id", r.RequestID, RequestIDMaxLen, false); err != nil {
			return err
		}
		if err := ValidateSpec(prefix+"job", r.Spec); err != nil {
			return err
		}
		if err := ValidateUnique(prefix+"unique", r.Unique); err != nil {
			return err
		}
	}
	return nil
}

// ValidateToken checks a lease token's shape (not whether it is current).
func ValidateToken(t LeaseToken) error {
	if err := checkText("token.job_id", t.JobID, NameMaxLen, true); err != nil {
		return err
	}
	if t.Generation <= 0 {
		return Invalid("token.lease_generation", "must be positive")
	}
	if !ValidWorkerID(t.WorkerID) {
		return Invalid("token.worker_id", "must be 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	return nil
}

// ValidateLeaseDuration checks a lease duration; zero is allowed when
// optional.
func ValidateLeaseDuration(field string, d time.Duration, optional bool) error {
	if optional && d == 0 {
		return nil
	}
	if d < LeaseDurationMin || d > LeaseDurationMax {
		return Invalid(field, "must be between 1s and 1h")
	}
	return nil
}

// ValidateClaim checks a ClaimParams.
func ValidateClaim(p ClaimParams) error {
	if !ValidWorkerID(p.Worker) {
		return Invalid("worker_id", "must be 1-128 characters of [A-Za-z0-9._:@/-]")
	}
	if len(p.Queues) == 0 || len(p.Queues) > QueuesMax {
		return Invalid("queues", fmt.Sprintf("must name 1-%d queues", QueuesMax))
	}
	for i, q := range p.Queues {
		if !ValidName(q) {
			return Invalid(fmt.Sprintf("queues[%d]", i), nameRule)
		}
	}
	if p.Max < 1 || p.Max > BatchMaxItems {
		return Invalid("max_jobs", fmt.Sprintf("must be in [1, %d]", BatchMaxItems))
	}
	return ValidateLeaseDuration("lease_duration", p.LeaseDuration, true)
}

// ValidateRenew checks a RenewParams.
func ValidateRenew(p RenewParams) error {
	if len(p.Tokens) == 0 || len(p.Tokens) > BatchMaxItems {
		return Invalid("tokens", fmt.Sprintf("must have 1-%d items", BatchMaxItems))
	}
	for _, t := range p.Tokens {
		if err := ValidateToken(t); err != nil {
			return err
		}
	}
	return ValidateLeaseDuration("lease_duration", p.LeaseDuration, true)
}

// ValidateJobError checks a worker-reported error.
func ValidateJobError(e JobError) error {
	if err := checkText("error.code", e.Code, ErrorCodeMaxLen, false); err != nil {
		return err
	}
	return checkText("error.message", e.Message, ErrorMessageMaxLen, false)
}

// ValidateRetryAfter checks a worker's retry-after.
func ValidateRetryAfter(d time.Duration) error {
	if d < 0 || d > RetryAfterMax {
		return Invalid("retry_after", "must be between 0 and 7 days")
	}
	return nil
}

// ValidateReason checks a free-text reason.
func ValidateReason(s string) error { return checkText("reason", s, ReasonMaxLen, false) }

// ValidateBlob checks an opaque byte field.
func ValidateBlob(field string, b []byte) error {
	if len(b) > PayloadMaxBytes {
		return Invalid(field, fmt.Sprintf("must be at most %d bytes", PayloadMaxBytes))
	}
	return nil
}

// ValidatePhase checks a checkpoint phase.
func ValidatePhase(s string) error { return checkText("phase", s, PhaseMaxLen, true) }

// ValidateEffectKey checks an effect key.
func ValidateEffectKey(s string) error { return checkText("effect_key", s, EffectKeyMaxLen, true) }

// ValidateProviderOperationID checks a provider operation id.
func ValidateProviderOperationID(s string) error {
	return checkText("provider_operation_id", s, ProviderOperationIDMaxLen, false)
}

// ValidateText checks any other short text field (ids, tenants).
func ValidateText(field, s string, maxLen int, required bool) error {
	return checkText(field, s, maxLen, required)
}

// ValidateTenant checks a tenant id.
func ValidateTenant(tenant string) error { return checkText("tenant", tenant, NameMaxLen, true) }

// ValidateJobRef checks the tenant and job id of a call about one job.
func ValidateJobRef(tenant, jobID string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	return checkText("job_id", jobID, NameMaxLen, true)
}

// ValidateLeaseCall checks the tenant and token of a lease-bound call.
func ValidateLeaseCall(tenant string, tok LeaseToken) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	return ValidateToken(tok)
}

// ValidateRecordEffect checks a RecordEffectParams.
func ValidateRecordEffect(p RecordEffectParams) error {
	if err := ValidateLeaseCall(p.Tenant, p.Token); err != nil {
		return err
	}
	if err := ValidateEffectKey(p.Key); err != nil {
		return err
	}
	switch p.Status {
	case EffectSucceeded, EffectFailed, EffectUnknown:
	default:
		return Invalid("status", "must be succeeded, failed or unknown")
	}
	if err := ValidateProviderOperationID(p.ProviderOperationID); err != nil {
		return err
	}
	return ValidateBlob("result", p.Result)
}
