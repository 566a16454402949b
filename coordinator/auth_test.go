package coordinator

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
	"github.com/leasehold/leasehold/worker"
)

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// newTestCoordinator builds a coordinator over a fresh SQLite file, shut
// down when the test ends. It does not serve.
func newTestCoordinator(t *testing.T, configure func(*Config)) *Coordinator {
	t.Helper()
	st, err := sqlite.Open(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "leasehold.db")})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: st, PollInterval: 20 * time.Millisecond, PollMaxInterval: 100 * time.Millisecond, ShutdownGrace: time.Second}
	if configure != nil {
		configure(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return c
}

// authEnv is a coordinator with --auth api-key on a real socket, its
// store, and a log captured at Debug.
type authEnv struct {
	t    *testing.T
	c    *Coordinator
	st   store.Store
	addr string
	logs *testlog.Buffer
	seq  atomic.Int64
}

func newAuthEnv(t *testing.T, configure func(*Config)) *authEnv {
	t.Helper()
	logs := &testlog.Buffer{}
	c := newTestCoordinator(t, func(cfg *Config) {
		cfg.Auth = AuthAPIKey
		cfg.Logger = logs.Logger(slog.LevelDebug)
		if configure != nil {
			configure(cfg)
		}
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- c.Serve(lis) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Shutdown(ctx)
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return &authEnv{t: t, c: c, st: c.store, addr: lis.Addr().String(), logs: logs}
}

// key creates an API key principal straight in the store.
func (e *authEnv) key(tenant string, role store.Role, queues ...string) (string, *store.Principal) {
	e.t.Helper()
	secret, hash, err := NewAPIKey()
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := e.st.CreatePrincipal(context.Background(), store.CreatePrincipalParams{
		Tenant: tenant, Name: string(role) + "@" + tenant, Role: role, Queues: queues, KeyHash: hash, Actor: "test",
	})
	if err != nil {
		e.t.Fatal(err)
	}
	// Written behind the coordinator's back, as another coordinator
	// would: usable here at once rather than after principalMissRefresh.
	e.c.identity.auth.dir.invalidate()
	return secret, p
}

// dial connects with key (none when empty), closed when the test ends.
func (e *authEnv) dial(key string) *grpc.ClientConn {
	e.t.Helper()
	opts, err := worker.DialOptions(worker.DialConfig{APIKey: key})
	if err != nil {
		e.t.Fatal(err)
	}
	conn, err := grpc.NewClient(e.addr, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

func (e *authEnv) uniq(prefix string) string { return fmt.Sprintf("%s-%d", prefix, e.seq.Add(1)) }

func (e *authEnv) job(tenant, queue string) *store.Job {
	e.t.Helper()
	res, err := e.st.CreateJobs(context.Background(), store.CreateJobsParams{
		Tenant: tenant, Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: queue, Kind: "k", Payload: []byte("p")}}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return res[0].Job
}

// leased creates a job in its own queue and claims it as worker.
func (e *authEnv) leased(tenant, worker string) store.ClaimedJob {
	e.t.Helper()
	q := e.uniq("lq")
	e.job(tenant, q)
	got, err := e.st.Claim(context.Background(), store.ClaimParams{Tenant: tenant, Worker: worker, Queues: []string{q}, Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(got) != 1 {
		e.t.Fatalf("claim: %v, %d jobs", err, len(got))
	}
	return got[0]
}

// dead makes a DEAD job.
func (e *authEnv) dead(tenant string) *store.Job {
	e.t.Helper()
	q := e.uniq("dq")
	res, err := e.st.CreateJobs(context.Background(), store.CreateJobsParams{
		Tenant: tenant, Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: q, Kind: "k", MaxAttempts: 1}}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := e.st.Claim(context.Background(), store.ClaimParams{Tenant: tenant, Worker: "w-dead", Queues: []string{q}, Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(got) != 1 {
		e.t.Fatalf("claim: %v", err)
	}
	j, err := e.st.Retry(context.Background(), store.RetryParams{Tenant: tenant, Token: got[0].Token, Error: store.JobError{Code: "X", Retryable: true}})
	if err != nil || j.State != store.JobStateDead || j.ID != res[0].Job.ID {
		e.t.Fatalf("retry: %v, %+v", err, j)
	}
	return j
}

// breaker makes a breaker of tenant (force-opened through the store) and
// returns its dependency.
func (e *authEnv) breaker(tenant string) string {
	e.t.Helper()
	dep := e.uniq("dep")
	if _, err := e.st.ForceOpenBreaker(context.Background(), store.ForceOpenBreakerParams{Tenant: tenant, Dependency: dep}); err != nil {
		e.t.Fatal(err)
	}
	return dep
}

// schedule is a schedule of tenant (hourly, on a queue of its own).
func (e *authEnv) schedule(tenant string) string {
	e.t.Helper()
	sc, err := e.st.CreateSchedule(context.Background(), store.CreateScheduleParams{Tenant: tenant, Name: e.uniq("sched"),
		Spec: store.ScheduleSpec{Queue: e.uniq("sq"), Kind: "k", Interval: time.Hour}})
	if err != nil {
		e.t.Fatal(err)
	}
	return sc.ID
}

// operation starts, in tenant, a bulk operation that matches nothing (so
// it is finished at once) and returns its id.
func (e *authEnv) operation(tenant string) string {
	e.t.Helper()
	text := "queue = " + e.uniq("oq")
	f, err := store.ParseJobFilter(text)
	if err != nil {
		e.t.Fatal(err)
	}
	op, err := e.st.StartOperation(context.Background(), store.StartOperationParams{Tenant: tenant, Kind: store.OperationCancel,
		Filter: f, FilterText: text})
	if err != nil {
		e.t.Fatal(err)
	}
	return op.ID
}

// tok is the token of a lease the store granted, signed as a claim's
// answer would be.
func (e *authEnv) tok(t store.LeaseToken) *leaseholdv1.LeaseToken {
	return withSecret(toToken(t), e.c.identity.leases.sign(t))
}

// invoke calls method with req over conn, unary or streaming, and returns
// the call's final error (nil when it ended OK). A client stream (Connect)
// reads the first answer before closing its side.
func invoke(ctx context.Context, conn *grpc.ClientConn, method string, req proto.Message) error {
	svc, name, _ := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return err
	}
	md := d.(protoreflect.ServiceDescriptor).Methods().ByName(protoreflect.Name(name))
	mt, err := protoregistry.GlobalTypes.FindMessageByName(md.Output().FullName())
	if err != nil {
		return err
	}
	out := mt.New().Interface()
	if !md.IsStreamingClient() && !md.IsStreamingServer() {
		return conn.Invoke(ctx, method, req, out)
	}
	stream, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: md.IsStreamingServer(), ClientStreams: md.IsStreamingClient()}, method)
	if err != nil {
		return err
	}
	if err := stream.SendMsg(req); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	if md.IsStreamingClient() {
		if err := stream.RecvMsg(out); err != nil {
			return err
		}
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	for {
		if err := stream.RecvMsg(out); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
	}
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

func fieldViolations(err error) []string {
	var fields []string
	for _, d := range status.Convert(err).Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				fields = append(fields, v.GetField())
			}
		}
	}
	return fields
}

// rpcCase is one RPC of the matrix: a request made fresh for each call
// (fixtures live in tenant A), and the code a permitted caller gets from
// tenant A (own) and from tenant B (other).
type rpcCase struct {
	req        func(e *authEnv, worker string) proto.Message
	own, other codes.Code
}

// matrixCases covers every non-public RPC; TestPermissionMatrix checks
// that none is missing.
func matrixCases() map[string]rpcCase {
	// Lease-bound calls on another tenant's job answer as for a missing
	// job: NOT_FOUND.
	ok, nf := codes.OK, codes.NotFound
	spec := func(e *authEnv) *leaseholdv1.JobSpec { return &leaseholdv1.JobSpec{Queue: e.uniq("cq"), Kind: "k"} }
	return map[string]rpcCase{
		leaseholdv1.JobService_CreateJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.CreateJobRequest{Job: spec(e)}
		}, ok, ok},
		leaseholdv1.JobService_BatchCreateJobs_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.BatchCreateJobsRequest{Requests: []*leaseholdv1.CreateJobRequest{{Job: spec(e)}}}
		}, ok, ok},
		leaseholdv1.JobService_GetJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.GetJobRequest{JobId: e.job(tenantA, "q").ID}
		}, ok, nf},
		leaseholdv1.JobService_ListJobs_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListJobsRequest{}
		}, ok, ok},
		leaseholdv1.JobService_CancelJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.CancelJobRequest{JobId: e.job(tenantA, "q").ID}
		}, ok, nf},
		leaseholdv1.JobService_ListJobEvents_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ListJobEventsRequest{JobId: e.job(tenantA, "q").ID}
		}, ok, nf},
		leaseholdv1.JobService_ListJobEffects_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ListJobEffectsRequest{JobId: e.job(tenantA, "q").ID}
		}, ok, nf},
		leaseholdv1.JobService_ListJobCheckpoints_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ListJobCheckpointsRequest{JobId: e.job(tenantA, "q").ID}
		}, ok, nf},
		leaseholdv1.JobService_WatchJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			j := e.job(tenantA, "q")
			if _, err := e.st.RequestCancel(context.Background(), store.RequestCancelParams{Tenant: tenantA, JobID: j.ID}); err != nil {
				e.t.Fatal(err)
			}
			return &leaseholdv1.WatchJobRequest{JobId: j.ID} // terminal: the stream ends
		}, ok, nf},

		leaseholdv1.WorkerService_Claim_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.ClaimRequest{WorkerId: w, Queues: []string{e.uniq("empty")}}
		}, ok, ok},
		leaseholdv1.WorkerService_Renew_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.RenewRequest{Tokens: []*leaseholdv1.LeaseToken{e.tok(e.leased(tenantA, w).Token)}}
		}, ok, ok}, // another tenant's lease is answered RENEW_STATUS_LOST
		leaseholdv1.WorkerService_Complete_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.CompleteRequest{Token: e.tok(e.leased(tenantA, w).Token)}
		}, ok, nf},
		leaseholdv1.WorkerService_Retry_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.RetryRequest{Token: e.tok(e.leased(tenantA, w).Token), Error: &leaseholdv1.JobError{Code: "X", Retryable: true}}
		}, ok, nf},
		leaseholdv1.WorkerService_Cancel_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.CancelRequest{Token: e.tok(e.leased(tenantA, w).Token)}
		}, ok, nf},
		leaseholdv1.WorkerService_Release_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.ReleaseRequest{Token: e.tok(e.leased(tenantA, w).Token)}
		}, ok, nf},
		leaseholdv1.WorkerService_SaveCheckpoint_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.SaveCheckpointRequest{Token: e.tok(e.leased(tenantA, w).Token), Phase: "p"}
		}, ok, nf},
		leaseholdv1.WorkerService_ReserveEffect_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.ReserveEffectRequest{Token: e.tok(e.leased(tenantA, w).Token), EffectKey: "k"}
		}, ok, nf},
		leaseholdv1.WorkerService_RecordEffect_FullMethodName: {func(e *authEnv, w string) proto.Message {
			c := e.leased(tenantA, w)
			if _, _, err := e.st.ReserveEffect(context.Background(), store.ReserveEffectParams{Tenant: tenantA, Token: c.Token, Key: "k"}); err != nil {
				e.t.Fatal(err)
			}
			return &leaseholdv1.RecordEffectRequest{Token: e.tok(c.Token), EffectKey: "k", Status: leaseholdv1.EffectStatus_EFFECT_STATUS_SUCCEEDED}
		}, ok, nf},
		leaseholdv1.WorkerService_Connect_FullMethodName: {func(e *authEnv, w string) proto.Message {
			return &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
				WorkerId: w, Queues: []string{e.uniq("sq")}, Capacity: 1,
			}}}
		}, ok, ok},
		leaseholdv1.WorkerService_GetVersion_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.GetVersionRequest{}
		}, ok, ok},

		leaseholdv1.AdminService_ListQueues_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListQueuesRequest{}
		}, ok, ok},
		leaseholdv1.AdminService_GetQueue_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.GetQueueRequest{Queue: "q"}
		}, ok, ok},
		leaseholdv1.AdminService_UpdateQueuePolicy_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{Queue: e.uniq("pq"),
				DefaultLeaseDuration: durationpb.New(time.Minute)}}
		}, ok, ok},
		leaseholdv1.AdminService_PauseQueue_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.PauseQueueRequest{Queue: e.uniq("pq")}
		}, ok, ok},
		leaseholdv1.AdminService_ResumeQueue_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ResumeQueueRequest{Queue: e.uniq("pq")}
		}, ok, ok},
		leaseholdv1.AdminService_ListDeadJobs_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListDeadJobsRequest{}
		}, ok, ok},
		leaseholdv1.AdminService_GetDeadJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.GetDeadJobRequest{JobId: e.dead(tenantA).ID}
		}, ok, nf},
		leaseholdv1.AdminService_ReplayDeadJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ReplayDeadJobRequest{JobId: e.dead(tenantA).ID}
		}, ok, nf},
		leaseholdv1.AdminService_AbandonDeadJob_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.AbandonDeadJobRequest{JobId: e.dead(tenantA).ID}
		}, ok, nf},
		leaseholdv1.AdminService_ListBreakers_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListBreakersRequest{}
		}, ok, ok},
		leaseholdv1.AdminService_GetBreaker_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.GetBreakerRequest{Dependency: e.breaker(tenantA)}
		}, ok, nf},
		leaseholdv1.AdminService_ResetBreaker_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ResetBreakerRequest{Dependency: e.breaker(tenantA), Reason: "matrix"}
		}, ok, nf},
		leaseholdv1.AdminService_ListBreakerEvents_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ListBreakerEventsRequest{Dependency: e.breaker(tenantA)}
		}, ok, nf},
		leaseholdv1.AdminService_ForceOpenBreaker_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ForceOpenBreakerRequest{Dependency: e.uniq("dep"), Duration: durationpb.New(time.Minute)}
		}, ok, ok},
		leaseholdv1.AdminService_UpdateBreakerPolicy_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.UpdateBreakerPolicyRequest{Policy: &leaseholdv1.BreakerPolicy{Dependency: e.uniq("dep"), HalfOpenProbes: 2}}
		}, ok, ok},
		leaseholdv1.AdminService_ListWorkers_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListWorkersRequest{}
		}, ok, ok},
		leaseholdv1.AdminService_CreateApiKey_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.CreateApiKeyRequest{Role: leaseholdv1.Role_ROLE_READER, Name: "made in the matrix"}
		}, ok, ok},
		leaseholdv1.AdminService_ListApiKeys_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListApiKeysRequest{}
		}, ok, ok},
		leaseholdv1.AdminService_RevokeApiKey_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			_, p := e.key(tenantA, store.RoleReader)
			return &leaseholdv1.RevokeApiKeyRequest{Id: p.ID}
		}, ok, nf},
		leaseholdv1.AdminService_ListAuditEvents_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListAuditEventsRequest{}
		}, ok, ok},
		leaseholdv1.AdminService_ReleaseWorkerBinding_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ReleaseWorkerBindingRequest{WorkerId: e.uniq("w-free")}
		}, ok, ok},

		leaseholdv1.ScheduleService_CreateSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.CreateScheduleRequest{Name: e.uniq("s"), Spec: &leaseholdv1.ScheduleSpec{
				Queue: e.uniq("sq"), Kind: "k", Cron: "0 * * * *"}}
		}, ok, ok},
		leaseholdv1.ScheduleService_GetSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.GetScheduleRequest{Schedule: e.schedule(tenantA)}
		}, ok, nf},
		leaseholdv1.ScheduleService_ListSchedules_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListSchedulesRequest{}
		}, ok, ok},
		leaseholdv1.ScheduleService_UpdateSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.UpdateScheduleRequest{Schedule: e.schedule(tenantA), Spec: &leaseholdv1.ScheduleSpec{
				Queue: e.uniq("sq"), Kind: "k", Interval: durationpb.New(time.Minute)}}
		}, ok, nf},
		leaseholdv1.ScheduleService_PauseSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.PauseScheduleRequest{Schedule: e.schedule(tenantA), Reason: "matrix"}
		}, ok, nf},
		leaseholdv1.ScheduleService_ResumeSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ResumeScheduleRequest{Schedule: e.schedule(tenantA)}
		}, ok, nf},
		leaseholdv1.ScheduleService_DeleteSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.DeleteScheduleRequest{Schedule: e.schedule(tenantA)}
		}, ok, nf},
		leaseholdv1.ScheduleService_TriggerSchedule_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.TriggerScheduleRequest{Schedule: e.schedule(tenantA)}
		}, ok, nf},
		leaseholdv1.ScheduleService_ListScheduleRuns_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ListScheduleRunsRequest{Schedule: e.schedule(tenantA)}
		}, ok, nf},

		// Bulk calls on a queue with no jobs: each starts an operation
		// that matches nothing and so finishes at once.
		leaseholdv1.OperationService_CancelJobs_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.CancelJobsRequest{Filter: "queue = " + e.uniq("bq")}
		}, ok, ok},
		leaseholdv1.OperationService_RetryJobs_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.RetryJobsRequest{Filter: "queue = " + e.uniq("bq")}
		}, ok, ok},
		leaseholdv1.OperationService_ReplayDeadJobs_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue = " + e.uniq("bq")}
		}, ok, ok},
		leaseholdv1.OperationService_AbandonDeadJobs_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.AbandonDeadJobsRequest{Filter: "queue = " + e.uniq("bq")}
		}, ok, ok},
		leaseholdv1.OperationService_DeleteJobs_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.DeleteJobsRequest{Filter: "queue = " + e.uniq("bq")}
		}, ok, ok},
		leaseholdv1.OperationService_SetJobsPriority_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.SetJobsPriorityRequest{Filter: "queue = " + e.uniq("bq"), Priority: 3}
		}, ok, ok},
		leaseholdv1.OperationService_GetOperation_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.GetOperationRequest{Name: "operations/" + e.operation(tenantA)}
		}, ok, nf},
		leaseholdv1.OperationService_ListOperations_FullMethodName: {func(*authEnv, string) proto.Message {
			return &leaseholdv1.ListOperationsRequest{}
		}, ok, ok},
		leaseholdv1.OperationService_CancelOperation_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.CancelOperationRequest{Name: e.operation(tenantA)}
		}, ok, nf},
		leaseholdv1.OperationService_WaitOperation_FullMethodName: {func(e *authEnv, _ string) proto.Message {
			return &leaseholdv1.WaitOperationRequest{Name: e.operation(tenantA)}
		}, ok, nf},
	}
}

