package store

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// Schedules keeps schedules and fires their ticks (schedule.go has the
// model). Every method is tenant-scoped except FireDueSchedules, which
// works across tenants like the reaper. A schedule is named by its id or
// its name (idOrName).
type Schedules interface {
	// CreateSchedule stores a schedule whose first tick is FirstTick of
	// its spec. ErrScheduleLimit when the tenant already has Limit
	// schedules; ErrScheduleExists when the name is taken.
	CreateSchedule(ctx context.Context, p CreateScheduleParams) (*Schedule, error)
	// GetSchedule returns one schedule (ErrScheduleNotFound).
	GetSchedule(ctx context.Context, tenant, idOrName string) (*Schedule, error)
	// ListSchedules pages a tenant's schedules by name.
	ListSchedules(ctx context.Context, p ListSchedulesParams) (*SchedulePage, error)
	// UpdateSchedule replaces the spec and recomputes the next tick from
	// now (never a tick before now); a paused schedule stays paused.
	UpdateSchedule(ctx context.Context, p UpdateScheduleParams) (*Schedule, error)
	// SetSchedulePaused pauses (next tick cleared, reason kept) or resumes
	// (next tick recomputed from now). Repeating either is a no-op.
	SetSchedulePaused(ctx context.Context, p SetSchedulePausedParams) (*Schedule, error)
	// DeleteSchedule deletes a schedule and its runs.
	DeleteSchedule(ctx context.Context, tenant, idOrName string) error
	// TriggerSchedule creates the schedule's job now (tick = now), with
	// its run, in one transaction; idempotent by RequestID.
	TriggerSchedule(ctx context.Context, p TriggerScheduleParams) (*ScheduleRun, error)
	// ListScheduleRuns returns the newest runs, newest first.
	ListScheduleRuns(ctx context.Context, p ListScheduleRunsParams) ([]ScheduleRun, error)
	// FireDueSchedules handles up to Limit due schedules of every tenant
	// (next tick <= now), skipping rows another coordinator holds: for
	// each, DecideScheduleTicks decides, and the tick jobs, the runs and
	// the advanced high-water mark (a conditional update on the value
	// read) commit in one transaction.
	FireDueSchedules(ctx context.Context, p FireSchedulesParams) (FireSchedulesResult, error)
}

// CreateScheduleParams creates a schedule.
type CreateScheduleParams struct {
	Tenant string
	Name   string
	Spec   ScheduleSpec
	Paused bool
	// OwnerID and OwnerIdentity name the principal it fires as.
	OwnerID, OwnerIdentity string
	// Limit is the tenant's cap; 0 means ScheduleLimitDefault.
	Limit int
	Now   time.Time
}

// ListSchedulesParams pages schedules.
type ListSchedulesParams struct {
	Tenant string
	Queue  string // "" = all
	Limit  int
	// After is the last name of the previous page ("" for the first).
	After string
}

// SchedulePage is one page of schedules.
type SchedulePage struct {
	Schedules []*Schedule
	// NextAfter is the name to pass as After for the next page; "" on the
	// last page.
	NextAfter string
}

// UpdateScheduleParams replaces a schedule's spec.
type UpdateScheduleParams struct {
	Tenant   string
	IDOrName string
	Spec     ScheduleSpec
	Now      time.Time
}

// SetSchedulePausedParams pauses or resumes.
type SetSchedulePausedParams struct {
	Tenant   string
	IDOrName string
	Paused   bool
	Reason   string
	Now      time.Time
}

// TriggerScheduleParams fires a schedule now.
type TriggerScheduleParams struct {
	Tenant    string
	IDOrName  string
	RequestID string
	// IdempotencyWindow as for CreateJobs.
	IdempotencyWindow time.Duration
	Now               time.Time
}

// ListScheduleRunsParams reads runs.
type ListScheduleRunsParams struct {
	Tenant   string
	IDOrName string
	Limit    int
}

// FireSchedulesParams bounds one pass of FireDueSchedules.
type FireSchedulesParams struct {
	// Limit bounds the schedules handled in one transaction; 0 means
	// FireBatchDefault.
	Limit int
	// IdempotencyWindow as for CreateJobs.
	IdempotencyWindow time.Duration
	Now               time.Time
}

// FireBatchDefault is how many due schedules one transaction handles.
const FireBatchDefault = 200

