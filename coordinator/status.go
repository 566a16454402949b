package coordinator

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/store"
)

// ErrorDomain is the google.rpc.ErrorInfo domain of every Leasehold error.
const ErrorDomain = "leasehold.dev"

// ErrorInfo reasons clients switch on. They are part of the API: never
// rename one.
const (
	ReasonLeaseLost           = "LEASE_LOST"
	ReasonIdempotencyConflict = "IDEMPOTENCY_CONFLICT"
	ReasonJobNotFound         = "JOB_NOT_FOUND"
	ReasonEffectNotFound      = "EFFECT_NOT_FOUND"
	ReasonJobAlreadyFinal     = "JOB_ALREADY_FINAL"
	ReasonJobNotDead          = "JOB_NOT_DEAD"
	ReasonJobAbandoned        = "JOB_ABANDONED"
	ReasonJobAlreadyReplayed  = "JOB_ALREADY_REPLAYED"
	ReasonInvalidArgument     = "INVALID_ARGUMENT"
	ReasonStoreUnavailable    = "STORE_UNAVAILABLE"
	ReasonShuttingDown        = "SHUTTING_DOWN"
	ReasonStreamReplaced      = "STREAM_REPLACED"
	// ReasonStreamNotReading: a Connect stream ended because its client
	// stopped reading while the coordinator's queue for it grew.
	ReasonStreamNotReading = "STREAM_NOT_READING"
	// ReasonStreamNotAcknowledging: a worker that declared the lease_acks
	// feature left a pushed lease unacknowledged past the ack timeout; its
	// stream was ended and its unacknowledged leases released.
	ReasonStreamNotAcknowledging = "STREAM_NOT_ACKNOWLEDGING"
	ReasonUnimplemented          = "UNIMPLEMENTED"
	ReasonInternal               = "INTERNAL"
	// ReasonReportMismatch: the lease already made this terminal report
	// with another result or error; the first one stands.
	ReasonReportMismatch = "REPORT_MISMATCH"
	// ReasonUniqueConflict: a unique create that asked to fail on a
	// duplicate found its key held (ALREADY_EXISTS); nothing was created.
	ReasonUniqueConflict = "UNIQUE_CONFLICT"
	// ReasonUnauthenticated: no credential, or one that is invalid or
	// revoked (UNAUTHENTICATED).
	ReasonUnauthenticated = "UNAUTHENTICATED"
	// ReasonPermissionDenied: the caller's role, queue scopes or worker id
	// do not allow the call (PERMISSION_DENIED).
	ReasonPermissionDenied = "PERMISSION_DENIED"
	// ReasonLeaseSecretMismatch: a lease token's secret is not the one its
	// lease was issued with (PERMISSION_DENIED).
	ReasonLeaseSecretMismatch = "LEASE_SECRET_MISMATCH"
	// ReasonRateLimited: the caller is over its rate of calls or stream
	// opens (RESOURCE_EXHAUSTED, with a RetryInfo delay).
	ReasonRateLimited = "RATE_LIMITED"
	// ReasonOverloaded: the coordinator has no room for more store work
	// right now (UNAVAILABLE, with a RetryInfo delay): retry, here or on
	// another replica.
	ReasonOverloaded = "OVERLOADED"
	// ReasonWatchLimit: a WatchJob beyond the watchers allowed per
	// connection or in total (RESOURCE_EXHAUSTED, with a RetryInfo delay).
	ReasonWatchLimit = "WATCH_LIMIT"
	// ReasonPrincipalNotFound: RevokeApiKey named no principal of the
	// caller's tenant.
	ReasonPrincipalNotFound = "PRINCIPAL_NOT_FOUND"
	// ReasonBreakerNotFound: GetBreaker, ResetBreaker or
	// ListBreakerEvents named a dependency with no breaker.
	ReasonBreakerNotFound = "BREAKER_NOT_FOUND"
	// ReasonPrincipalExists: a valid principal already has this
	// certificate common name.
	ReasonPrincipalExists = "PRINCIPAL_EXISTS"
	// ReasonScheduleNotFound: a ScheduleService call named no schedule of
	// the caller's tenant (or one outside its queues).
	ReasonScheduleNotFound = "SCHEDULE_NOT_FOUND"
	// ReasonScheduleExists: CreateSchedule with a name the tenant already
	// uses.
	ReasonScheduleExists = "SCHEDULE_EXISTS"
	// ReasonScheduleLimit: the tenant has as many schedules as the
	// coordinator allows (RESOURCE_EXHAUSTED).
	ReasonScheduleLimit = "SCHEDULE_LIMIT"
	// ReasonOperationNotFound: an OperationService call named no
	// operation of the caller's tenant.
	ReasonOperationNotFound = "OPERATION_NOT_FOUND"
	// ReasonOperationLimit: the tenant runs as many bulk operations as
	// the coordinator allows at once (RESOURCE_EXHAUSTED): wait for one
	// to finish.
	ReasonOperationLimit = "OPERATION_LIMIT"
	// ReasonInvalidFilter: a filter string (ListJobs, ListDeadJobs, the
	// bulk calls) does not parse or breaks a bound (INVALID_ARGUMENT, with
	// a BadRequest field violation on "filter").
	ReasonInvalidFilter = "INVALID_FILTER"
)

// statusError builds a status with an ErrorInfo reason.
func statusError(code codes.Code, reason, msg string, details ...*errdetails.BadRequest) error {
	st := status.New(code, msg)
	withInfo, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain})
	if err != nil {
		return st.Err()
	}
	st = withInfo
	for _, d := range details {
		if s, err := st.WithDetails(d); err == nil {
			st = s
		}
	}
	return st.Err()
}