// TestPermissionMatrix calls every RPC as every role, from the tenant that
// owns the fixtures and from another one, over a real socket: a role
// without the method's permission gets PERMISSION_DENIED (reason
// PERMISSION_DENIED); one with it gets the method's
// answer, and another tenant's objects are answered as missing. A call
// without credentials is UNAUTHENTICATED everywhere.
func TestPermissionMatrix(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	cases := matrixCases()
	for method, perm := range methodPermissions {
		if _, ok := cases[method]; !ok && perm != permPublic && perm != permConsole { // permConsole: TestRecordConsoleSignIn
			t.Errorf("the matrix has no case for %s", method)
		}
	}
	anon := e.dial("")
	conns := map[string]*grpc.ClientConn{}
	for _, tenant := range []string{tenantA, tenantB} {
		for _, role := range store.Roles {
			key, _ := e.key(tenant, role)
			conns[tenant+"/"+string(role)] = e.dial(key)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for method, c := range cases {
		perm := methodPermissions[method]
		t.Run(strings.TrimPrefix(method, "/leasehold.v1."), func(t *testing.T) {
			err := invoke(ctx, anon, method, c.req(e, e.uniq("w-anon")))
			if status.Code(err) != codes.Unauthenticated || reasonOf(err) != ReasonUnauthenticated {
				t.Errorf("without credentials: %v (reason %q), want UNAUTHENTICATED", err, reasonOf(err))
			}
			for _, tenant := range []string{tenantA, tenantB} {
				for _, role := range store.Roles {
					worker := "w-" + string(role) + "-" + tenant
					err := invoke(ctx, conns[tenant+"/"+string(role)], method, c.req(e, worker))
					want := c.own
					if tenant != tenantA {
						want = c.other
					}
					if !allows(role, perm) {
						if status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonPermissionDenied {
							t.Errorf("%s of %s (no %s): %v, want PERMISSION_DENIED", role, tenant, perm, err)
						}
						continue
					}
					if status.Code(err) != want {
						t.Errorf("%s of %s: %v, want %s", role, tenant, err, want)
					}
				}
			}
		})
	}

	// Health and reflection answer without credentials.
	if _, err := healthpb.NewHealthClient(anon).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health check without credentials: %v", err)
	}
	if err := invoke(ctx, anon, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
		reflectionListRequest()); err != nil {
		t.Errorf("reflection without credentials: %v", err)
	}
}

// TestForgedCompletionIsRefused: a reader sees a leased job's owner and
// generation (GetJob shows the lease) but cannot publish for it; another
// worker principal presenting the holder's worker id cannot either. The
// job stays leased to its holder, who can still complete it.
func TestForgedCompletionIsRefused(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	holderKey, _ := e.key(tenantA, store.RoleWorker)
	readerKey, _ := e.key(tenantA, store.RoleReader)
	thiefKey, _ := e.key(tenantA, store.RoleWorker)
	holder := leaseholdv1.NewWorkerServiceClient(e.dial(holderKey))
	e.job(tenantA, "emails")
	claimed, err := holder.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "holder-1", Queues: []string{"emails"}})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("claim: %v", err)
	}
	jobID := claimed.GetJobs()[0].GetJob().GetId()

	seen, err := leaseholdv1.NewJobServiceClient(e.dial(readerKey)).GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: jobID})
	if err != nil {
		t.Fatal(err)
	}
	// What a reader can see of the lease: everything but its secret.
	forged := &leaseholdv1.LeaseToken{JobId: jobID, LeaseGeneration: seen.GetJob().GetLease().GetGeneration(), WorkerId: seen.GetJob().GetLease().GetOwner()}
	if forged.GetWorkerId() != "holder-1" || forged.GetLeaseGeneration() != 1 {
		t.Fatalf("the reader sees lease %+v", seen.GetJob().GetLease())
	}
	claimedTok := claimed.GetJobs()[0].GetToken()
	if len(claimedTok.GetSecret()) != store.LeaseKeyLen || proto.Equal(claimedTok, forged) {
		t.Fatalf("the claimer's token %v carries no secret", claimedTok)
	}
	_, err = leaseholdv1.NewWorkerServiceClient(e.dial(readerKey)).Complete(ctx, &leaseholdv1.CompleteRequest{Token: forged, Result: []byte("forged")})
	if status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonPermissionDenied {
		t.Errorf("a reader completing with the visible token: %v, want PERMISSION_DENIED", err)
	}
	thief := leaseholdv1.NewWorkerServiceClient(e.dial(thiefKey))
	_, err = thief.Complete(ctx, &leaseholdv1.CompleteRequest{Token: forged, Result: []byte("forged")})
	if status.Code(err) != codes.InvalidArgument || !slices.Contains(fieldViolations(err), "token.secret") {
		t.Errorf("another worker principal completing with the visible token: %v, want INVALID_ARGUMENT token.secret", err)
	}
	guessed := proto.CloneOf(forged)
	guessed.Secret = make([]byte, store.LeaseKeyLen)
	_, err = thief.Complete(ctx, &leaseholdv1.CompleteRequest{Token: guessed, Result: []byte("forged")})
	if status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonLeaseSecretMismatch {
		t.Errorf("another worker principal completing with a guessed secret: %v, want PERMISSION_DENIED %s", err, ReasonLeaseSecretMismatch)
	}
	_, err = thief.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claimedTok, Result: []byte("forged")})
	if status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonPermissionDenied {
		t.Errorf("another worker principal completing with the stolen token as holder-1: %v, want PERMISSION_DENIED", err)
	}
	if _, err := thief.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "holder-1", Queues: []string{"emails"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another principal claiming as holder-1: %v, want PERMISSION_DENIED", err)
	}
	// Nor may it take over holder-1's stream: its Connect is refused, and
	// holder-1 keeps its lease.
	takeover, err := thief.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := takeover.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "holder-1", Queues: []string{"emails"}, Capacity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := takeover.Recv(); status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonPermissionDenied {
		t.Errorf("another principal connecting as holder-1: %v, want PERMISSION_DENIED", err)
	}
	j, err := e.st.GetJob(ctx, tenantA, jobID)
	if err != nil || j.State != store.JobStateLeased || len(j.Result) != 0 {
		t.Fatalf("after the forgeries the job is %+v (%v), want still leased", j, err)
	}
	done, err := holder.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claimedTok, Result: []byte("real")})
	if err != nil || done.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
		t.Errorf("the holder completing: %v", err)
	}
}