// FiredTick is one job a tick created.
type FiredTick struct {
	Tick  time.Time
	JobID string
	// Replayed: the tick's idempotency key already named this job.
	Replayed bool
}

// FiredSchedule is what FireDueSchedules did to one schedule.
type FiredSchedule struct {
	Tenant, ScheduleID, Queue string
	Fired                     []FiredTick
	Skipped                   int
	Missed                    int64
	// Paused is why the schedule paused itself ("" if it did not).
	Paused string
	// CancelJobID is the previous run's job to cancel
	// (OverlapCancelPrevious); the caller cancels it after the commit.
	CancelJobID string
}

// FireSchedulesResult is one pass of FireDueSchedules.
type FireSchedulesResult struct {
	Schedules []FiredSchedule
	// Now is the clock the pass decided with.
	Now time.Time
	// More is true when the pass handled Limit schedules: more may be due.
	More bool
	// NextTick is, when nothing was due, the earliest tick of any
	// schedule (zero when none has one): when the next pass has work.
	NextTick time.Time
}

// DueSchedule is a due schedule as the engine read it, with what the
// decision needs beside the row.
type DueSchedule struct {
	Schedule     *Schedule
	PreviousLive bool
	Owner        ScheduleOwner
}

// ScheduleFiring is the plan for one due schedule: the decision, the
// create request of each tick that fires (in Decision.Fire order), and,
// once the engine has the jobs' ids, the row update and the runs.
type ScheduleFiring struct {
	Due      DueSchedule
	Decision ScheduleTicks
	Requests []CreateRequest
}

// PlanScheduleFiring decides a due schedule at now.
func PlanScheduleFiring(due DueSchedule, now time.Time) (ScheduleFiring, error) {
	d, err := DecideScheduleTicks(ScheduleTicksInput{Schedule: due.Schedule, Now: now, PreviousLive: due.PreviousLive, Owner: due.Owner})
	if err != nil {
		return ScheduleFiring{}, err
	}
	f := ScheduleFiring{Due: due, Decision: d}
	for _, tick := range d.Fire {
		f.Requests = append(f.Requests, TickRequest(due.Schedule, tick, ScheduleTickRequestID(due.Schedule.ID, tick)))
	}
	return f, nil
}

// ScheduleAdvance is the row update of a fired schedule: a conditional
// update that holds only while next_tick_at is still OldNext.
type ScheduleAdvance struct {
	Tenant, ID   string
	OldNext      time.Time
	Next         time.Time // zero: NULL
	LastTickAt   time.Time // zero: unchanged
	LastJobID    string    // "": unchanged
	Paused       bool
	PausedReason string
	RunSeq       int64
	// PruneRunsUpTo: runs with seq <= it are deleted.
	PruneRunsUpTo int64
}

// TickKeyConflictReason is the reason of a tick skipped because its
// idempotency key already names a different request.
const TickKeyConflictReason = "the tick's idempotency key is held by a different request"

