package coordinator

import (
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Encoding of store types into the API. Zero times are left unset, as the
// proto documents for "not yet" timestamps.

func ts(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func dur(d time.Duration) *durationpb.Duration {
	if d == 0 {
		return nil
	}
	return durationpb.New(d)
}

var jobStates = map[store.JobState]leaseholdv1.JobState{
	store.JobStateQueued:    leaseholdv1.JobState_JOB_STATE_QUEUED,
	store.JobStateLeased:    leaseholdv1.JobState_JOB_STATE_LEASED,
	store.JobStateSucceeded: leaseholdv1.JobState_JOB_STATE_SUCCEEDED,
	store.JobStateFailed:    leaseholdv1.JobState_JOB_STATE_FAILED,
	store.JobStateCancelled: leaseholdv1.JobState_JOB_STATE_CANCELLED,
	store.JobStateDead:      leaseholdv1.JobState_JOB_STATE_DEAD,
}

func jobStateFromProto(s leaseholdv1.JobState) (store.JobState, bool) {
	for k, v := range jobStates {
		if v == s {
			return k, true
		}
	}
	return "", false
}

var eventTypes = map[store.EventType]leaseholdv1.EventType{
	store.EventQueued:          leaseholdv1.EventType_EVENT_TYPE_QUEUED,
	store.EventLeased:          leaseholdv1.EventType_EVENT_TYPE_LEASED,
	store.EventLeaseExpired:    leaseholdv1.EventType_EVENT_TYPE_LEASE_EXPIRED,
	store.EventReleased:        leaseholdv1.EventType_EVENT_TYPE_RELEASED,
	store.EventCheckpointSaved: leaseholdv1.EventType_EVENT_TYPE_CHECKPOINT_SAVED,
	store.EventCancelRequested: leaseholdv1.EventType_EVENT_TYPE_CANCEL_REQUESTED,
	store.EventRunFailed:       leaseholdv1.EventType_EVENT_TYPE_RUN_FAILED,
	store.EventSucceeded:       leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED,
	store.EventFailed:          leaseholdv1.EventType_EVENT_TYPE_FAILED,
	store.EventCancelled:       leaseholdv1.EventType_EVENT_TYPE_CANCELLED,
	store.EventDead:            leaseholdv1.EventType_EVENT_TYPE_DEAD,
	store.EventReplayed:        leaseholdv1.EventType_EVENT_TYPE_REPLAYED,
	store.EventAbandoned:       leaseholdv1.EventType_EVENT_TYPE_ABANDONED,
}

// terminalEvent reports whether an event ends a job's history for WatchJob.
func terminalEvent(t store.EventType) bool {
	switch t {
	case store.EventSucceeded, store.EventFailed, store.EventCancelled, store.EventDead:
		return true
	default:
		return false
	}
}

func jobError(e *store.JobError) *leaseholdv1.JobError {
	if e == nil {
		return nil
	}
	return &leaseholdv1.JobError{Code: e.Code, Message: e.Message, Retryable: e.Retryable}
}

func toJob(j *store.Job) *leaseholdv1.Job {
	if j == nil {
		return nil
	}
	return &leaseholdv1.Job{
		Id:       j.ID,
		Queue:    j.Queue,
		Kind:     j.Kind,
		Payload:  j.Payload,
		Metadata: j.Metadata,
		Priority: j.Priority,
		State:    jobStates[j.State],
		Attempts: j.Attempts, MaxAttempts: j.MaxAttempts,
		Lease: &leaseholdv1.LeaseInfo{
			Owner:      j.LeaseOwner,
			Generation: j.LeaseGeneration,
			ExpiresAt:  ts(j.LeaseExpiresAt),
		},
		CancelRequested: j.CancelRequested,
		CreatedAt:       ts(j.CreatedAt),
		AvailableAt:     ts(j.AvailableAt),
		FinishedAt:      ts(j.FinishedAt),
		LastError:       jobError(j.LastError),
		Result:          j.Result,
		ReplayOf:        j.ReplayOf,
		Checkpoint:      toCheckpoint(j.Checkpoint),
		RetryDeadline:   ts(j.RetryDeadline),
		Dependency:      j.Dependency,
		ConcurrencyKey:  j.ConcurrencyKey,
	}
}

func toJobs(js []*store.Job) []*leaseholdv1.Job {
	out := make([]*leaseholdv1.Job, 0, len(js))
	for _, j := range js {
		out = append(out, toJob(j))
	}
	return out
}

func toCheckpoint(c *store.Checkpoint) *leaseholdv1.Checkpoint {
	if c == nil {
		return nil
	}
	return &leaseholdv1.Checkpoint{
		Id: c.ID, JobId: c.JobID, Phase: c.Phase, State: c.State,
		LeaseGeneration: c.LeaseGeneration, ParentId: c.ParentID, CreatedAt: ts(c.CreatedAt),
	}
}

func toEvent(e store.Event) *leaseholdv1.Event {
	return &leaseholdv1.Event{
		JobId: e.JobID, Sequence: e.Sequence, Type: eventTypes[e.Type], Time: ts(e.Time), DataJson: e.Data,
	}
}

var effectStatuses = map[store.EffectStatus]leaseholdv1.EffectStatus{
	store.EffectReserved:  leaseholdv1.EffectStatus_EFFECT_STATUS_RESERVED,
	store.EffectSucceeded: leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED,
	store.EffectFailed:    leaseholdv1.EffectStatus_EFFECT_STATUS_FAILED,
	store.EffectUnknown:   leaseholdv1.EffectStatus_EFFECT_STATUS_UNKNOWN,
}

func toEffect(e *store.Effect) *leaseholdv1.Effect {
	if e == nil {
		return nil
	}
	return &leaseholdv1.Effect{
		JobId: e.JobID, EffectKey: e.Key, Status: effectStatuses[e.Status],
		LeaseGeneration: e.LeaseGeneration, ProviderOperationId: e.ProviderOperationID,
		Result: e.Result, CreatedAt: ts(e.CreatedAt), UpdatedAt: ts(e.UpdatedAt),
	}
}

// toToken is a token as echoed in answers: without its secret.
func toToken(t store.LeaseToken) *leaseholdv1.LeaseToken {
	return &leaseholdv1.LeaseToken{JobId: t.JobID, LeaseGeneration: t.Generation, WorkerId: t.WorkerID}
}

// withoutSecret is t as echoed in an answer.
func withoutSecret(t *leaseholdv1.LeaseToken) *leaseholdv1.LeaseToken {
	if t == nil {
		return nil
	}
	return &leaseholdv1.LeaseToken{JobId: t.GetJobId(), LeaseGeneration: t.GetLeaseGeneration(), WorkerId: t.GetWorkerId()}
}

func withSecret(t *leaseholdv1.LeaseToken, secret []byte) *leaseholdv1.LeaseToken {
	t.Secret = secret
	return t
}

// toLeasedJob is a granted lease, with its token's secret.
func toLeasedJob(c store.ClaimedJob, secret []byte) *leaseholdv1.LeasedJob {
	effects := make([]*leaseholdv1.Effect, 0, len(c.Effects))
	for i := range c.Effects {
		effects = append(effects, toEffect(&c.Effects[i]))
	}
	return &leaseholdv1.LeasedJob{
		Job: toJob(c.Job), Token: withSecret(toToken(c.Token), secret),
		LeaseExpiresAt: ts(c.Job.LeaseExpiresAt), Effects: effects,
	}
}

var renewStatuses = map[store.RenewStatus]leaseholdv1.RenewStatus{
	store.RenewRenewed:         leaseholdv1.RenewStatus_RENEW_STATUS_RENEWED,
	store.RenewLost:            leaseholdv1.RenewStatus_RENEW_STATUS_LOST,
	store.RenewCancelRequested: leaseholdv1.RenewStatus_RENEW_STATUS_CANCEL_REQUESTED,
	store.RenewReported:        leaseholdv1.RenewStatus_RENEW_STATUS_REPORTED,
}

func toRenewResults(rs []store.RenewResult) []*leaseholdv1.RenewResult {
	out := make([]*leaseholdv1.RenewResult, 0, len(rs))
	for _, r := range rs {
		out = append(out, &leaseholdv1.RenewResult{
			Token: toToken(r.Token), Status: renewStatuses[r.Status], LeaseExpiresAt: ts(r.ExpiresAt),
		})
	}
	return out
}

var attemptOutcomes = map[store.AttemptOutcome]leaseholdv1.AttemptOutcome{
	store.AttemptRunning:      leaseholdv1.AttemptOutcome_ATTEMPT_OUTCOME_RUNNING,
	store.AttemptSucceeded:    leaseholdv1.AttemptOutcome_ATTEMPT_OUTCOME_SUCCEEDED,
	store.AttemptFailed:       leaseholdv1.AttemptOutcome_ATTEMPT_OUTCOME_FAILED,
	store.AttemptLeaseExpired: leaseholdv1.AttemptOutcome_ATTEMPT_OUTCOME_LEASE_EXPIRED,
	store.AttemptReleased:     leaseholdv1.AttemptOutcome_ATTEMPT_OUTCOME_RELEASED,
	store.AttemptCancelled:    leaseholdv1.AttemptOutcome_ATTEMPT_OUTCOME_CANCELLED,
}

func toDeadJob(d *store.DeadJob) *leaseholdv1.DeadJob {
	if d == nil {
		return nil
	}
	attempts := make([]*leaseholdv1.Attempt, 0, len(d.Attempts))
	for _, a := range d.Attempts {
		attempts = append(attempts, &leaseholdv1.Attempt{
			Attempt: a.Attempt, LeaseGeneration: a.LeaseGeneration, WorkerId: a.WorkerID,
			ClaimedAt: ts(a.ClaimedAt), FinishedAt: ts(a.FinishedAt),
			Outcome: attemptOutcomes[a.Outcome], Error: jobError(a.Error),
		})
	}
	return &leaseholdv1.DeadJob{Job: toJob(d.Job), Attempts: attempts, ReplayedAs: d.ReplayedAs, Abandoned: d.Abandoned}
}

func toQueuePolicy(p *store.QueuePolicy) *leaseholdv1.QueuePolicy {
	if p == nil {
		return nil
	}
	jitter := p.Retry.JitterFraction
	return &leaseholdv1.QueuePolicy{
		Queue: p.Queue,
		Retry: &leaseholdv1.RetryPolicy{
			MaxAttempts:            p.Retry.MaxAttempts,
			InitialDelay:           dur(p.Retry.InitialDelay),
			MaxDelay:               dur(p.Retry.MaxDelay),
			Multiplier:             p.Retry.Multiplier,
			JitterFraction:         &jitter,
			RetryableErrorCodes:    p.Retry.RetryableErrorCodes,
			NonRetryableErrorCodes: p.Retry.NonRetryableErrorCodes,
			TotalRetryDeadline:     dur(p.Retry.TotalRetryDeadline),
			Backoff:                toBackoff(p.Retry.Backoff),
		},
		DefaultLeaseDuration: dur(p.DefaultLeaseDuration),
		ConcurrencyLimit:     p.ConcurrencyLimit,
		Paused:               p.Paused,
		KeyConcurrencyLimit:  p.KeyConcurrencyLimit,
		RateLimit:            toRateLimit(p.RateLimit),
		DefaultDependency:    p.DefaultDependency,
	}
}

func toQueueStats(s *store.QueueStats) *leaseholdv1.QueueStats {
	if s == nil {
		return nil
	}
	return &leaseholdv1.QueueStats{
		Queue: s.Queue, Queued: s.Queued, Available: s.Available, Leased: s.Leased,
		Succeeded: s.Succeeded, Failed: s.Failed, Cancelled: s.Cancelled, Dead: s.Dead, Paused: s.Paused,
		Lag: durationpb.New(s.Lag),
	}
}

var breakerStates = map[store.BreakerState]leaseholdv1.BreakerState{
	store.BreakerClosed:   leaseholdv1.BreakerState_BREAKER_STATE_CLOSED,
	store.BreakerOpen:     leaseholdv1.BreakerState_BREAKER_STATE_OPEN,
	store.BreakerHalfOpen: leaseholdv1.BreakerState_BREAKER_STATE_HALF_OPEN,
}

var breakerEventTypes = map[store.BreakerEventType]leaseholdv1.BreakerEventType{
	store.BreakerEventOpened:        leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_OPENED,
	store.BreakerEventHalfOpened:    leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_HALF_OPENED,
	store.BreakerEventClosed:        leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_CLOSED,
	store.BreakerEventReset:         leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_RESET,
	store.BreakerEventForcedOpen:    leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_FORCED_OPEN,
	store.BreakerEventPolicyUpdated: leaseholdv1.BreakerEventType_BREAKER_EVENT_TYPE_POLICY_UPDATED,
}

// toBreaker is b as the API shows it at now (the window's counts depend on
// the time for a time window).
func toBreaker(b *store.Breaker, now time.Time) *leaseholdv1.Breaker {
	f, n := b.Counts(now)
	p := b.Policy
	return &leaseholdv1.Breaker{
		Dependency: b.Dependency, State: breakerStates[b.State], FailureRate: b.FailureRate(now),
		OpenedAt: ts(b.OpenedAt), NextProbeAt: ts(b.NextProbeAt),
		WindowFailures: f, WindowOutcomes: n, Trips: b.Trips, Forced: b.Forced,
		ProbesInFlight: int32(len(b.Probes)), PolicyStored: b.PolicyStored, UpdatedAt: ts(b.UpdatedAt),
		Policy: &leaseholdv1.BreakerPolicy{
			Dependency: p.Dependency, CountedErrorCodes: p.CountedErrorCodes, WindowSize: p.WindowSize,
			WindowDuration: dur(p.WindowDuration), MinimumVolume: p.MinimumVolume,
			FailureRateThreshold: p.FailureRateThreshold, OpenDuration: dur(p.OpenDuration),
			MaxOpenDuration: dur(p.MaxOpenDuration), BackoffMultiplier: p.BackoffMultiplier,
			HalfOpenProbes: p.HalfOpenProbes, ProbeTimeout: dur(p.ProbeTimeout),
		},
	}
}

func toRateLimit(r store.RateLimit) *leaseholdv1.RateLimit {
	if r.Starts == 0 {
		return nil
	}
	return &leaseholdv1.RateLimit{Starts: r.Starts, Interval: dur(r.Interval), PerKey: r.PerKey}
}

func toBackoff(b store.Backoff) leaseholdv1.RetryBackoff {
	if b == store.BackoffDecorrelated {
		return leaseholdv1.RetryBackoff_RETRY_BACKOFF_DECORRELATED
	}
	return leaseholdv1.RetryBackoff_RETRY_BACKOFF_EXPONENTIAL
}