// TestOtherTenantsJobAnswersLikeAMissingOne: for every call by job id, a
// job of another tenant, and a job outside a scoped principal's queues,
// get the very bytes a missing job gets.
func TestOtherTenantsJobAnswersLikeAMissingOne(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	adminB, _ := e.key(tenantB, store.RoleAdmin)
	scopedA, _ := e.key(tenantA, store.RoleAdmin, "billing.*")
	missing := "01900000-0000-7000-8000-000000000000"
	calls := map[string]func(id string) proto.Message{
		leaseholdv1.JobService_GetJob_FullMethodName:        func(id string) proto.Message { return &leaseholdv1.GetJobRequest{JobId: id} },
		leaseholdv1.JobService_CancelJob_FullMethodName:     func(id string) proto.Message { return &leaseholdv1.CancelJobRequest{JobId: id} },
		leaseholdv1.JobService_ListJobEvents_FullMethodName: func(id string) proto.Message { return &leaseholdv1.ListJobEventsRequest{JobId: id} },
		leaseholdv1.JobService_WatchJob_FullMethodName:      func(id string) proto.Message { return &leaseholdv1.WatchJobRequest{JobId: id} },
		leaseholdv1.JobService_ListJobEffects_FullMethodName: func(id string) proto.Message {
			return &leaseholdv1.ListJobEffectsRequest{JobId: id}
		},
		leaseholdv1.JobService_ListJobCheckpoints_FullMethodName: func(id string) proto.Message {
			return &leaseholdv1.ListJobCheckpointsRequest{JobId: id}
		},
		leaseholdv1.AdminService_GetDeadJob_FullMethodName: func(id string) proto.Message { return &leaseholdv1.GetDeadJobRequest{JobId: id} },
		leaseholdv1.AdminService_ReplayDeadJob_FullMethodName: func(id string) proto.Message {
			return &leaseholdv1.ReplayDeadJobRequest{JobId: id}
		},
		leaseholdv1.AdminService_AbandonDeadJob_FullMethodName: func(id string) proto.Message {
			return &leaseholdv1.AbandonDeadJobRequest{JobId: id}
		},
	}
	statusBytes := func(err error) []byte {
		b, merr := proto.Marshal(status.Convert(err).Proto())
		if merr != nil {
			t.Fatal(merr)
		}
		return b
	}
	for _, who := range []struct{ name, key string }{{"another tenant", adminB}, {"a principal scoped to other queues", scopedA}} {
		conn := e.dial(who.key)
		for method, req := range calls {
			// A live job and a dead one, in tenant A's "emails" queue.
			for _, id := range []string{e.job(tenantA, "emails").ID, e.deadIn(tenantA, e.uniq("emails")).ID} {
				errSeen := invoke(ctx, conn, method, req(id))
				errMissing := invoke(ctx, conn, method, req(missing))
				if status.Code(errMissing) != codes.NotFound {
					t.Fatalf("%s: a missing job answers %v", method, errMissing)
				}
				if string(statusBytes(errSeen)) != string(statusBytes(errMissing)) {
					t.Errorf("%s by %s: %v differs from a missing job's %v", method, who.name, errSeen, errMissing)
				}
			}
		}
	}
}