// invalidArgument is INVALID_ARGUMENT with one BadRequest field violation.
func invalidArgument(field, description string) error {
	return statusError(codes.InvalidArgument, ReasonInvalidArgument, field+": "+description,
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: field, Description: description,
		}}})
}

// invalidFilter is INVALID_ARGUMENT with reason INVALID_FILTER and a
// field violation on the request's filter field; the description names the
// filter's field at fault, as store.FilterError says it.
func invalidFilter(e *store.FilterError) error {
	msg := e.Error()
	return statusError(codes.InvalidArgument, ReasonInvalidFilter, msg,
		&errdetails.BadRequest{FieldViolations: []*errdetails.BadRequest_FieldViolation{{
			Field: "filter", Description: strings.TrimPrefix(msg, "filter: "),
		}}})
}

// toStatus maps an error from validation or the store to a gRPC status. It
// is the only place that does: an errors.Is/As switch, so wrapped errors map
// like bare ones. Unknown errors become INTERNAL with a fixed message; the
// error itself is logged, never sent (it may hold SQL or driver text).
func toStatus(ctx context.Context, log *slog.Logger, err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status built by this package
	}
	var inv *store.InvalidError
	var bad *store.FilterError
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	case errors.As(err, &bad):
		return invalidFilter(bad)
	case errors.As(err, &inv):
		return invalidArgument(inv.Field, inv.Reason)
	case errors.Is(err, store.ErrInvalid):
		return statusError(codes.InvalidArgument, ReasonInvalidArgument, "invalid argument")
	case errors.Is(err, errLeaseSecret):
		return statusError(codes.PermissionDenied, ReasonLeaseSecretMismatch,
			"the token's secret is not its lease's: report with the token exactly as the lease gave it")
	case errors.Is(err, store.ErrLeaseLost):
		return statusError(codes.FailedPrecondition, ReasonLeaseLost,
			"the lease is no longer held at this generation: stop working on the job and publish nothing more for it")
	case errors.Is(err, store.ErrReportMismatch):
		return statusError(codes.FailedPrecondition, ReasonReportMismatch,
			"this lease already reported a different outcome (result or error); the first report stands")
	case errors.Is(err, store.ErrIdempotencyConflict):
		return statusError(codes.AlreadyExists, ReasonIdempotencyConflict,
			"request_id was already used with a different request: use a new request_id or resend the original request")
	case errors.Is(err, store.ErrUniqueConflict):
		return statusError(codes.AlreadyExists, ReasonUniqueConflict,
			"a job holds the unique key (live, or within the period): nothing was created; drop on_conflict FAIL to get the existing job")
	case errors.Is(err, store.ErrBreakerNotFound):
		return statusError(codes.NotFound, ReasonBreakerNotFound,
			"the dependency has no breaker yet: nothing has reported on it and no operator has acted on it")
	case errors.Is(err, store.ErrScheduleNotFound):
		return statusError(codes.NotFound, ReasonScheduleNotFound, "schedule not found")
	case errors.Is(err, store.ErrScheduleExists):
		return statusError(codes.AlreadyExists, ReasonScheduleExists, "a schedule of this name exists: choose another name or update it")
	case errors.Is(err, store.ErrScheduleLimit):
		return statusError(codes.ResourceExhausted, ReasonScheduleLimit, err.Error())
	case errors.Is(err, store.ErrEffectNotFound):
		return statusError(codes.NotFound, ReasonEffectNotFound,
			"effect_key was never reserved for this job: call ReserveEffect first")
	case errors.Is(err, store.ErrPrincipalNotFound):
		return statusError(codes.NotFound, ReasonPrincipalNotFound, "no API key or principal with this id in the tenant")
	case errors.Is(err, store.ErrOperationNotFound):
		return statusError(codes.NotFound, ReasonOperationNotFound, "operation not found")
	case errors.Is(err, store.ErrOperationLimit):
		return statusError(codes.ResourceExhausted, ReasonOperationLimit, err.Error()+": wait for one to finish (leasehold op list)")
	case errors.Is(err, store.ErrNotFound):
		return statusError(codes.NotFound, ReasonJobNotFound, "job not found")
	case errors.Is(err, store.ErrAlreadyFinal):
		return statusError(codes.FailedPrecondition, ReasonJobAlreadyFinal, "the job is already in a terminal state")
	case errors.Is(err, store.ErrNotDead):
		return statusError(codes.FailedPrecondition, ReasonJobNotDead, "the job is not in the dead-letter queue")
	case errors.Is(err, store.ErrAbandoned):
		return statusError(codes.FailedPrecondition, ReasonJobAbandoned, "the dead job was abandoned and cannot be replayed")
	case errors.Is(err, store.ErrAlreadyReplayed):
		return statusError(codes.FailedPrecondition, ReasonJobAlreadyReplayed, "the dead job was already replayed and cannot be abandoned")
	case errors.Is(err, store.ErrAlreadyExists):
		return statusError(codes.AlreadyExists, ReasonPrincipalExists,
			"a valid principal already has this certificate common name: revoke it first")
	case errors.Is(err, store.ErrUnavailable):
		log.WarnContext(ctx, "store unavailable", slog.String("error", err.Error()))
		return statusError(codes.Unavailable, ReasonStoreUnavailable, "the store is briefly unavailable: retry the call")
	default:
		log.ErrorContext(ctx, "internal error", slog.String("error", err.Error()))
		return statusError(codes.Internal, ReasonInternal, "internal error")
	}
}