// Finish turns the plan and the jobs created (one per Requests entry; a
// nil Job for a tick whose idempotency key conflicted) into the row
// update, the runs to insert (seq set) and the summary.
func (f ScheduleFiring) Finish(jobs []CreateResult, now time.Time) (ScheduleAdvance, []ScheduleRun, FiredSchedule) {
	sc, d := f.Due.Schedule, f.Decision
	adv := ScheduleAdvance{Tenant: sc.Tenant, ID: sc.ID, OldNext: sc.NextTickAt, Next: d.Next}
	sum := FiredSchedule{Tenant: sc.Tenant, ScheduleID: sc.ID, Queue: sc.Spec.Queue, Skipped: len(d.Skipped), Missed: d.Missed}
	if d.Pause != "" {
		adv.Next, adv.Paused, adv.PausedReason = time.Time{}, true, d.Pause
		sum.Paused = d.Pause
	}
	var runs []ScheduleRun
	add := func(r ScheduleRun) {
		r.ScheduleID, r.RecordedAt = sc.ID, now
		runs = append(runs, r)
	}
	if d.Missed > 0 {
		add(ScheduleRun{TickAt: d.FirstMissed, Outcome: RunMissed, Missed: d.Missed, Reason: "late beyond the misfire grace (catch-up " + string(sc.Spec.CatchUp) + ")"})
	}
	fi, si := 0, 0
	for fi < len(d.Fire) || si < len(d.Skipped) {
		if si < len(d.Skipped) && (fi == len(d.Fire) || d.Skipped[si].Before(d.Fire[fi])) {
			add(ScheduleRun{TickAt: d.Skipped[si], Outcome: RunSkipped, Reason: d.SkipReason})
			adv.LastTickAt = d.Skipped[si]
			si++
			continue
		}
		if jobs[fi].Job == nil {
			// The tick's idempotency key names a different request (a
			// producer used the schedule's key): the tick cannot create
			// its job, and must not hold up the schedule or the pass.
			add(ScheduleRun{TickAt: d.Fire[fi], Outcome: RunSkipped, Reason: TickKeyConflictReason})
			sum.Skipped++
			adv.LastTickAt = d.Fire[fi]
			fi++
			continue
		}
		id := jobs[fi].Job.ID
		add(ScheduleRun{TickAt: d.Fire[fi], Outcome: RunFired, JobID: id})
		sum.Fired = append(sum.Fired, FiredTick{Tick: d.Fire[fi], JobID: id, Replayed: jobs[fi].Replayed})
		adv.LastTickAt, adv.LastJobID = d.Fire[fi], id
		fi++
	}
	if d.CancelPrevious {
		sum.CancelJobID = sc.LastJobID
	}
	adv.RunSeq = sc.RunSeq
	for i := range runs {
		adv.RunSeq++
		runs[i].Seq = adv.RunSeq
	}
	adv.PruneRunsUpTo = adv.RunSeq - ScheduleRunsKept
	return adv, runs, sum
}