// deadIn is dead in a given queue.
func (e *authEnv) deadIn(tenant, queue string) *store.Job {
	e.t.Helper()
	res, err := e.st.CreateJobs(context.Background(), store.CreateJobsParams{
		Tenant: tenant, Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: queue, Kind: "k", MaxAttempts: 1}}},
	})
	if err != nil {
		e.t.Fatal(err)
	}
	got, err := e.st.Claim(context.Background(), store.ClaimParams{Tenant: tenant, Worker: "w-dead", Queues: []string{queue}, Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(got) != 1 || got[0].Job.ID != res[0].Job.ID {
		e.t.Fatalf("claim: %v", err)
	}
	j, err := e.st.Retry(context.Background(), store.RetryParams{Tenant: tenant, Token: got[0].Token, Error: store.JobError{Code: "X", Retryable: true}})
	if err != nil || j.State != store.JobStateDead {
		e.t.Fatalf("retry: %v", err)
	}
	return j
}

// TestQueueScopes: a principal limited to queues names only those queues,
// sees only their jobs, and cannot act tenant-wide.
func TestQueueScopes(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	prodKey, _ := e.key(tenantA, store.RoleProducer, "billing.*")
	workKey, _ := e.key(tenantA, store.RoleWorker, "billing.*", "emails")
	opKey, _ := e.key(tenantA, store.RoleOperator, "billing.*")
	adminKey, _ := e.key(tenantA, store.RoleAdmin, "billing.*")
	jobs := leaseholdv1.NewJobServiceClient(e.dial(prodKey))
	denied := func(what string, err error) {
		t.Helper()
		if status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonPermissionDenied {
			t.Errorf("%s: %v, want PERMISSION_DENIED", what, err)
		}
	}

	_, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "reports", Kind: "k"}})
	denied("create out of scope", err)
	_, err = jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: []*leaseholdv1.CreateJobRequest{
		{Job: &leaseholdv1.JobSpec{Queue: "billing.a", Kind: "k"}}, {Job: &leaseholdv1.JobSpec{Queue: "reports", Kind: "k"}},
	}})
	denied("a batch with one job out of scope", err)
	in, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "billing.invoices", Kind: "k"}})
	if err != nil {
		t.Fatalf("create in scope: %v", err)
	}
	out := e.job(tenantA, "reports")
	list, err := jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range list.GetJobs() {
		if j.GetId() == out.ID {
			t.Error("ListJobs shows a job out of scope")
		}
	}
	if len(list.GetJobs()) != 1 || list.GetJobs()[0].GetId() != in.GetJob().GetId() {
		t.Errorf("ListJobs shows %d jobs, want the one in scope", len(list.GetJobs()))
	}
	_, err = jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Queue: "reports"})
	denied("list a queue out of scope", err)
	_, err = jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Filter: `queue:("billing.invoices", "reports")`})
	denied("a filter naming a queue out of scope", err)
	list, err = jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Filter: `kind = k`})
	if err != nil || len(list.GetJobs()) != 1 || list.GetJobs()[0].GetId() != in.GetJob().GetId() {
		t.Errorf("a filter on no queue: %v, %v; want only the job in scope", list.GetJobs(), err)
	}
	list, err = jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Filter: `queue = "billing.invoices"`})
	if err != nil || len(list.GetJobs()) != 1 || list.GetJobs()[0].GetId() != in.GetJob().GetId() {
		t.Errorf("a filter on a queue in scope: %v, %v; want its job", list.GetJobs(), err)
	}

	workers := leaseholdv1.NewWorkerServiceClient(e.dial(workKey))
	_, err = workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "scoped-1", Queues: []string{"billing.invoices", "reports"}})
	denied("claim from a queue out of scope", err)
	got, err := workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "scoped-1", Queues: []string{"billing.invoices", "emails"}})
	if err != nil || len(got.GetJobs()) != 1 {
		t.Fatalf("claim in scope: %v", err)
	}
	stream, err := workers.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "scoped-2", Queues: []string{"reports"}, Capacity: 1}}}); err != nil {
		t.Fatal(err)
	}
	_, err = stream.Recv()
	denied("connect to a queue out of scope", err)

	admin := leaseholdv1.NewAdminServiceClient(e.dial(opKey))
	_, err = admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: "reports"})
	denied("pause a queue out of scope", err)
	if _, err := admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: "billing.invoices"}); err != nil {
		t.Errorf("pause in scope: %v", err)
	}
	qs, err := admin.ListQueues(ctx, &leaseholdv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs.GetQueues() {
		if !strings.HasPrefix(q.GetPolicy().GetQueue(), "billing.") {
			t.Errorf("ListQueues shows %s", q.GetPolicy().GetQueue())
		}
	}
	_, err = admin.ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	denied("a scoped operator reads the tenant's audit log", err)

	// Breakers are per (tenant, dependency), shared by every queue: a
	// scoped operator reads them but changes none; an unscoped one does.
	dep := e.breaker(tenantA)
	if _, err := admin.ListBreakers(ctx, &leaseholdv1.ListBreakersRequest{}); err != nil {
		t.Errorf("a scoped operator lists breakers: %v", err)
	}
	if _, err := admin.GetBreaker(ctx, &leaseholdv1.GetBreakerRequest{Dependency: dep}); err != nil {
		t.Errorf("a scoped operator reads a breaker: %v", err)
	}
	if _, err := admin.ListBreakerEvents(ctx, &leaseholdv1.ListBreakerEventsRequest{Dependency: dep}); err != nil {
		t.Errorf("a scoped operator reads a breaker's events: %v", err)
	}
	_, err = admin.ResetBreaker(ctx, &leaseholdv1.ResetBreakerRequest{Dependency: dep, Reason: "scoped"})
	denied("a scoped operator resets a breaker", err)
	_, err = admin.ForceOpenBreaker(ctx, &leaseholdv1.ForceOpenBreakerRequest{Dependency: "payments-api", Duration: durationpb.New(time.Minute)})
	denied("a scoped operator forces a breaker open", err)
	_, err = admin.UpdateBreakerPolicy(ctx, &leaseholdv1.UpdateBreakerPolicyRequest{Policy: &leaseholdv1.BreakerPolicy{Dependency: "payments-api", HalfOpenProbes: 2}})
	denied("a scoped operator re-policies a breaker", err)
	scopedAdmin := leaseholdv1.NewAdminServiceClient(e.dial(adminKey))
	_, err = scopedAdmin.ForceOpenBreaker(ctx, &leaseholdv1.ForceOpenBreakerRequest{Dependency: "payments-api", Duration: durationpb.New(time.Minute)})
	denied("a scoped admin forces a breaker open", err)
	unscopedKey, _ := e.key(tenantA, store.RoleOperator)
	if _, err := leaseholdv1.NewAdminServiceClient(e.dial(unscopedKey)).ResetBreaker(ctx, &leaseholdv1.ResetBreakerRequest{Dependency: dep, Reason: "unscoped"}); err != nil {
		t.Errorf("an unscoped operator resets a breaker: %v", err)
	}
	_, err = leaseholdv1.NewAdminServiceClient(e.dial(adminKey)).CreateApiKey(ctx, &leaseholdv1.CreateApiKeyRequest{Role: leaseholdv1.Role_ROLE_ADMIN})
	denied("a scoped admin creates an unscoped key", err)
}

