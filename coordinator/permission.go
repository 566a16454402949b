package coordinator

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// permission is what one RPC needs. Roles hold permissions (rolePermissions);
// every RPC needs exactly one (methodPermissions).
type permission string

// The permissions.
const (
	// permPublic: no credential needed (health checks, reflection). The
	// auth interceptor is skipped for these services altogether.
	permPublic permission = "public"
	// permAuthenticated: any valid principal (GetVersion).
	permAuthenticated permission = "authenticated"
	permJobsCreate    permission = "jobs.create"
	permJobsRead      permission = "jobs.read"
	permJobsCancel    permission = "jobs.cancel"
	// permWork: claim jobs and report on their leases, unary or over
	// Connect.
	permWork         permission = "work"
	permQueuesRead   permission = "queues.read"
	permQueuesWrite  permission = "queues.write"
	permDeadRead     permission = "dead.read"
	permDeadWrite    permission = "dead.write"
	permBreakerRead  permission = "breakers.read"
	permBreakerWrite permission = "breakers.write"
	permWorkersRead  permission = "workers.read"
	permWorkersWrite permission = "workers.write"
	permAuditRead    permission = "audit.read"
	permKeysManage   permission = "keys.manage"
	// Schedules: producers define them in their queue scopes; operators
	// pause, resume and trigger them; readers read them.
	permSchedulesRead    permission = "schedules.read"
	permSchedulesWrite   permission = "schedules.write"
	permSchedulesPause   permission = "schedules.pause"
	permSchedulesTrigger permission = "schedules.trigger"
	// Bulk operations: operators and admins start and cancel them;
	// readers follow them.
	permOperationsRead  permission = "operations.read"
	permOperationsWrite permission = "operations.write"
	// permConsole: a web console, proven by the console proof metadata
	// (console_proof.go), not by a role; with a key as well, the key's
	// principal is the caller.
	permConsole permission = "console"
)

// methodPermissions is THE table: every RPC of every service the
// coordinator registers, by full method name, with the permission it
// needs. A method missing here is refused (PERMISSION_DENIED), and
// TestEveryMethodHasAPermission walks the registered services so that
// none is forgotten. Add a row in the same change as the RPC.
var methodPermissions = map[string]permission{
	// JobService: producers.
	leaseholdv1.JobService_CreateJob_FullMethodName:          permJobsCreate,
	leaseholdv1.JobService_BatchCreateJobs_FullMethodName:    permJobsCreate,
	leaseholdv1.JobService_GetJob_FullMethodName:             permJobsRead,
	leaseholdv1.JobService_ListJobs_FullMethodName:           permJobsRead,
	leaseholdv1.JobService_ListJobEvents_FullMethodName:      permJobsRead,
	leaseholdv1.JobService_WatchJob_FullMethodName:           permJobsRead,
	leaseholdv1.JobService_ListJobEffects_FullMethodName:     permJobsRead,
	leaseholdv1.JobService_ListJobCheckpoints_FullMethodName: permJobsRead,
	leaseholdv1.JobService_CancelJob_FullMethodName:          permJobsCancel,

	// WorkerService: workers. Every lease-bound call also needs the
	// worker id to belong to the caller (checkWorker).
	leaseholdv1.WorkerService_Claim_FullMethodName:          permWork,
	leaseholdv1.WorkerService_Renew_FullMethodName:          permWork,
	leaseholdv1.WorkerService_Complete_FullMethodName:       permWork,
	leaseholdv1.WorkerService_Retry_FullMethodName:          permWork,
	leaseholdv1.WorkerService_Cancel_FullMethodName:         permWork,
	leaseholdv1.WorkerService_Release_FullMethodName:        permWork,
	leaseholdv1.WorkerService_SaveCheckpoint_FullMethodName: permWork,
	leaseholdv1.WorkerService_ReserveEffect_FullMethodName:  permWork,
	leaseholdv1.WorkerService_RecordEffect_FullMethodName:   permWork,
	leaseholdv1.WorkerService_Connect_FullMethodName:        permWork,
	leaseholdv1.WorkerService_GetVersion_FullMethodName:     permAuthenticated,

	// AdminService: operators, readers, admins.
	leaseholdv1.AdminService_ListQueues_FullMethodName:           permQueuesRead,
	leaseholdv1.AdminService_GetQueue_FullMethodName:             permQueuesRead,
	leaseholdv1.AdminService_UpdateQueuePolicy_FullMethodName:    permQueuesWrite,
	leaseholdv1.AdminService_PauseQueue_FullMethodName:           permQueuesWrite,
	leaseholdv1.AdminService_ResumeQueue_FullMethodName:          permQueuesWrite,
	leaseholdv1.AdminService_ListDeadJobs_FullMethodName:         permDeadRead,
	leaseholdv1.AdminService_GetDeadJob_FullMethodName:           permDeadRead,
	leaseholdv1.AdminService_ReplayDeadJob_FullMethodName:        permDeadWrite,
	leaseholdv1.AdminService_AbandonDeadJob_FullMethodName:       permDeadWrite,
	leaseholdv1.AdminService_ListBreakers_FullMethodName:         permBreakerRead,
	leaseholdv1.AdminService_ResetBreaker_FullMethodName:         permBreakerWrite,
	leaseholdv1.AdminService_GetBreaker_FullMethodName:           permBreakerRead,
	leaseholdv1.AdminService_ListBreakerEvents_FullMethodName:    permBreakerRead,
	leaseholdv1.AdminService_ForceOpenBreaker_FullMethodName:     permBreakerWrite,
	leaseholdv1.AdminService_UpdateBreakerPolicy_FullMethodName:  permBreakerWrite,
	leaseholdv1.AdminService_ListWorkers_FullMethodName:          permWorkersRead,
	leaseholdv1.AdminService_ReleaseWorkerBinding_FullMethodName: permWorkersWrite,
	leaseholdv1.AdminService_RecordConsoleSignIn_FullMethodName:  permConsole,
	leaseholdv1.AdminService_CreateApiKey_FullMethodName:         permKeysManage,
	leaseholdv1.AdminService_ListApiKeys_FullMethodName:          permKeysManage,
	leaseholdv1.AdminService_RevokeApiKey_FullMethodName:         permKeysManage,
	leaseholdv1.AdminService_ListAuditEvents_FullMethodName:      permAuditRead,

	// ScheduleService: producers define, operators pause and resume,
	// both trigger, readers read.
	leaseholdv1.ScheduleService_CreateSchedule_FullMethodName:   permSchedulesWrite,
	leaseholdv1.ScheduleService_UpdateSchedule_FullMethodName:   permSchedulesWrite,
	leaseholdv1.ScheduleService_DeleteSchedule_FullMethodName:   permSchedulesWrite,
	leaseholdv1.ScheduleService_GetSchedule_FullMethodName:      permSchedulesRead,
	leaseholdv1.ScheduleService_ListSchedules_FullMethodName:    permSchedulesRead,
	leaseholdv1.ScheduleService_ListScheduleRuns_FullMethodName: permSchedulesRead,
	leaseholdv1.ScheduleService_PauseSchedule_FullMethodName:    permSchedulesPause,
	leaseholdv1.ScheduleService_ResumeSchedule_FullMethodName:   permSchedulesPause,
	leaseholdv1.ScheduleService_TriggerSchedule_FullMethodName:  permSchedulesTrigger,

	// OperationService: operators and admins act, readers follow.
	leaseholdv1.OperationService_CancelJobs_FullMethodName:      permOperationsWrite,
	leaseholdv1.OperationService_RetryJobs_FullMethodName:       permOperationsWrite,
	leaseholdv1.OperationService_ReplayDeadJobs_FullMethodName:  permOperationsWrite,
	leaseholdv1.OperationService_AbandonDeadJobs_FullMethodName: permOperationsWrite,
	leaseholdv1.OperationService_DeleteJobs_FullMethodName:      permOperationsWrite,
	leaseholdv1.OperationService_SetJobsPriority_FullMethodName: permOperationsWrite,
	leaseholdv1.OperationService_CancelOperation_FullMethodName: permOperationsWrite,
	leaseholdv1.OperationService_GetOperation_FullMethodName:    permOperationsRead,
	leaseholdv1.OperationService_ListOperations_FullMethodName:  permOperationsRead,
	leaseholdv1.OperationService_WaitOperation_FullMethodName:   permOperationsRead,

	// Health and reflection: public, so that load balancers and kubelet
	// probes (which cannot present credentials) and grpcurl's discovery
	// work. Reflection only describes the API, which is public anyway.
	healthpb.Health_Check_FullMethodName:                                   permPublic,
	healthpb.Health_List_FullMethodName:                                    permPublic,
	healthpb.Health_Watch_FullMethodName:                                   permPublic,
	reflectionv1.ServerReflection_ServerReflectionInfo_FullMethodName:      permPublic,
	reflectionv1alpha.ServerReflection_ServerReflectionInfo_FullMethodName: permPublic,
}

