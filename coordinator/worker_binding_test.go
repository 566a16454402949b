package coordinator

import (
	"context"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// TestAClaimThatGetsNothingBindsNoWorkerID: a key scoped to other queues
// cannot squat the real worker's id with an empty Claim or a Hello; the
// id binds on its first granted lease.
func TestAClaimThatGetsNothingBindsNoWorkerID(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	realKey, _ := e.key(tenantA, store.RoleWorker, "emails")
	squatKey, _ := e.key(tenantA, store.RoleWorker, "other")
	owner := leaseholdv1.NewWorkerServiceClient(e.dial(realKey))
	squat := leaseholdv1.NewWorkerServiceClient(e.dial(squatKey))

	got, err := squat.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "real-1", Queues: []string{"other"}})
	if err != nil || len(got.GetJobs()) != 0 {
		t.Fatalf("the squatter's empty claim: %v, %d jobs", err, len(got.GetJobs()))
	}
	stream, err := squat.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "real-1", Queues: []string{"other"}, Capacity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("the squatter's Hello: %v, %v", m, err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			break
		}
	}

	e.job(tenantA, "emails")
	claimed, err := owner.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "real-1", Queues: []string{"emails"}})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("the real worker's claim after the squatter's: %v, %d jobs; want its job", err, len(claimed.GetJobs()))
	}
	// Its granted lease bound the id: now the other key is refused.
	if _, err := squat.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "real-1", Queues: []string{"other"}}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("another key claiming the bound id: %v, want PERMISSION_DENIED", err)
	}
}

// TestAStreamWhoseIDWasBoundElsewhereGetsNoLease: a stream's Hello binds
// nothing, so another principal may bind the id first (through another
// coordinator); the stream then ends PERMISSION_DENIED at its first lease,
// which goes back to the queue.
func TestAStreamWhoseIDWasBoundElsewhereGetsNoLease(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	key, _ := e.key(tenantA, store.RoleWorker)
	_, owner := e.key(tenantA, store.RoleWorker)
	q := e.uniq("bq")
	stream, err := leaseholdv1.NewWorkerServiceClient(e.dial(key)).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "w-late", Queues: []string{q}, Capacity: 1}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := stream.Recv(); err != nil || m.GetWelcome() == nil {
		t.Fatalf("Hello: %v, %v", m, err)
	}
	if err := stream.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 1}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.BindWorker(ctx, store.BindWorkerParams{Tenant: tenantA, WorkerID: "w-late", PrincipalID: owner.ID}); err != nil {
		t.Fatal(err)
	}
	job := e.job(tenantA, q)
	for {
		m, err := stream.Recv()
		if err == nil {
			if m.GetLease() != nil {
				t.Fatalf("the stream was pushed a lease of a worker id another principal owns: %v", m)
			}
			continue
		}
		if status.Code(err) != codes.PermissionDenied || reasonOf(err) != ReasonPermissionDenied {
			t.Fatalf("stream ended with %v, want PERMISSION_DENIED", err)
		}
		break
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		j, err := e.st.GetJob(ctx, tenantA, job.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == store.JobStateQueued {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the refused stream's lease was not released: job %s", j.State)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAnOperatorReleasesAWorkerIDBinding: after an unscoped operator's
// release the next principal granted a lease owns the id; a scoped
// operator may not release; the release is audited.
func TestAnOperatorReleasesAWorkerIDBinding(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	firstKey, first := e.key(tenantA, store.RoleWorker)
	nextKey, next := e.key(tenantA, store.RoleWorker)
	opKey, _ := e.key(tenantA, store.RoleOperator)
	scopedOpKey, _ := e.key(tenantA, store.RoleOperator, "emails")
	q := e.uniq("rq")
	for range 3 {
		e.job(tenantA, q)
	}
	claim := func(key string) (*leaseholdv1.ClaimResponse, error) {
		return leaseholdv1.NewWorkerServiceClient(e.dial(key)).Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "fixed-1", Queues: []string{q}})
	}
	if got, err := claim(firstKey); err != nil || len(got.GetJobs()) != 1 {
		t.Fatalf("first claim: %v", err)
	}
	if _, err := claim(nextKey); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("another principal before the release: %v, want PERMISSION_DENIED", err)
	}
	_, err := leaseholdv1.NewAdminServiceClient(e.dial(scopedOpKey)).ReleaseWorkerBinding(ctx, &leaseholdv1.ReleaseWorkerBindingRequest{WorkerId: "fixed-1"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a scoped operator releasing: %v, want PERMISSION_DENIED", err)
	}
	admin := leaseholdv1.NewAdminServiceClient(e.dial(opKey))
	_, err = admin.ReleaseWorkerBinding(ctx, &leaseholdv1.ReleaseWorkerBindingRequest{WorkerId: "bad worker"})
	if status.Code(err) != codes.InvalidArgument || !slices.Contains(fieldViolations(err), "worker_id") {
		t.Errorf("an invalid worker id: %v, want INVALID_ARGUMENT worker_id", err)
	}
	rel, err := admin.ReleaseWorkerBinding(ctx, &leaseholdv1.ReleaseWorkerBindingRequest{WorkerId: "fixed-1"})
	if err != nil || rel.GetPreviousOwnerId() != first.ID {
		t.Fatalf("release: %v, %v; want previous owner %s", rel, err, first.ID)
	}
	if got, err := claim(nextKey); err != nil || len(got.GetJobs()) != 1 {
		t.Fatalf("the next principal after the release: %v", err)
	}
	if owner, err := e.st.WorkerOwner(ctx, tenantA, "fixed-1"); err != nil || owner != next.ID {
		t.Errorf("owner after the release and a grant: %q, %v; want %s", owner, err, next.ID)
	}
	if _, err := claim(firstKey); status.Code(err) != codes.PermissionDenied {
		t.Errorf("the former owner after the release: %v, want PERMISSION_DENIED", err)
	}
	events, err := admin.ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range events.GetEvents() {
		if ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_WORKER_BINDING_RELEASED && ev.GetTarget() == "fixed-1" {
			found = true
		}
	}
	if !found {
		t.Errorf("no WORKER_BINDING_RELEASED audit event for fixed-1 in %v", events.GetEvents())
	}
}