// TestSecretsNeverReachTheLog runs key creation, use, a wrong key, a
// revoked key and revocation with the log at Debug, and finds no secret in
// it.
func TestSecretsNeverReachTheLog(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	rootKey, _ := e.key(tenantA, store.RoleAdmin)
	admin := leaseholdv1.NewAdminServiceClient(e.dial(rootKey))
	created, err := admin.CreateApiKey(ctx, &leaseholdv1.CreateApiKeyRequest{Role: leaseholdv1.Role_ROLE_PRODUCER, Name: "p"})
	if err != nil {
		t.Fatal(err)
	}
	secret := created.GetSecret()
	if !strings.HasPrefix(secret, APIKeyPrefix) || len(secret) != apiKeyLen {
		t.Fatalf("secret %q", secret)
	}
	jobs := leaseholdv1.NewJobServiceClient(e.dial(secret))
	if _, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	wrong := secret[:len(secret)-2] + "xx"
	if _, err := leaseholdv1.NewJobServiceClient(e.dial(wrong)).ListJobs(ctx, &leaseholdv1.ListJobsRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a wrong key: %v", err)
	}
	listed, err := admin.ListApiKeys(ctx, &leaseholdv1.ListApiKeysRequest{IncludeRevoked: true})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := proto.Marshal(listed); bytes.Contains(b, []byte(secret)) || bytes.Contains(b, store.KeyHash(secret)) {
		t.Error("ListApiKeys returns the secret or its hash")
	}
	if _, err := admin.RevokeApiKey(ctx, &leaseholdv1.RevokeApiKeyRequest{Id: created.GetPrincipal().GetId()}); err != nil {
		t.Fatal(err)
	}
	_, err = jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{})
	if status.Code(err) != codes.Unauthenticated || reasonOf(err) != ReasonUnauthenticated {
		t.Errorf("a key revoked on this coordinator: %v, want UNAUTHENTICATED at once", err)
	}
	audit, err := admin.ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := proto.Marshal(audit); strings.Contains(string(b), secret) {
		t.Error("the audit log holds the secret")
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "Unauthenticated") {
		t.Fatalf("the log did not capture the calls:\n%s", logs)
	}
	for _, s := range []string{secret, rootKey, wrong, secret[len(APIKeyPrefix):]} {
		if strings.Contains(logs, s) {
			t.Errorf("the log contains a secret:\n%s", logs)
		}
	}
}