// publicServices are the services whose every method is permPublic: the
// auth interceptor is skipped for them (selector), so a call without
// credentials reaches them on every auth mode.
var publicServices = map[string]bool{
	healthpb.Health_ServiceDesc.ServiceName:                    true,
	reflectionv1.ServerReflection_ServiceDesc.ServiceName:      true,
	reflectionv1alpha.ServerReflection_ServiceDesc.ServiceName: true,
}

// rolePermissions is what each role may do. Readers see jobs with their
// payloads, results, metadata, events and lease owners and generations,
// but no lease-bound call accepts a reader, so what a reader sees cannot
// be used to publish for a job.
var rolePermissions = map[store.Role][]permission{
	store.RoleProducer: {permAuthenticated, permJobsCreate, permJobsRead, permJobsCancel,
		permSchedulesRead, permSchedulesWrite, permSchedulesTrigger},
	store.RoleWorker: {permAuthenticated, permWork},
	store.RoleReader: {permAuthenticated, permJobsRead, permQueuesRead, permDeadRead,
		permBreakerRead, permWorkersRead, permSchedulesRead, permOperationsRead},
	store.RoleOperator: {permAuthenticated, permJobsRead, permJobsCancel, permQueuesRead, permQueuesWrite,
		permDeadRead, permDeadWrite, permBreakerRead, permBreakerWrite, permWorkersRead, permWorkersWrite, permAuditRead,
		permSchedulesRead, permSchedulesPause, permSchedulesTrigger, permOperationsRead, permOperationsWrite},
	store.RoleAdmin: {permAuthenticated, permJobsCreate, permJobsRead, permJobsCancel, permWork,
		permQueuesRead, permQueuesWrite, permDeadRead, permDeadWrite, permBreakerRead, permBreakerWrite,
		permWorkersRead, permWorkersWrite, permAuditRead, permKeysManage,
		permSchedulesRead, permSchedulesWrite, permSchedulesPause, permSchedulesTrigger,
		permOperationsRead, permOperationsWrite},
}

// allows reports whether role holds perm.
func allows(role store.Role, perm permission) bool {
	if perm == permPublic {
		return true
	}
	for _, p := range rolePermissions[role] {
		if p == perm {
			return true
		}
	}
	return false
}
