package console

import (
	"context"
	"errors"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// api is the public gRPC API, the console's only source of data.
type api struct {
	jobs      leaseholdv1.JobServiceClient
	admin     leaseholdv1.AdminServiceClient
	workers   leaseholdv1.WorkerServiceClient
	schedules leaseholdv1.ScheduleServiceClient
	ops       leaseholdv1.OperationServiceClient
}

func newAPI(conn grpc.ClientConnInterface) api {
	return api{
		jobs:      leaseholdv1.NewJobServiceClient(conn),
		admin:     leaseholdv1.NewAdminServiceClient(conn),
		workers:   leaseholdv1.NewWorkerServiceClient(conn),
		schedules: leaseholdv1.NewScheduleServiceClient(conn),
		ops:       leaseholdv1.NewOperationServiceClient(conn),
	}
}

// asPrincipal returns ctx whose calls carry key as the caller's credential
// (none when empty, as with AuthNone).
func asPrincipal(ctx context.Context, key string) context.Context {
	if key == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+key)
}

// whoami is the principal the key (or, with AuthNone, the anonymous
// caller) is.
func (a api) whoami(ctx context.Context) (*leaseholdv1.Principal, error) {
	v, err := a.workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	if err != nil {
		return nil, err
	}
	if v.GetCaller() == nil {
		return nil, errors.New("the coordinator does not report the caller (GetVersionResponse.caller): upgrade it")
	}
	return v.GetCaller(), nil
}

// httpStatus is the HTTP status of an API error.
func httpStatus(err error) int {
	switch status.Code(err) {
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.NotFound:
		return http.StatusNotFound
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange, codes.AlreadyExists:
		return http.StatusBadRequest
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable, codes.DeadlineExceeded:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

// errorText is what a person is shown of an API error: the status message,
// which the coordinator writes for its callers.
func errorText(err error) string {
	if s, ok := status.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// Capabilities the pages offer, by role, mirroring the coordinator's
// permission table (docs/security.md). They only decide what is shown: the
// coordinator checks every call itself.
type caps struct {
	Role             string
	QueuesRead       bool
	QueuesWrite      bool
	JobsRead         bool
	JobsCancel       bool
	DeadRead         bool
	DeadWrite        bool
	BreakersRead     bool
	BreakersWrite    bool
	WorkersRead      bool
	SchedulesRead    bool
	SchedulesPause   bool
	SchedulesTrigger bool
	KeysManage       bool
	AuditRead        bool
	OperationsRead   bool
	// OperationsWrite: bulk actions by filter and cancelling an operation.
	OperationsWrite bool
}

func capsOf(p *leaseholdv1.Principal) caps {
	r := p.GetRole()
	admin := r == leaseholdv1.Role_ROLE_ADMIN
	op := r == leaseholdv1.Role_ROLE_OPERATOR || admin
	reader := r == leaseholdv1.Role_ROLE_READER || op
	producer := r == leaseholdv1.Role_ROLE_PRODUCER
	return caps{
		Role:       roleName(r),
		QueuesRead: reader, QueuesWrite: op,
		JobsRead: reader || producer, JobsCancel: op || producer,
		DeadRead: reader, DeadWrite: op,
		BreakersRead: reader, BreakersWrite: op,
		WorkersRead:   reader,
		SchedulesRead: reader || producer, SchedulesPause: op, SchedulesTrigger: op || producer,
		KeysManage: admin, AuditRead: op,
		OperationsRead: reader, OperationsWrite: op,
	}
}