// TestLeaseSecretIsShownOnlyToTheClaimer: the claim's answer carries the
// lease's secret; nothing a reader can call, nor an echoed token, nor the
// log at Debug, does.
func TestLeaseSecretIsShownOnlyToTheClaimer(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	workerKey, _ := e.key(tenantA, store.RoleWorker)
	readerKey, _ := e.key(tenantA, store.RoleReader)
	workers := leaseholdv1.NewWorkerServiceClient(e.dial(workerKey))
	e.job(tenantA, "emails")
	claimed, err := workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w-1", Queues: []string{"emails"}})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("claim: %v", err)
	}
	tok := claimed.GetJobs()[0].GetToken()
	secret := tok.GetSecret()
	if len(secret) != store.LeaseKeyLen {
		t.Fatalf("secret of %d bytes", len(secret))
	}
	renewed, err := workers.Renew(ctx, &leaseholdv1.RenewRequest{Tokens: []*leaseholdv1.LeaseToken{tok}})
	if err != nil {
		t.Fatal(err)
	}
	reader := leaseholdv1.NewJobServiceClient(e.dial(readerKey))
	got, err := reader.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: tok.GetJobId()})
	if err != nil {
		t.Fatal(err)
	}
	listed, err := reader.ListJobs(ctx, &leaseholdv1.ListJobsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := reader.ListJobEvents(ctx, &leaseholdv1.ListJobEventsRequest{JobId: tok.GetJobId()})
	if err != nil {
		t.Fatal(err)
	}
	watch, err := reader.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: tok.GetJobId()})
	if err != nil {
		t.Fatal(err)
	}
	watched, err := watch.Recv()
	if err != nil {
		t.Fatal(err)
	}
	for name, m := range map[string]proto.Message{"GetJob": got, "ListJobs": listed, "ListJobEvents": events, "WatchJob": watched, "Renew's echo": renewed} {
		b, _ := proto.Marshal(m)
		if bytes.Contains(b, secret) {
			t.Errorf("%s shows the lease secret", name)
		}
	}
	if _, err := workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: tok}); err != nil {
		t.Fatal(err)
	}
	logs := e.logs.String()
	for _, enc := range []string{string(secret), hex.EncodeToString(secret), base64.StdEncoding.EncodeToString(secret), base64.RawURLEncoding.EncodeToString(secret)} {
		if strings.Contains(logs, enc) {
			t.Errorf("the log contains the lease secret")
		}
	}
}

