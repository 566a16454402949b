package coordinator

import (
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// TestBulkRequestsAreValidatedOnce: bad bulk requests are INVALID_ARGUMENT
// with the field named, a queue outside the caller's scope is
// PERMISSION_DENIED, and nothing is started.
func TestBulkRequestsAreValidatedOnce(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) { cfg.OperationPollInterval = -1 })
	key, _ := e.key(tenantA, store.RoleOperator, "billing.*")
	cl := leaseholdv1.NewOperationServiceClient(e.dial(key))
	ctx := t.Context()
	invalid := []struct {
		call  func() error
		field string
	}{
		{func() error { _, err := cl.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{}); return err }, "filter"},
		{func() error {
			_, err := cl.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue = a OR queue = b"})
			return err
		}, "filter"},
		{func() error {
			_, err := cl.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue"})
			return err
		}, "filter.queue"},
		{func() error {
			_, err := cl.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "state = succeeded"})
			return err
		}, "filter.state"},
		{func() error {
			_, err := cl.SetJobsPriority(ctx, &leaseholdv1.SetJobsPriorityRequest{Filter: "queue = billing.x", Priority: 2_000_000})
			return err
		}, "priority"},
		{func() error {
			_, err := cl.CancelJobs(ctx, &leaseholdv1.CancelJobsRequest{Filter: "queue = billing.x", Reason: strings.Repeat("r", 2000)})
			return err
		}, "reason"},
		{func() error { _, err := cl.GetOperation(ctx, &leaseholdv1.GetOperationRequest{}); return err }, "name"},
		{func() error {
			_, err := cl.ListOperations(ctx, &leaseholdv1.ListOperationsRequest{PageSize: -1})
			return err
		}, "page_size"},
		{func() error {
			_, err := cl.WaitOperation(ctx, &leaseholdv1.WaitOperationRequest{Name: "x", Timeout: durationpb.New(-time.Second)})
			return err
		}, "timeout"},
	}
	for i, c := range invalid {
		err := c.call()
		if status.Code(err) != codes.InvalidArgument || !slices.Equal(fieldViolations(err), []string{c.field}) {
			t.Errorf("case %d: %v (fields %v), want INVALID_ARGUMENT on %s", i, err, fieldViolations(err), c.field)
		}
	}
	_, err := cl.CancelJobs(ctx, &leaseholdv1.CancelJobsRequest{Filter: "queue = emails"})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a filter on a queue outside the scope: %v, want PERMISSION_DENIED", err)
	}
	_, err = cl.GetOperation(ctx, &leaseholdv1.GetOperationRequest{Name: "operations/nope"})
	if status.Code(err) != codes.NotFound || reasonOf(err) != ReasonOperationNotFound {
		t.Errorf("a missing operation: %v (reason %q)", err, reasonOf(err))
	}
	page, err := e.st.ListOperations(ctx, store.ListOperationsParams{Tenant: tenantA})
	if err != nil || len(page.Operations) != 0 {
		t.Errorf("invalid requests started %d operations (%v)", len(page.Operations), err)
	}
}

