package coordinator

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// TestScheduleRequestsAreValidatedOnce: bad definitions are
// INVALID_ARGUMENT with the offending field named, before anything is
// stored.
func TestScheduleRequestsAreValidatedOnce(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	key, _ := e.key(tenantA, store.RoleProducer)
	cl := leaseholdv1.NewScheduleServiceClient(e.dial(key))
	ctx := t.Context()
	cases := []struct {
		req   *leaseholdv1.CreateScheduleRequest
		field string
	}{
		{&leaseholdv1.CreateScheduleRequest{Name: "a"}, "spec"},
		{&leaseholdv1.CreateScheduleRequest{Name: "", Spec: &leaseholdv1.ScheduleSpec{Queue: "q", Kind: "k", Cron: "* * * * *"}}, "name"},
		{&leaseholdv1.CreateScheduleRequest{Name: "a", Spec: &leaseholdv1.ScheduleSpec{Queue: "q", Kind: "k", Cron: "every day"}}, "spec.cron"},
		{&leaseholdv1.CreateScheduleRequest{Name: "a", Spec: &leaseholdv1.ScheduleSpec{Queue: "q", Kind: "k", Cron: "* * * * *", TimeZone: "Nowhere/Land"}}, "spec.time_zone"},
		{&leaseholdv1.CreateScheduleRequest{Name: "a", Spec: &leaseholdv1.ScheduleSpec{Queue: "q", Kind: "k", Interval: durationpb.New(time.Millisecond)}}, "spec.interval"},
		{&leaseholdv1.CreateScheduleRequest{Name: "a", Spec: &leaseholdv1.ScheduleSpec{Queue: "q", Kind: "k", Cron: "* * * * *",
			Metadata: map[string]string{store.ScheduleTickMetadataKey: "x"}}}, "spec.metadata"},
		{&leaseholdv1.CreateScheduleRequest{Name: "a", Spec: &leaseholdv1.ScheduleSpec{Queue: "q", Kind: "k", Cron: "* * * * *", CatchUp: 99}}, "spec.catch_up"},
	}
	for _, c := range cases {
		_, err := cl.CreateSchedule(ctx, c.req)
		if status.Code(err) != codes.InvalidArgument || !slices.Equal(fieldViolations(err), []string{c.field}) {
			t.Errorf("%v: %v (fields %v), want INVALID_ARGUMENT on %s", c.req, err, fieldViolations(err), c.field)
		}
	}
	page, err := e.st.ListSchedules(ctx, store.ListSchedulesParams{Tenant: tenantA, Limit: 10})
	if err != nil || len(page.Schedules) != 0 {
		t.Errorf("stored %d schedules from invalid requests (%v)", len(page.Schedules), err)
	}
}