// scheduleSpecJSON is the stored form of a ScheduleSpec.
type scheduleSpecJSON struct {
	Queue         string            `json:"queue"`
	Kind          string            `json:"kind"`
	Payload       []byte            `json:"payload,omitempty"`
	Metadata      map[string]string `json:"metadata,omitempty"`
	Priority      int32             `json:"priority,omitempty"`
	MaxAttempts   int32             `json:"max_attempts,omitempty"`
	Cron          string            `json:"cron,omitempty"`
	TimeZone      string            `json:"time_zone,omitempty"`
	Interval      time.Duration     `json:"interval_ns,omitempty"`
	StartAt       *time.Time        `json:"start_at,omitempty"`
	EndAt         *time.Time        `json:"end_at,omitempty"`
	Jitter        time.Duration     `json:"jitter_ns,omitempty"`
	CatchUp       CatchUpPolicy     `json:"catch_up"`
	MisfireGrace  time.Duration     `json:"misfire_grace_ns"`
	CatchUpWindow time.Duration     `json:"catch_up_window_ns"`
	CatchUpMax    int               `json:"catch_up_max"`
	Overlap       OverlapPolicy     `json:"overlap"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// EncodeScheduleSpec is the stored JSON of a spec.
func EncodeScheduleSpec(s ScheduleSpec) ([]byte, error) {
	return json.Marshal(scheduleSpecJSON{
		Queue: s.Queue, Kind: s.Kind, Payload: s.Payload, Metadata: s.Metadata, Priority: s.Priority,
		MaxAttempts: s.MaxAttempts, Cron: s.Cron, TimeZone: s.TimeZone, Interval: s.Interval,
		StartAt: timePtr(s.StartAt), EndAt: timePtr(s.EndAt), Jitter: s.Jitter, CatchUp: s.CatchUp,
		MisfireGrace: s.MisfireGrace, CatchUpWindow: s.CatchUpWindow, CatchUpMax: s.CatchUpMax, Overlap: s.Overlap,
	})
}

// DecodeScheduleSpec reads what EncodeScheduleSpec wrote.
func DecodeScheduleSpec(b []byte) (ScheduleSpec, error) {
	var j scheduleSpecJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return ScheduleSpec{}, fmt.Errorf("decode schedule spec: %w", err)
	}
	s := ScheduleSpec{
		Queue: j.Queue, Kind: j.Kind, Payload: j.Payload, Metadata: j.Metadata, Priority: j.Priority,
		MaxAttempts: j.MaxAttempts, Cron: j.Cron, TimeZone: j.TimeZone, Interval: j.Interval, Jitter: j.Jitter,
		CatchUp: j.CatchUp, MisfireGrace: j.MisfireGrace, CatchUpWindow: j.CatchUpWindow, CatchUpMax: j.CatchUpMax, Overlap: j.Overlap,
	}
	if j.StartAt != nil {
		s.StartAt = j.StartAt.UTC()
	}
	if j.EndAt != nil {
		s.EndAt = j.EndAt.UTC()
	}
	return s, nil
}

// ValidateCreateSchedule checks a CreateScheduleParams (spec with
// defaults) and returns it with defaults filled in.
func ValidateCreateSchedule(p CreateScheduleParams) (CreateScheduleParams, error) {
	if err := ValidateTenant(p.Tenant); err != nil {
		return p, err
	}
	if err := ValidateScheduleName("name", p.Name); err != nil {
		return p, err
	}
	p.Spec = p.Spec.WithDefaults()
	if err := ValidateScheduleSpec("spec", p.Spec); err != nil {
		return p, err
	}
	if p.Limit <= 0 {
		p.Limit = ScheduleLimitDefault
	}
	return p, nil
}

// ValidateScheduleRef checks a schedule reference.
func ValidateScheduleRef(tenant, idOrName string) error {
	if err := ValidateTenant(tenant); err != nil {
		return err
	}
	return checkText("schedule", idOrName, NameMaxLen, true)
}

// NewSchedule is the row CreateSchedule inserts.
func NewSchedule(p CreateScheduleParams, id string, now time.Time) (*Schedule, error) {
	now = now.UTC().Truncate(time.Microsecond)
	sc := &Schedule{
		ID: id, Tenant: p.Tenant, Name: p.Name, Spec: p.Spec, Paused: p.Paused,
		OwnerID: p.OwnerID, OwnerIdentity: p.OwnerIdentity, CreatedAt: now, UpdatedAt: now,
	}
	if p.Paused {
		sc.PausedReason = "created paused"
		return sc, nil
	}
	next, err := FirstTick(p.Spec, now, now)
	sc.NextTickAt = next
	return sc, err
}

// RescheduleFromNow is sc after an update of its spec or a resume at now:
// the next tick is the first after now (never a past one again), none
// while paused.
func RescheduleFromNow(sc *Schedule, now time.Time) error {
	sc.UpdatedAt = now.UTC().Truncate(time.Microsecond)
	if sc.Paused {
		sc.NextTickAt = time.Time{}
		return nil
	}
	next, err := FirstTick(sc.Spec, sc.CreatedAt, now)
	sc.NextTickAt = next
	return err
}

// DecidePause pauses or resumes sc at now. Pausing keeps the reason and
// clears the next tick; resuming recomputes it from now. Repeating either
// changes nothing.
func DecidePause(sc *Schedule, paused bool, reason string, now time.Time) error {
	if sc.Paused == paused {
		return nil
	}
	sc.Paused = paused
	sc.PausedReason = ""
	if paused {
		sc.PausedReason = reason
		if reason == "" {
			sc.PausedReason = "paused"
		}
	}
	return RescheduleFromNow(sc, now)
}

// ValidateTrigger checks a TriggerScheduleParams.
func ValidateTrigger(p TriggerScheduleParams) error {
	if err := ValidateScheduleRef(p.Tenant, p.IDOrName); err != nil {
		return err
	}
	return checkText("request_id", p.RequestID, TriggerRequestIDMaxLen, false)
}

// PlanTrigger is the job and the run of a trigger of sc at now. The job
// names the schedule and the trigger's request id rather than a tick, so
// that a repeated trigger is the same request (and replays).
func PlanTrigger(sc *Schedule, p TriggerScheduleParams, now time.Time) (CreateRequest, ScheduleRun) {
	spec := sc.Spec.jobSpec()
	md := make(map[string]string, len(spec.Metadata)+2)
	for k, v := range spec.Metadata {
		md[k] = v
	}
	md[ScheduleMetadataKey] = sc.ID
	md[ScheduleTriggerMetadataKey] = cmp.Or(p.RequestID, "manual")
	spec.Metadata = md
	run := ScheduleRun{ScheduleID: sc.ID, Seq: sc.RunSeq + 1, TickAt: now, Outcome: RunTriggered, RecordedAt: now}
	return CreateRequest{Spec: spec, RequestID: ScheduleTriggerRequestID(sc.ID, p.RequestID)}, run
}