// TestAuditRecordsOperatorActions: each operator action leaves an audit
// event naming the principal, and job events name it as actor.
func TestAuditRecordsOperatorActions(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	opKey, op := e.key(tenantA, store.RoleOperator)
	adminKey, _ := e.key(tenantA, store.RoleAdmin)
	admin := leaseholdv1.NewAdminServiceClient(e.dial(opKey))
	jobs := leaseholdv1.NewJobServiceClient(e.dial(opKey))
	if _, err := admin.UpdateQueuePolicy(ctx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: &leaseholdv1.QueuePolicy{Queue: "emails"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: "emails"}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.ResumeQueue(ctx, &leaseholdv1.ResumeQueueRequest{Queue: "emails"}); err != nil {
		t.Fatal(err)
	}
	queued := e.job(tenantA, "emails")
	if _, err := jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: queued.ID, Reason: "dup"}); err != nil {
		t.Fatal(err)
	}
	d1, d2 := e.dead(tenantA), e.dead(tenantA)
	if _, err := admin.ReplayDeadJob(ctx, &leaseholdv1.ReplayDeadJobRequest{JobId: d1.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.AbandonDeadJob(ctx, &leaseholdv1.AbandonDeadJobRequest{JobId: d2.ID}); err != nil {
		t.Fatal(err)
	}
	keys := leaseholdv1.NewAdminServiceClient(e.dial(adminKey))
	made, err := keys.CreateApiKey(ctx, &leaseholdv1.CreateApiKeyRequest{Role: leaseholdv1.Role_ROLE_WORKER, Name: "w"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keys.RevokeApiKey(ctx, &leaseholdv1.RevokeApiKeyRequest{Id: made.GetPrincipal().GetId()}); err != nil {
		t.Fatal(err)
	}

	var all []*leaseholdv1.AuditEvent
	tokenSeen := ""
	for {
		page, err := admin.ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{PageSize: 2, PageToken: tokenSeen})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.GetEvents()...)
		if tokenSeen = page.GetNextPageToken(); tokenSeen == "" {
			break
		}
	}
	var got []string
	for i := len(all) - 1; i >= 0; i-- {
		ev := all[i]
		if strings.HasPrefix(ev.GetAction().String(), "AUDIT_ACTION_API_KEY") && ev.GetTarget() != made.GetPrincipal().GetId() {
			continue // the keys the test made in the store
		}
		got = append(got, strings.TrimPrefix(ev.GetAction().String(), "AUDIT_ACTION_")+" "+ev.GetActor())
	}
	opID := "key:" + op.ID
	want := []string{
		"QUEUE_POLICY_UPDATED " + opID, "QUEUE_PAUSED " + opID, "QUEUE_RESUMED " + opID, "JOB_CANCELLED " + opID,
		"DEAD_JOB_REPLAYED " + opID, "DEAD_JOB_ABANDONED " + opID,
	}
	if len(got) < len(want)+2 || strings.Join(got[:len(want)], "\n") != strings.Join(want, "\n") ||
		!strings.HasPrefix(got[len(want)], "API_KEY_CREATED key:") || !strings.HasPrefix(got[len(want)+1], "API_KEY_REVOKED key:") {
		t.Errorf("audit log, oldest first:\n%s\nwant:\n%s\nthen the key's creation and revocation", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	evs, err := e.st.ListEvents(ctx, store.ListEventsParams{Tenant: tenantA, JobID: queued.ID})
	if err != nil {
		t.Fatal(err)
	}
	if last := evs[len(evs)-1]; !strings.Contains(last.Data, `"actor":"`+opID+`"`) {
		t.Errorf("the cancelled event's data %s does not name the actor", last.Data)
	}
}

// TestAuthNoneRunsAsTheConfiguredTenant: the zero-setup default needs no
// credentials, runs every call in Config.Tenant as an admin, and audits
// as "anonymous".
func TestAuthNoneRunsAsTheConfiguredTenant(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) { cfg.Auth = AuthNone; cfg.Tenant = "solo" })
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx := t.Context()
	created, err := leaseholdv1.NewJobServiceClient(conn).CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.GetJob(ctx, "solo", created.GetJob().GetId()); err != nil {
		t.Errorf("the job is not in the configured tenant: %v", err)
	}
	admin := leaseholdv1.NewAdminServiceClient(conn)
	if _, err := admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	page, err := admin.ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil || len(page.GetEvents()) != 1 || page.GetEvents()[0].GetActor() != anonymousIdentity {
		t.Errorf("audit: %v, %v", page, err)
	}
}

// TestAStreamEndsWhenItsKeyIsRevoked: a Connect stream opened with a key
// that is then revoked is ended, not left running for hours, with
// UNAUTHENTICATED.
func TestAStreamEndsWhenItsKeyIsRevoked(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) { cfg.AuthCacheTTL = 200 * time.Millisecond })
	key, p := e.key(tenantA, store.RoleWorker)
	stream, err := leaseholdv1.NewWorkerServiceClient(e.dial(key)).Connect(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w1", Queues: []string{"q"}, Capacity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatalf("welcome: %v", err)
	}
	if _, err := e.st.RevokePrincipal(t.Context(), store.RevokePrincipalParams{Tenant: tenantA, ID: p.ID, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := stream.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unauthenticated || reasonOf(err) != ReasonUnauthenticated {
			t.Errorf("the stream ended with %v; want UNAUTHENTICATED (its credential is gone, not the call cancelled)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stream of a revoked key still runs after 5s")
	}
}

func reflectionListRequest() proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName("grpc.reflection.v1.ServerReflectionRequest")
	if err != nil {
		panic(err)
	}
	m := mt.New()
	fd := m.Descriptor().Fields().ByName("list_services")
	m.Set(fd, protoreflect.ValueOfString("*"))
	return m.Interface()
}

