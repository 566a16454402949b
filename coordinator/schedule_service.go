package coordinator

import (
	"cmp"
	"context"
	"encoding/base64"
	"log/slog"
	"slices"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Request bounds of ScheduleService.
const (
	// ScheduleRunsPageDefault and ScheduleRunsPageMax apply to
	// ListScheduleRuns (the store keeps store.ScheduleRunsKept runs).
	ScheduleRunsPageDefault = 20
	ScheduleRunsPageMax     = store.ScheduleRunsKept
)

// scheduleService is the schedule API: a thin shell that validates, checks
// the caller's queue scope, calls the store and encodes. A schedule whose
// queue is outside a scoped caller's queues answers NOT_FOUND, like a
// missing one.
type scheduleService struct {
	leaseholdv1.UnimplementedScheduleServiceServer
	c *Coordinator
}

func (s *scheduleService) CreateSchedule(ctx context.Context, req *leaseholdv1.CreateScheduleRequest) (*leaseholdv1.CreateScheduleResponse, error) {
	c := s.c
	p, err := c.v.CreateSchedule(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if err := checkQueue(ctx, "spec.queue", p.Spec.Queue); err != nil {
		return nil, err
	}
	cl := callerFrom(ctx)
	p.Tenant, p.OwnerID, p.OwnerIdentity, p.Limit, p.Now = cl.tenant, cl.id, cl.identity, c.cfg.SchedulesPerTenantMax, c.now()
	sc, err := c.store.CreateSchedule(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditScheduleCreated, sc.ID, scheduleAuditData(sc))
	return &leaseholdv1.CreateScheduleResponse{Schedule: toSchedule(sc)}, nil
}

// scheduleAuditData is what a schedule's audit events record of it.
func scheduleAuditData(sc *store.Schedule) map[string]any {
	return map[string]any{"name": sc.Name, "queue": sc.Spec.Queue}
}

// scheduleInScope reads a schedule the caller names, answering NOT_FOUND
// for one outside its queues.
func (c *Coordinator) scheduleInScope(ctx context.Context, ref string) (*store.Schedule, error) {
	if err := scheduleRef("schedule", ref); err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	sc, err := c.store.GetSchedule(ctx, tenantFrom(ctx), ref)
	if err == nil && !inScope(ctx, sc.Spec.Queue) {
		err = store.ErrScheduleNotFound
	}
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	return sc, nil
}

func (s *scheduleService) GetSchedule(ctx context.Context, req *leaseholdv1.GetScheduleRequest) (*leaseholdv1.GetScheduleResponse, error) {
	sc, err := s.c.scheduleInScope(ctx, req.GetSchedule())
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.GetScheduleResponse{Schedule: toSchedule(sc)}, nil
}

func (s *scheduleService) ListSchedules(ctx context.Context, req *leaseholdv1.ListSchedulesRequest) (*leaseholdv1.ListSchedulesResponse, error) {
	c := s.c
	p, err := c.v.ListSchedules(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if p.Queue != "" {
		if err := checkQueue(ctx, "queue", p.Queue); err != nil {
			return nil, err
		}
	}
	p.Tenant = tenantFrom(ctx)
	page, err := c.store.ListSchedules(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	page.Schedules = slices.DeleteFunc(page.Schedules, func(sc *store.Schedule) bool { return !inScope(ctx, sc.Spec.Queue) })
	out := &leaseholdv1.ListSchedulesResponse{}
	for _, sc := range page.Schedules {
		out.Schedules = append(out.Schedules, toSchedule(sc))
	}
	if page.NextAfter != "" {
		out.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(page.NextAfter))
	}
	return out, nil
}

func (s *scheduleService) UpdateSchedule(ctx context.Context, req *leaseholdv1.UpdateScheduleRequest) (*leaseholdv1.UpdateScheduleResponse, error) {
	c := s.c
	p, err := c.v.UpdateSchedule(req)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if _, err := c.scheduleInScope(ctx, p.IDOrName); err != nil {
		return nil, err
	}
	if err := checkQueue(ctx, "spec.queue", p.Spec.Queue); err != nil {
		return nil, err
	}
	p.Tenant, p.Now = tenantFrom(ctx), c.now()
	sc, err := c.store.UpdateSchedule(ctx, p)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditScheduleUpdated, sc.ID, scheduleAuditData(sc))
	return &leaseholdv1.UpdateScheduleResponse{Schedule: toSchedule(sc)}, nil
}

func (c *Coordinator) setSchedulePaused(ctx context.Context, ref string, paused bool, reason string) (*leaseholdv1.Schedule, error) {
	if err := store.ValidateReason(reason); err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if _, err := c.scheduleInScope(ctx, ref); err != nil {
		return nil, err
	}
	sc, err := c.store.SetSchedulePaused(ctx, store.SetSchedulePausedParams{
		Tenant: tenantFrom(ctx), IDOrName: ref, Paused: paused, Reason: reason, Now: c.now(),
	})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if paused {
		c.audit(ctx, store.AuditSchedulePaused, sc.ID, map[string]any{"name": sc.Name, "reason": reason})
	} else {
		c.audit(ctx, store.AuditScheduleResumed, sc.ID, map[string]any{"name": sc.Name})
	}
	return toSchedule(sc), nil
}

func (s *scheduleService) PauseSchedule(ctx context.Context, req *leaseholdv1.PauseScheduleRequest) (*leaseholdv1.PauseScheduleResponse, error) {
	sc, err := s.c.setSchedulePaused(ctx, req.GetSchedule(), true, req.GetReason())
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.PauseScheduleResponse{Schedule: sc}, nil
}

func (s *scheduleService) ResumeSchedule(ctx context.Context, req *leaseholdv1.ResumeScheduleRequest) (*leaseholdv1.ResumeScheduleResponse, error) {
	sc, err := s.c.setSchedulePaused(ctx, req.GetSchedule(), false, "")
	if err != nil {
		return nil, err
	}
	return &leaseholdv1.ResumeScheduleResponse{Schedule: sc}, nil
}

func (s *scheduleService) DeleteSchedule(ctx context.Context, req *leaseholdv1.DeleteScheduleRequest) (*leaseholdv1.DeleteScheduleResponse, error) {
	c := s.c
	sc, err := c.scheduleInScope(ctx, req.GetSchedule())
	if err != nil {
		return nil, err
	}
	if err := c.store.DeleteSchedule(ctx, sc.Tenant, sc.ID); err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	c.audit(ctx, store.AuditScheduleDeleted, sc.ID, scheduleAuditData(sc))
	return &leaseholdv1.DeleteScheduleResponse{}, nil
}

func (s *scheduleService) TriggerSchedule(ctx context.Context, req *leaseholdv1.TriggerScheduleRequest) (*leaseholdv1.TriggerScheduleResponse, error) {
	c := s.c
	if err := store.ValidateText("request_id", req.GetRequestId(), store.TriggerRequestIDMaxLen, false); err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	sc, err := c.scheduleInScope(ctx, req.GetSchedule())
	if err != nil {
		return nil, err
	}
	run, err := c.store.TriggerSchedule(ctx, store.TriggerScheduleParams{
		Tenant: sc.Tenant, IDOrName: sc.ID, RequestID: req.GetRequestId(),
		IdempotencyWindow: c.cfg.IdempotencyWindow, Now: c.now(),
	})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	if run.Reason == "" { // not a replay
		c.audit(ctx, store.AuditScheduleTriggered, sc.ID, map[string]any{
			"name": sc.Name, "job_id": run.JobID, "request_id": req.GetRequestId(),
		})
		c.core.metrics.jobCreated(ctx, sc.Tenant, sc.Spec.Queue, 1)
		c.core.activity.created.Add(1)
		c.core.dispatcher.Wake(sc.Tenant, sc.Spec.Queue)
	}
	return &leaseholdv1.TriggerScheduleResponse{Run: toScheduleRun(*run)}, nil
}

func (s *scheduleService) ListScheduleRuns(ctx context.Context, req *leaseholdv1.ListScheduleRunsRequest) (*leaseholdv1.ListScheduleRunsResponse, error) {
	c := s.c
	size, err := pageSize("page_size", req.GetPageSize(), ScheduleRunsPageDefault, ScheduleRunsPageMax)
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	sc, err := c.scheduleInScope(ctx, req.GetSchedule())
	if err != nil {
		return nil, err
	}
	runs, err := c.store.ListScheduleRuns(ctx, store.ListScheduleRunsParams{Tenant: sc.Tenant, IDOrName: sc.ID, Limit: size})
	if err != nil {
		return nil, toStatus(ctx, c.log, err)
	}
	out := &leaseholdv1.ListScheduleRunsResponse{}
	for _, r := range runs {
		out.Runs = append(out.Runs, toScheduleRun(r))
	}
	return out, nil
}

// schedulesFired is told of each scheduler pass after its commit: it
// counts ticks, records their lag, wakes dispatch for the new jobs,
// cancels the previous runs that OverlapCancelPrevious replaced, and logs
// schedules that paused themselves.
func (c *Coordinator) schedulesFired(ctx context.Context, res store.FireSchedulesResult) {
	committed := c.wallNow()
	for _, f := range res.Schedules {
		fresh := 0
		for _, t := range f.Fired {
			if !t.Replayed {
				fresh++
			}
			c.core.metrics.scheduleTickLag(ctx, f.Tenant, f.Queue, committed.Sub(t.Tick))
		}
		c.core.metrics.scheduleTicked(ctx, f.Tenant, f.Queue, "fired", int64(len(f.Fired)))
		c.core.metrics.scheduleTicked(ctx, f.Tenant, f.Queue, "skipped", int64(f.Skipped))
		c.core.metrics.scheduleTicked(ctx, f.Tenant, f.Queue, "missed", f.Missed)
		if fresh > 0 {
			c.core.metrics.jobCreated(ctx, f.Tenant, f.Queue, fresh)
			c.core.activity.created.Add(int64(fresh))
			c.core.dispatcher.Wake(f.Tenant, f.Queue)
		}
		if f.Paused != "" {
			c.log.WarnContext(ctx, "schedule paused itself", slog.String("tenant", f.Tenant),
				slog.String("schedule_id", f.ScheduleID), slog.String("reason", f.Paused))
		}
		if f.CancelJobID != "" {
			c.cancelPreviousRun(ctx, f)
		}
	}
}

// cancelPreviousRun cancels the job a newer tick replaced, as CancelJob
// would (a leased job's holder is told). It runs after the tick's commit:
// should it fail, the new run still stands and the old one runs on.
func (c *Coordinator) cancelPreviousRun(ctx context.Context, f store.FiredSchedule) {
	reason := "replaced by a later run of schedule " + f.ScheduleID
	job, err := c.store.RequestCancel(ctx, store.RequestCancelParams{
		Tenant: f.Tenant, JobID: f.CancelJobID, Reason: reason, Actor: "schedule:" + f.ScheduleID, Now: c.now(),
	})
	if err != nil {
		c.log.DebugContext(ctx, "previous run not cancelled", slog.String("job_id", f.CancelJobID), slog.Any("error", err))
		return
	}
	if job.State == store.JobStateLeased && job.CancelRequested {
		c.notifyCancel(f.Tenant, job, reason)
	}
	c.core.watches.notify(f.Tenant, job.ID)
}

// Decoding.

func scheduleRef(field, ref string) error {
	return store.ValidateText(field, ref, store.NameMaxLen, true)
}

var catchUpFromProto = map[leaseholdv1.CatchUpPolicy]store.CatchUpPolicy{
	leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_UNSPECIFIED: "",
	leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_SKIP:        store.CatchUpSkip,
	leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_ONE:         store.CatchUpOne,
	leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_ALL:         store.CatchUpAll,
}

var overlapFromProto = map[leaseholdv1.OverlapPolicy]store.OverlapPolicy{
	leaseholdv1.OverlapPolicy_OVERLAP_POLICY_UNSPECIFIED:     "",
	leaseholdv1.OverlapPolicy_OVERLAP_POLICY_ALLOW:           store.OverlapAllow,
	leaseholdv1.OverlapPolicy_OVERLAP_POLICY_SKIP:            store.OverlapSkip,
	leaseholdv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_PREVIOUS: store.OverlapCancelPrevious,
}

// scheduleSpec decodes a ScheduleSpec (required) with defaults; the store
// checks the bounds, with the same field names.
func (v validator) scheduleSpec(field string, r *leaseholdv1.ScheduleSpec) (store.ScheduleSpec, error) {
	var s store.ScheduleSpec
	if r == nil {
		return s, store.Invalid(field, "is required")
	}
	if err := v.blob(field+".payload", r.GetPayload()); err != nil {
		return s, err
	}
	var err error
	if s.Interval, err = duration(field+".interval", r.GetInterval()); err != nil {
		return s, err
	}
	if s.Jitter, err = duration(field+".jitter", r.GetJitter()); err != nil {
		return s, err
	}
	if s.MisfireGrace, err = duration(field+".misfire_grace", r.GetMisfireGrace()); err != nil {
		return s, err
	}
	if s.CatchUpWindow, err = duration(field+".catch_up_window", r.GetCatchUpWindow()); err != nil {
		return s, err
	}
	if s.StartAt, err = timestamp(field+".start_time", r.GetStartTime()); err != nil {
		return s, err
	}
	if s.EndAt, err = timestamp(field+".end_time", r.GetEndTime()); err != nil {
		return s, err
	}
	var ok bool
	if s.CatchUp, ok = catchUpFromProto[r.GetCatchUp()]; !ok {
		return s, store.Invalid(field+".catch_up", "must be a known CatchUpPolicy")
	}
	if s.Overlap, ok = overlapFromProto[r.GetOverlap()]; !ok {
		return s, store.Invalid(field+".overlap", "must be a known OverlapPolicy")
	}
	s.Queue, s.Kind, s.Payload, s.Metadata = r.GetQueue(), r.GetKind(), r.GetPayload(), r.GetMetadata()
	s.Priority, s.MaxAttempts, s.Cron, s.TimeZone = r.GetPriority(), r.GetMaxAttempts(), r.GetCron(), r.GetTimeZone()
	s.CatchUpMax = int(r.GetCatchUpMax())
	s = s.WithDefaults()
	return s, store.ValidateScheduleSpec(field, s)
}

// CreateSchedule decodes a CreateScheduleRequest.
func (v validator) CreateSchedule(r *leaseholdv1.CreateScheduleRequest) (store.CreateScheduleParams, error) {
	p := store.CreateScheduleParams{Name: r.GetName(), Paused: r.GetPaused()}
	if err := store.ValidateScheduleName("name", p.Name); err != nil {
		return p, err
	}
	var err error
	p.Spec, err = v.scheduleSpec("spec", r.GetSpec())
	return p, err
}

// UpdateSchedule decodes an UpdateScheduleRequest.
func (v validator) UpdateSchedule(r *leaseholdv1.UpdateScheduleRequest) (store.UpdateScheduleParams, error) {
	p := store.UpdateScheduleParams{IDOrName: r.GetSchedule()}
	if err := scheduleRef("schedule", p.IDOrName); err != nil {
		return p, err
	}
	var err error
	p.Spec, err = v.scheduleSpec("spec", r.GetSpec())
	return p, err
}

// ListSchedules decodes a ListSchedulesRequest.
func (v validator) ListSchedules(r *leaseholdv1.ListSchedulesRequest) (store.ListSchedulesParams, error) {
	var p store.ListSchedulesParams
	if err := optionalName("queue", r.GetQueue()); err != nil {
		return p, err
	}
	size, err := pageSize("page_size", r.GetPageSize(), PageSizeDefault, PageSizeMax)
	if err != nil {
		return p, err
	}
	if err := pageToken("page_token", r.GetPageToken()); err != nil {
		return p, err
	}
	after, err := base64.RawURLEncoding.DecodeString(r.GetPageToken())
	if err != nil {
		return p, store.Invalid("page_token", "must be a next_page_token from an earlier ListSchedules")
	}
	p.Queue, p.Limit, p.After = r.GetQueue(), size, string(after)
	return p, nil
}

// Encoding.

func toSchedule(sc *store.Schedule) *leaseholdv1.Schedule {
	s := sc.Spec
	spec := &leaseholdv1.ScheduleSpec{
		Queue: s.Queue, Kind: s.Kind, Payload: s.Payload, Metadata: s.Metadata, Priority: s.Priority,
		MaxAttempts: s.MaxAttempts, Cron: s.Cron, TimeZone: s.TimeZone, Interval: dur(s.Interval),
		StartTime: ts(s.StartAt), EndTime: ts(s.EndAt), Jitter: dur(s.Jitter), MisfireGrace: dur(s.MisfireGrace),
		CatchUpWindow: dur(s.CatchUpWindow), CatchUpMax: int32(min(s.CatchUpMax, store.CatchUpMaxLimit)),
	}
	for k, v := range catchUpFromProto {
		if v == s.CatchUp && v != "" {
			spec.CatchUp = k
		}
	}
	for k, v := range overlapFromProto {
		if v == s.Overlap && v != "" {
			spec.Overlap = k
		}
	}
	return &leaseholdv1.Schedule{
		Id: sc.ID, Name: sc.Name, Spec: spec, Paused: sc.Paused, PausedReason: sc.PausedReason,
		NextTickTime: ts(sc.NextTickAt), LastTickTime: ts(sc.LastTickAt), LastJobId: sc.LastJobID,
		Owner: cmp.Or(sc.OwnerIdentity, anonymousIdentity), CreateTime: ts(sc.CreatedAt), UpdateTime: ts(sc.UpdatedAt),
	}
}

var runOutcomes = map[store.ScheduleRunOutcome]leaseholdv1.ScheduleRunOutcome{
	store.RunFired:     leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_FIRED,
	store.RunSkipped:   leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_SKIPPED,
	store.RunMissed:    leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_MISSED,
	store.RunTriggered: leaseholdv1.ScheduleRunOutcome_SCHEDULE_RUN_OUTCOME_TRIGGERED,
}

func toScheduleRun(r store.ScheduleRun) *leaseholdv1.ScheduleRun {
	return &leaseholdv1.ScheduleRun{
		TickTime: ts(r.TickAt), Outcome: runOutcomes[r.Outcome], JobId: r.JobID, MissedTicks: r.Missed,
		RecordTime: ts(r.RecordedAt), Reason: r.Reason,
	}
}