// TestBulkReplayRunsScopedAndAudited: a scoped operator's replay acts on
// the dead jobs of its queues only (the others are counted out of scope),
// runs on the coordinator's runner to the end, and is audited as started
// and finished by that operator; a tenant over its running limit is
// refused with OPERATION_LIMIT.
func TestBulkReplayRunsScopedAndAudited(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) {
		cfg.OperationPollInterval = 20 * time.Millisecond
		cfg.OperationRate = -1
		cfg.OperationsPerTenantMax = 1
	})
	key, op := e.key(tenantA, store.RoleOperator, "billing.*")
	cl := leaseholdv1.NewOperationServiceClient(e.dial(key))
	ctx := t.Context()
	var in []string
	for range 3 {
		in = append(in, e.deadIn(tenantA, "billing.invoices").ID)
	}
	out := e.deadIn(tenantA, "emails")

	dry, err := cl.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "state = dead", DryRun: true})
	if err != nil || dry.GetOperation() != nil || dry.GetDryRun().GetCount() != 4 || len(dry.GetDryRun().GetSample()) != 3 {
		t.Fatalf("dry run: %v, %v (want 4 counted, the 3 in scope shown)", dry, err)
	}
	for _, j := range dry.GetDryRun().GetSample() {
		if j.GetQueue() != "billing.invoices" {
			t.Errorf("the dry run shows a job of %s, outside the scope", j.GetQueue())
		}
	}
	if page, err := e.st.ListOperations(ctx, store.ListOperationsParams{Tenant: tenantA}); err != nil || len(page.Operations) != 0 {
		t.Fatalf("a dry run started an operation: %v, %v", page, err)
	}
	started, err := cl.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "state = dead", Reason: "upstream fixed"})
	if err != nil {
		t.Fatal(err)
	}
	o := started.GetOperation()
	if o.GetKind() != leaseholdv1.OperationKind_OPERATION_KIND_REPLAY || o.GetCounts().GetMatched() != 4 || o.GetActor() != op.Identity() ||
		!slices.Equal(o.GetQueueScope(), []string{"billing.*"}) || o.GetName() != "operations/"+o.GetId() {
		t.Fatalf("started %v", o)
	}
	waited, err := cl.WaitOperation(ctx, &leaseholdv1.WaitOperationRequest{Name: o.GetName(), Timeout: durationpb.New(20 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	w := waited.GetOperation()
	if !w.GetDone() || w.GetState() != leaseholdv1.OperationState_OPERATION_STATE_SUCCEEDED ||
		w.GetCounts().GetActed() != 3 || w.GetCounts().GetSkippedOutOfScope() != 1 || w.GetCounts().GetRemaining() != 0 {
		t.Fatalf("after the wait: %v", w)
	}
	for _, id := range in {
		if dj, err := e.st.GetDeadJob(ctx, tenantA, id); err != nil || dj.ReplayedAs == "" {
			t.Errorf("in-scope dead job %s: %+v, %v", id, dj, err)
		}
	}
	if dj, err := e.st.GetDeadJob(ctx, tenantA, out.ID); err != nil || dj.ReplayedAs != "" {
		t.Errorf("out-of-scope dead job was touched: %+v, %v", dj, err)
	}
	audit, err := e.st.ListAudit(ctx, store.ListAuditParams{Tenant: tenantA, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range audit.Events {
		if ev.Target == o.GetId() {
			got = append(got, string(ev.Action)+" "+ev.Actor)
			if !strings.Contains(ev.Data, `"filter":"state = dead"`) {
				t.Errorf("audit %s does not record the filter: %s", ev.Action, ev.Data)
			}
		}
	}
	slices.Sort(got)
	want := []string{"operation_finished " + op.Identity(), "operation_started " + op.Identity()}
	if !slices.Equal(got, want) {
		t.Errorf("audit events %v, want %v", got, want)
	}
}

// TestBulkOperationLimit: a tenant already running OperationsPerTenantMax
// operations is refused another (RESOURCE_EXHAUSTED, OPERATION_LIMIT);
// another tenant is not; CancelOperation stops one and is audited.
func TestBulkOperationLimit(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) {
		cfg.OperationPollInterval = -1 // no runner: operations stay running
		cfg.OperationsPerTenantMax = 1
	})
	keyA, _ := e.key(tenantA, store.RoleAdmin)
	keyB, _ := e.key(tenantB, store.RoleOperator)
	clA := leaseholdv1.NewOperationServiceClient(e.dial(keyA))
	clB := leaseholdv1.NewOperationServiceClient(e.dial(keyB))
	ctx := t.Context()
	e.deadIn(tenantA, "q")
	e.deadIn(tenantB, "q")
	first, err := clA.AbandonDeadJobs(ctx, &leaseholdv1.AbandonDeadJobsRequest{Filter: "queue = q"})
	if err != nil || first.GetOperation().GetState() != leaseholdv1.OperationState_OPERATION_STATE_RUNNING {
		t.Fatalf("first: %v, %v", first, err)
	}
	_, err = clA.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue = q"})
	if status.Code(err) != codes.ResourceExhausted || reasonOf(err) != ReasonOperationLimit {
		t.Errorf("over the limit: %v (reason %q), want RESOURCE_EXHAUSTED OPERATION_LIMIT", err, reasonOf(err))
	}
	if _, err := clB.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue = q"}); err != nil {
		t.Errorf("another tenant's operation: %v", err)
	}
	cancelled, err := clA.CancelOperation(ctx, &leaseholdv1.CancelOperationRequest{Name: first.GetOperation().GetName()})
	if err != nil || !cancelled.GetOperation().GetCancelRequested() {
		t.Fatalf("cancel: %v, %v", cancelled, err)
	}
	list, err := clA.ListOperations(ctx, &leaseholdv1.ListOperationsRequest{State: leaseholdv1.OperationState_OPERATION_STATE_RUNNING})
	if err != nil || len(list.GetOperations()) != 1 || list.GetOperations()[0].GetId() != first.GetOperation().GetId() {
		t.Fatalf("list running: %v, %v", list, err)
	}
	audit, err := e.st.ListAudit(ctx, store.ListAuditParams{Tenant: tenantA, Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, ev := range audit.Events {
		if ev.Target == first.GetOperation().GetId() {
			actions = append(actions, string(ev.Action))
		}
	}
	slices.Sort(actions)
	if !slices.Equal(actions, []string{"operation_cancelled", "operation_started"}) {
		t.Errorf("audit %v", actions)
	}
}