// TestIdempotencyConflictsRevealNothingOutsideTheScope: a request id used
// in a queue outside a scoped producer's queues conflicts exactly as one
// used in its own queue does — same code, reason, message and details,
// with no job id, queue or fingerprint — so the answer says only that the
// id is taken in the tenant, never where or for what.
func TestIdempotencyConflictsRevealNothingOutsideTheScope(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx := t.Context()
	allKey, _ := e.key(tenantA, store.RoleProducer)
	scopedKey, _ := e.key(tenantA, store.RoleProducer, "a.*")
	all := leaseholdv1.NewJobServiceClient(e.dial(allKey))
	scoped := leaseholdv1.NewJobServiceClient(e.dial(scopedKey))
	if _, err := all.CreateJob(ctx, &leaseholdv1.CreateJobRequest{RequestId: "outside", Job: &leaseholdv1.JobSpec{Queue: "q1", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := scoped.CreateJob(ctx, &leaseholdv1.CreateJobRequest{RequestId: "inside", Job: &leaseholdv1.JobSpec{Queue: "a.one", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	_, outside := scoped.CreateJob(ctx, &leaseholdv1.CreateJobRequest{RequestId: "outside", Job: &leaseholdv1.JobSpec{Queue: "a.two", Kind: "k"}})
	_, inside := scoped.CreateJob(ctx, &leaseholdv1.CreateJobRequest{RequestId: "inside", Job: &leaseholdv1.JobSpec{Queue: "a.two", Kind: "k"}})
	if status.Code(outside) != codes.AlreadyExists || reasonOf(outside) != ReasonIdempotencyConflict {
		t.Fatalf("a request id used outside the scope: %v; want ALREADY_EXISTS %s", outside, ReasonIdempotencyConflict)
	}
	so, si := status.Convert(outside).Proto(), status.Convert(inside).Proto()
	if !proto.Equal(so, si) {
		t.Errorf("the conflict outside the scope answers %v; inside it %v: they must be the same", so, si)
	}
	for _, leak := range []string{"q1", "outside"} {
		if strings.Contains(so.String(), leak) {
			t.Errorf("the conflict answer %v mentions %q", so, leak)
		}
	}
}