// TestSchedulesFireAsTheirOwner: a scoped producer may schedule in its
// queues only, its schedule fires on the coordinator's scheduler with
// metadata naming schedule and tick, another scoped principal sees it as
// missing, and once the owner's key is revoked the schedule pauses itself
// with the reason.
func TestSchedulesFireAsTheirOwner(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, func(cfg *Config) { cfg.SchedulePollInterval = 20 * time.Millisecond })
	ownerKey, owner := e.key(tenantA, store.RoleProducer, "billing.*")
	otherKey, _ := e.key(tenantA, store.RoleReader, "emails")
	cl := leaseholdv1.NewScheduleServiceClient(e.dial(ownerKey))
	ctx := t.Context()

	_, err := cl.CreateSchedule(ctx, &leaseholdv1.CreateScheduleRequest{Name: "x", Spec: &leaseholdv1.ScheduleSpec{Queue: "emails", Kind: "k", Interval: durationpb.New(time.Second)}})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("out of scope: %v, want PERMISSION_DENIED", err)
	}
	created, err := cl.CreateSchedule(ctx, &leaseholdv1.CreateScheduleRequest{Name: "invoices", Spec: &leaseholdv1.ScheduleSpec{
		Queue: "billing.invoices", Kind: "invoice.run", Interval: durationpb.New(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	sc := created.GetSchedule()
	if sc.GetOwner() != owner.Identity() || sc.GetSpec().GetCatchUp() != leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_ONE || sc.GetNextTickTime() == nil {
		t.Errorf("created %v", sc)
	}
	if _, err := leaseholdv1.NewScheduleServiceClient(e.dial(otherKey)).GetSchedule(ctx, &leaseholdv1.GetScheduleRequest{Schedule: sc.GetId()}); status.Code(err) != codes.NotFound {
		t.Errorf("a principal of other queues reads it: %v, want NOT_FOUND", err)
	}

	// The scheduler fires it (real time: generous deadline).
	var runs []*leaseholdv1.ScheduleRun
	deadline := time.Now().Add(60 * time.Second)
	for len(runs) == 0 && time.Now().Before(deadline) {
		res, err := cl.ListScheduleRuns(ctx, &leaseholdv1.ListScheduleRunsRequest{Schedule: "invoices"})
		if err != nil {
			t.Fatal(err)
		}
		runs = res.GetRuns()
		time.Sleep(50 * time.Millisecond)
	}
	if len(runs) == 0 || runs[0].GetOutcome() != leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FIRED {
		t.Fatalf("no fired run within a minute: %v", runs)
	}
	job, err := e.st.GetJob(ctx, tenantA, runs[0].GetJobId())
	if err != nil || job.Metadata[store.ScheduleMetadataKey] != sc.GetId() ||
		job.Metadata[store.ScheduleTickMetadataKey] != runs[0].GetTickTime().AsTime().Format(time.RFC3339Nano) {
		t.Fatalf("fired job %+v, %v", job, err)
	}

	if _, err := e.st.RevokePrincipal(ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: owner.ID, Actor: "test"}); err != nil {
		t.Fatal(err)
	}
	var got *store.Schedule
	for time.Now().Before(deadline.Add(30 * time.Second)) {
		if got, err = e.st.GetSchedule(ctx, tenantA, sc.GetId()); err != nil {
			t.Fatal(err)
		}
		if got.Paused {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !got.Paused || got.PausedReason != store.PauseOwnerRevoked {
		t.Errorf("after the owner's revocation: paused %v (%q)", got.Paused, got.PausedReason)
	}
}

// TestOperatorsPauseResumeAndTrigger: an operator pauses, resumes and
// triggers a producer's schedule; a trigger with a request id fires once.
func TestOperatorsPauseResumeAndTrigger(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	opKey, _ := e.key(tenantA, store.RoleOperator)
	cl := leaseholdv1.NewScheduleServiceClient(e.dial(opKey))
	ctx := context.Background()
	id := e.schedule(tenantA)
	p, err := cl.PauseSchedule(ctx, &leaseholdv1.PauseScheduleRequest{Schedule: id, Reason: "incident 42"})
	if err != nil || !p.GetSchedule().GetPaused() || p.GetSchedule().GetPausedReason() != "incident 42" || p.GetSchedule().GetNextTickTime() != nil {
		t.Fatalf("pause: %v, %v", p, err)
	}
	r, err := cl.ResumeSchedule(ctx, &leaseholdv1.ResumeScheduleRequest{Schedule: id})
	if err != nil || r.GetSchedule().GetPaused() || r.GetSchedule().GetNextTickTime() == nil {
		t.Fatalf("resume: %v, %v", r, err)
	}
	t1, err := cl.TriggerSchedule(ctx, &leaseholdv1.TriggerScheduleRequest{Schedule: id, RequestId: "once"})
	if err != nil || t1.GetRun().GetJobId() == "" || t1.GetRun().GetOutcome() != leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_TRIGGERED {
		t.Fatalf("trigger: %v, %v", t1, err)
	}
	t2, err := cl.TriggerSchedule(ctx, &leaseholdv1.TriggerScheduleRequest{Schedule: id, RequestId: "once"})
	if err != nil || t2.GetRun().GetJobId() != t1.GetRun().GetJobId() {
		t.Fatalf("the same trigger again: %v, %v", t2, err)
	}
	if _, err := cl.DeleteSchedule(ctx, &leaseholdv1.DeleteScheduleRequest{Schedule: id}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("an operator deletes a schedule: %v, want PERMISSION_DENIED", err)
	}
}

// TestScheduleTicksAreCounted: the scheduler's passes count ticks fired,
// skipped and missed per queue, and record each fired tick's lag.
func TestScheduleTicksAreCounted(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(2*time.Minute + 500*time.Millisecond)
	o := newObservedWith(t, func(cfg *Config) {
		cfg.Now = func() time.Time { return now }
		cfg.SchedulePollInterval = 10 * time.Millisecond
	})
	// Due since t0+1s: ticks 1..60 s are late (missed under skip), 61..120 s
	// on time; under overlap skip only the newest fires, the others are
	// skipped.
	if _, err := o.st.CreateSchedule(t.Context(), store.CreateScheduleParams{Tenant: TenantDefault, Name: "counted",
		Spec: store.ScheduleSpec{Queue: "metered", Kind: "k", Interval: time.Second, CatchUp: store.CatchUpSkip, Overlap: store.OverlapSkip},
		Now:  t0}); err != nil {
		t.Fatal(err)
	}
	q := attrQueue("metered")
	deadline := time.Now().Add(30 * time.Second)
	for {
		ms := o.collect(t)
		fired, _ := point(ms, "leasehold.schedule.ticks", q, attribute.String("outcome", "fired"))
		skipped, _ := point(ms, "leasehold.schedule.ticks", q, attribute.String("outcome", "skipped"))
		missed, _ := point(ms, "leasehold.schedule.ticks", q, attribute.String("outcome", "missed"))
		lags, _ := point(ms, "leasehold.schedule.tick.lag", q)
		if fired == 1 && skipped == 59 && missed == 60 && lags == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fired %v, skipped %v, missed %v, lag samples %v; want 1, 59, 60, 1", fired, skipped, missed, lags)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestScheduleActionsAreAudited: create, update, pause, resume, trigger
// and delete each record an audit event with the acting principal and the
// schedule as target, like the other admin actions; a replayed trigger
// records nothing more.
func TestScheduleActionsAreAudited(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	producerKey, producer := e.key(tenantA, store.RoleProducer)
	operatorKey, operator := e.key(tenantA, store.RoleOperator)
	adminKey, _ := e.key(tenantA, store.RoleAdmin)
	prod := leaseholdv1.NewScheduleServiceClient(e.dial(producerKey))
	op := leaseholdv1.NewScheduleServiceClient(e.dial(operatorKey))
	ctx := t.Context()
	created, err := prod.CreateSchedule(ctx, &leaseholdv1.CreateScheduleRequest{Name: "nightly", Spec: &leaseholdv1.ScheduleSpec{
		Queue: "reports", Kind: "report.build", Cron: "0 2 * * *"}})
	if err != nil {
		t.Fatal(err)
	}
	id := created.GetSchedule().GetId()
	if _, err := prod.UpdateSchedule(ctx, &leaseholdv1.UpdateScheduleRequest{Schedule: id, Spec: &leaseholdv1.ScheduleSpec{
		Queue: "reports", Kind: "report.build", Cron: "30 1 * * *"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.PauseSchedule(ctx, &leaseholdv1.PauseScheduleRequest{Schedule: id, Reason: "quarter close"}); err != nil {
		t.Fatal(err)
	}
	if _, err := op.ResumeSchedule(ctx, &leaseholdv1.ResumeScheduleRequest{Schedule: id}); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second is a replay
		if _, err := op.TriggerSchedule(ctx, &leaseholdv1.TriggerScheduleRequest{Schedule: id, RequestId: "rerun-1"}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := prod.DeleteSchedule(ctx, &leaseholdv1.DeleteScheduleRequest{Schedule: id}); err != nil {
		t.Fatal(err)
	}
	events, err := leaseholdv1.NewAdminServiceClient(e.dial(adminKey)).ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	type rec struct {
		action leaseholdv1.AuditAction
		actor  string
	}
	var got []rec
	for _, ev := range events.GetEvents() {
		if ev.GetTarget() != id {
			continue
		}
		got = append(got, rec{ev.GetAction(), ev.GetActor()})
		if ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_PAUSED && !strings.Contains(ev.GetDataJson(), "quarter close") {
			t.Errorf("the pause event's data %s lacks the reason", ev.GetDataJson())
		}
	}
	slices.Reverse(got) // the log is newest first
	want := []rec{
		{leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_CREATED, producer.Identity()},
		{leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_UPDATED, producer.Identity()},
		{leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_PAUSED, operator.Identity()},
		{leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_RESUMED, operator.Identity()},
		{leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_TRIGGERED, operator.Identity()},
		{leaseholdv1.AuditAction_AUDIT_ACTION_SCHEDULE_DELETED, producer.Identity()},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("audit events of the schedule = %v, want %v", got, want)
	}
}
