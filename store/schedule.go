package store

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedules: durable rows that create a job at each tick of a cron
// expression or a fixed interval.
//
// The model. A schedule row holds its high-water mark, NextTickAt: the
// oldest tick not yet handled. Any coordinator handles a due schedule
// (NextTickAt <= now) by deciding its ticks here (DecideScheduleTicks),
// then, in ONE transaction, creating the jobs of the ticks that fire and
// advancing NextTickAt with a conditional update (WHERE next_tick_at =
// the value it read). Two coordinators that read the same row cannot both
// advance it, so a tick creates one job however many coordinators run; a
// crash before the commit leaves neither the job nor the advance. Each
// tick's job also carries an idempotency key derived from (schedule,
// tick), so a replay of the same tick resolves to the same job.
//
// Decisions are pure functions of the row, the clock and what the engine
// read beside it (is the previous run's job live, is the owner valid);
// the engines only run SQL.

// Reserved metadata keys every fired job carries.
const (
	// ScheduleMetadataKey names the schedule (its id).
	ScheduleMetadataKey = "leasehold.schedule"
	// ScheduleTickMetadataKey is the tick, RFC 3339 with nanoseconds, UTC.
	ScheduleTickMetadataKey = "leasehold.schedule_tick"
	// ScheduleTriggerMetadataKey is on a triggered job instead of the tick:
	// the trigger's request id, or "manual".
	ScheduleTriggerMetadataKey = "leasehold.schedule_trigger"
)

// Schedule bounds and defaults.
const (
	// ScheduleIntervalMin and ScheduleIntervalMax bound a fixed interval.
	ScheduleIntervalMin = time.Second
	ScheduleIntervalMax = 365 * 24 * time.Hour
	// ScheduleCronMaxLen bounds a cron expression.
	ScheduleCronMaxLen = 256
	// ScheduleJitterMax bounds the jitter.
	ScheduleJitterMax = time.Hour
	// MisfireGraceDefault is how late a tick may fire and still be on time.
	MisfireGraceDefault = time.Minute
	// MisfireGraceMax bounds MisfireGrace.
	MisfireGraceMax = time.Hour
	// CatchUpWindowDefault and CatchUpWindowMax: how far back CatchUpAll
	// fires late ticks.
	CatchUpWindowDefault = 24 * time.Hour
	CatchUpWindowMax     = 365 * 24 * time.Hour
	// CatchUpMaxDefault and CatchUpMaxLimit: how many late ticks CatchUpAll
	// fires at once.
	CatchUpMaxDefault = 100
	CatchUpMaxLimit   = 1000
	// ScheduleRunsKept is how many runs per schedule are kept.
	ScheduleRunsKept = 100
	// MissedCountMax caps how many missed ticks one decision counts one by
	// one: beyond it the schedule jumps ahead and records the cap.
	MissedCountMax = 100_000
	// ScheduleLimitDefault is the default per-tenant cap on schedules.
	ScheduleLimitDefault = 10_000
	// TriggerRequestIDMaxLen bounds a TriggerSchedule request id.
	TriggerRequestIDMaxLen = 200
)

// CatchUpPolicy says what a schedule does with ticks later than its
// misfire grace.
type CatchUpPolicy string

// The catch-up policies.
const (
	// CatchUpSkip: late ticks are missed.
	CatchUpSkip CatchUpPolicy = "skip"
	// CatchUpOne: late ticks fire one job together (the newest tick's).
	CatchUpOne CatchUpPolicy = "one"
	// CatchUpAll: each late tick within the window fires, at most
	// CatchUpMax of them (the newest).
	CatchUpAll CatchUpPolicy = "all"
)

// OverlapPolicy says what a tick does while the previous run's job is
// live.
type OverlapPolicy string

// The overlap policies.
const (
	OverlapAllow          OverlapPolicy = "allow"
	OverlapSkip           OverlapPolicy = "skip"
	OverlapCancelPrevious OverlapPolicy = "cancel_previous"
)

// ScheduleSpec is a schedule's definition.
type ScheduleSpec struct {
	Queue       string
	Kind        string
	Payload     []byte
	Metadata    map[string]string
	Priority    int32
	MaxAttempts int32
	// Cron or Interval: exactly one is set.
	Cron     string
	TimeZone string // IANA name; "" = UTC
	Interval time.Duration
	// StartAt and EndAt bound the ticks; zero = unbounded.
	StartAt, EndAt time.Time
	Jitter         time.Duration
	CatchUp        CatchUpPolicy
	MisfireGrace   time.Duration
	CatchUpWindow  time.Duration
	CatchUpMax     int
	Overlap        OverlapPolicy
}

// WithDefaults returns s with unset policies and bounds filled in.
func (s ScheduleSpec) WithDefaults() ScheduleSpec {
	if s.CatchUp == "" {
		s.CatchUp = CatchUpOne
	}
	if s.Overlap == "" {
		s.Overlap = OverlapAllow
	}
	if s.MisfireGrace == 0 {
		s.MisfireGrace = MisfireGraceDefault
	}
	if s.CatchUpWindow == 0 {
		s.CatchUpWindow = CatchUpWindowDefault
	}
	if s.CatchUpMax == 0 {
		s.CatchUpMax = CatchUpMaxDefault
	}
	s.StartAt = s.StartAt.UTC()
	s.EndAt = s.EndAt.UTC()
	return s
}

// Schedule is a stored schedule.
type Schedule struct {
	ID     string
	Tenant string
	Name   string
	Spec   ScheduleSpec
	Paused bool
	// PausedReason says why it is paused (an operator's reason, or the
	// coordinator's).
	PausedReason string
	// NextTickAt is the high-water mark: the oldest tick not yet handled.
	// Zero when paused or past EndAt.
	NextTickAt time.Time
	LastTickAt time.Time
	LastJobID  string
	// OwnerID is the id of the principal it fires as ("" with --auth
	// none); OwnerIdentity its identity for display.
	OwnerID       string
	OwnerIdentity string
	// RunSeq is the sequence of its newest run.
	RunSeq    int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// ScheduleRunOutcome is what happened at a tick.
type ScheduleRunOutcome string

// The run outcomes.
const (
	RunFired     ScheduleRunOutcome = "fired"
	RunSkipped   ScheduleRunOutcome = "skipped"
	RunMissed    ScheduleRunOutcome = "missed"
	RunTriggered ScheduleRunOutcome = "triggered"
)

// ScheduleRun is one recorded tick (or, for RunMissed, Missed ticks from
// TickAt on).
type ScheduleRun struct {
	ScheduleID string
	// Seq orders a schedule's runs.
	Seq        int64
	TickAt     time.Time
	Outcome    ScheduleRunOutcome
	JobID      string
	Missed     int64
	Reason     string
	RecordedAt time.Time
}

// cronParser is robfig/cron's standard parser with optional seconds first
// (6 fields) and descriptors (@daily, @every 1h).
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor)

// tickSource computes a spec's ticks.
type tickSource struct {
	sched    cron.Schedule // nil for an interval
	loc      *time.Location
	interval time.Duration
	anchor   time.Time // interval ticks are anchor + k*interval
}

// ValidateScheduleSpec checks a spec after WithDefaults; field prefixes
// the field names ("spec").
func ValidateScheduleSpec(field string, s ScheduleSpec) error {
	if err := ValidateSpec(field, s.jobSpec()); err != nil {
		return err
	}
	for _, k := range []string{ScheduleMetadataKey, ScheduleTickMetadataKey, ScheduleTriggerMetadataKey} {
		if _, ok := s.Metadata[k]; ok {
			return Invalid(field+".metadata", fmt.Sprintf("key %q is set by the coordinator on every fired job", k))
		}
	}
	if len(s.Metadata) > MetadataMaxEntries-2 {
		return Invalid(field+".metadata", fmt.Sprintf("must have at most %d entries (two are added to each job)", MetadataMaxEntries-2))
	}
	switch {
	case s.Cron == "" && s.Interval == 0:
		return Invalid(field+".cron", "one of cron and interval is required")
	case s.Cron != "" && s.Interval != 0:
		return Invalid(field+".interval", "must not be set with cron")
	case s.Interval != 0 && (s.Interval < ScheduleIntervalMin || s.Interval > ScheduleIntervalMax):
		return Invalid(field+".interval", "must be between 1s and 365 days")
	case s.Interval != 0 && s.TimeZone != "":
		return Invalid(field+".time_zone", "applies to cron only")
	}
	if s.Cron != "" {
		if err := checkText(field+".cron", s.Cron, ScheduleCronMaxLen, true); err != nil {
			return err
		}
		if up := strings.ToUpper(strings.TrimSpace(s.Cron)); strings.HasPrefix(up, "TZ=") || strings.HasPrefix(up, "CRON_TZ=") {
			return Invalid(field+".cron", "must not name a time zone: use time_zone")
		}
		if _, err := cronParser.Parse(s.Cron); err != nil {
			return Invalid(field+".cron", "must be a cron expression (5 fields, or 6 with seconds first): "+err.Error())
		}
		if _, err := loadZone(s.TimeZone); err != nil {
			return Invalid(field+".time_zone", "must be an IANA time zone such as Europe/Paris")
		}
	}
	if !s.StartAt.IsZero() && !s.EndAt.IsZero() && !s.EndAt.After(s.StartAt) {
		return Invalid(field+".end_time", "must be after start_time")
	}
	if s.Jitter < 0 || s.Jitter > ScheduleJitterMax {
		return Invalid(field+".jitter", "must be between 0 and 1h")
	}
	if s.Interval != 0 && s.Jitter >= s.Interval {
		return Invalid(field+".jitter", "must be less than the interval")
	}
	switch s.CatchUp {
	case CatchUpSkip, CatchUpOne, CatchUpAll:
	default:
		return Invalid(field+".catch_up", "must be skip, one or all")
	}
	switch s.Overlap {
	case OverlapAllow, OverlapSkip, OverlapCancelPrevious:
	default:
		return Invalid(field+".overlap", "must be allow, skip or cancel_previous")
	}
	if s.MisfireGrace < time.Second || s.MisfireGrace > MisfireGraceMax {
		return Invalid(field+".misfire_grace", "must be between 1s and 1h")
	}
	if s.CatchUpWindow < 0 || s.CatchUpWindow > CatchUpWindowMax {
		return Invalid(field+".catch_up_window", "must be between 0 and 365 days")
	}
	if s.CatchUpMax < 0 || s.CatchUpMax > CatchUpMaxLimit {
		return Invalid(field+".catch_up_max", fmt.Sprintf("must be in [0, %d]", CatchUpMaxLimit))
	}
	return nil
}

// ValidateScheduleName checks a schedule's name.
func ValidateScheduleName(field, name string) error {
	if !ValidName(name) {
		return Invalid(field, nameRule)
	}
	return nil
}

func loadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	return time.LoadLocation(name)
}

// jobSpec is the job every tick creates, before its tick's metadata.
func (s ScheduleSpec) jobSpec() JobSpec {
	return JobSpec{
		Queue: s.Queue, Kind: s.Kind, Payload: s.Payload, Metadata: s.Metadata,
		Priority: s.Priority, MaxAttempts: s.MaxAttempts,
	}
}

// ticks returns the spec's tick source; anchor is the interval's origin
// when StartAt is unset (the schedule's creation).
func (s ScheduleSpec) ticks(anchor time.Time) (*tickSource, error) {
	if s.Interval > 0 {
		if !s.StartAt.IsZero() {
			anchor = s.StartAt
		}
		return &tickSource{interval: s.Interval, anchor: anchor.UTC().Truncate(time.Microsecond)}, nil
	}
	sched, err := cronParser.Parse(s.Cron)
	if err != nil {
		return nil, Invalid("spec.cron", err.Error())
	}
	loc, err := loadZone(s.TimeZone)
	if err != nil {
		return nil, Invalid("spec.time_zone", err.Error())
	}
	return &tickSource{sched: sched, loc: loc}, nil
}

// next returns the first tick strictly after t (zero if there is none).
//
// Cron ticks follow wall-clock time in the zone. Where clocks jump
// forward, a tick whose wall time falls in the skipped span fires once, at
// the instant of the jump (robfig/cron would skip it). Where clocks go
// back, a wall time that occurs twice fires at its first occurrence only
// (robfig/cron would fire both).
func (ts *tickSource) next(t time.Time) time.Time {
	if ts.sched == nil {
		if t.Before(ts.anchor) {
			return ts.anchor
		}
		k := int64(t.Sub(ts.anchor)/ts.interval) + 1
		return ts.anchor.Add(time.Duration(k) * ts.interval)
	}
	t = t.In(ts.loc)
	for range 4 * 366 { // a repeated tick is skipped at most once a day
		c := ts.sched.Next(t)
		if c.IsZero() {
			return time.Time{}
		}
		if j, ok := ts.gapTick(t, c); ok {
			return j.UTC()
		}
		if !repeatedWallTime(c) {
			return c.UTC()
		}
		t = c
	}
	return time.Time{}
}

// gapTick finds a forward clock jump in (t, c] whose skipped wall times
// hold a tick, and returns the jump's instant.
func (ts *tickSource) gapTick(t, c time.Time) (time.Time, bool) {
	cur := t
	for range 8 {
		_, end := cur.ZoneBounds()
		if end.IsZero() || end.After(c) {
			return time.Time{}, false
		}
		_, offBefore := cur.Zone()
		_, offAfter := end.Zone()
		if offAfter > offBefore && end.After(t) {
			gap := time.Duration(offAfter-offBefore) * time.Second
			// The skipped wall times are the instants [end, end+gap) in the
			// zone's old offset.
			old := time.FixedZone("", offBefore)
			if g := ts.sched.Next(end.Add(-time.Nanosecond).In(old)); !g.IsZero() && g.Before(end.Add(gap)) {
				return end, true
			}
		}
		cur = end
	}
	return time.Time{}, false
}

// repeatedWallTime reports whether c's wall time already occurred earlier
// (the second pass through an hour the clocks went back over).
func repeatedWallTime(c time.Time) bool {
	start, _ := c.ZoneBounds()
	if start.IsZero() {
		return false
	}
	_, offNow := c.Zone()
	_, offPrev := start.Add(-time.Nanosecond).Zone()
	if offPrev <= offNow {
		return false
	}
	back := time.Duration(offPrev-offNow) * time.Second
	return c.Before(start.Add(back))
}

// FirstTick is the first tick of s strictly after now and not before its
// start, or zero when there is none before its end. anchor is the
// schedule's creation time (the origin of an interval without a start).
func FirstTick(s ScheduleSpec, anchor, now time.Time) (time.Time, error) {
	ts, err := s.ticks(anchor)
	if err != nil {
		return time.Time{}, err
	}
	from := now
	if !s.StartAt.IsZero() && s.StartAt.After(now) {
		from = s.StartAt.Add(-time.Nanosecond)
	}
	return ts.bounded(s, ts.next(from)), nil
}

// bounded returns t, or zero when it is past the spec's end.
func (ts *tickSource) bounded(s ScheduleSpec, t time.Time) time.Time {
	if !s.EndAt.IsZero() && t.After(s.EndAt) {
		return time.Time{}
	}
	return t
}

// ScheduleOwner is what the engine read of a schedule's owner at a tick.
type ScheduleOwner struct {
	// Checked is false when the schedule has no owner (--auth none).
	Checked bool
	// Missing or Revoked: the owner can fire nothing.
	Missing, Revoked bool
	// Queues are the owner's queue patterns (nil: every queue).
	Queues []string
}

// ScheduleTicksInput is what DecideScheduleTicks decides from.
type ScheduleTicksInput struct {
	Schedule *Schedule
	Now      time.Time
	// PreviousLive: the job of the schedule's last fired run is queued or
	// leased.
	PreviousLive bool
	Owner        ScheduleOwner
}

// ScheduleTicks is the decision for a due schedule.
type ScheduleTicks struct {
	// Fire are the ticks that create a job, oldest first.
	Fire []time.Time
	// Skipped are the ticks not fired because of the overlap policy, with
	// their reason.
	Skipped    []time.Time
	SkipReason string
	// Missed counts late ticks not fired, from FirstMissed on.
	Missed      int64
	FirstMissed time.Time
	// Next is the new high-water mark (zero: the schedule has no more
	// ticks). It is always after the input's Now.
	Next time.Time
	// CancelPrevious: cancel the previous run's job (OverlapCancelPrevious
	// and it is live).
	CancelPrevious bool
	// Pause, when set, is why the schedule pauses itself; nothing fires.
	Pause string
}

// Pause reasons the coordinator sets.
const (
	PauseOwnerRevoked = "owner key revoked"
	PauseOwnerScope   = "queue is outside the owner's queues"
)

// DecideScheduleTicks decides what a due schedule does now: which of its
// ticks in [NextTickAt, Now] fire, are skipped or missed, and its next
// high-water mark. A tick late by at most MisfireGrace is on time and
// fires under every catch-up policy; later ones follow the policy.
func DecideScheduleTicks(in ScheduleTicksInput) (ScheduleTicks, error) {
	sc := in.Schedule
	s := sc.Spec.WithDefaults()
	var d ScheduleTicks
	switch {
	case in.Owner.Checked && (in.Owner.Missing || in.Owner.Revoked):
		d.Pause = PauseOwnerRevoked
		return d, nil
	case in.Owner.Checked && !MatchQueue(in.Owner.Queues, s.Queue):
		d.Pause = PauseOwnerScope
		return d, nil
	}
	ts, err := s.ticks(sc.CreatedAt)
	if err != nil {
		return d, err
	}
	now := in.Now
	onTimeFrom := now.Add(-s.MisfireGrace)
	windowFrom := now.Add(-s.CatchUpWindow)
	var onTime, late []time.Time
	t, prev := sc.NextTickAt, time.Time{}
	for lateSeen := 0; !t.IsZero() && !t.After(now) && !ts.bounded(s, t).IsZero(); {
		switch {
		case !t.Before(onTimeFrom):
			onTime = append(onTime, t)
		case s.CatchUp == CatchUpAll && !t.Before(windowFrom):
			late = append(late, t)
			if len(late) > s.CatchUpMax {
				d.miss(late[0], 1)
				late = late[1:]
			}
		case s.CatchUp == CatchUpOne:
			if len(late) > 0 {
				d.miss(late[0], 1)
			}
			late = append(late[:0], t)
		default:
			d.miss(t, 1)
		}
		if t.Before(onTimeFrom) {
			lateSeen++
			if lateSeen >= MissedCountMax && !prev.IsZero() {
				// Years of one-second ticks are not counted one by one:
				// jump to just before the ticks that may still fire (the
				// missed count becomes a floor).
				lateSeen = 0
				keep := 0
				switch s.CatchUp {
				case CatchUpSkip:
				case CatchUpOne:
					keep = 2
				case CatchUpAll:
					keep = s.CatchUpMax + 1
				}
				to := onTimeFrom.Add(-time.Duration(keep) * t.Sub(prev))
				if s.CatchUp == CatchUpAll && to.Before(windowFrom) {
					to = windowFrom
				}
				if nt := ts.next(to.Add(-time.Nanosecond)); nt.After(t) {
					prev, t = time.Time{}, nt
					continue
				}
			}
		}
		prev, t = t, ts.next(t)
	}
	d.Next = ts.bounded(s, t)
	if !d.Next.IsZero() && !d.Next.After(now) {
		d.Next = ts.bounded(s, ts.next(now))
	}
	candidates := slices.Concat(late, onTime)
	switch {
	case len(candidates) == 0:
	case s.Overlap == OverlapAllow:
		d.Fire = candidates
	case s.Overlap == OverlapSkip && in.PreviousLive:
		d.Skipped, d.SkipReason = candidates, "previous run live"
	default:
		// Skip or cancel-previous: only the newest tick fires; each older
		// one would overlap it.
		last := len(candidates) - 1
		d.Fire = candidates[last:]
		if last > 0 {
			d.Skipped, d.SkipReason = candidates[:last], "superseded by a later tick"
		}
		d.CancelPrevious = s.Overlap == OverlapCancelPrevious && in.PreviousLive
	}
	return d, nil
}

func (d *ScheduleTicks) miss(t time.Time, n int64) {
	if d.Missed == 0 || t.Before(d.FirstMissed) {
		d.FirstMissed = t
	}
	d.Missed += n
}

// ScheduleJitter is the delay of tick's job: a value in [0, jitter) fixed
// by (schedule id, tick), so that every coordinator computes the same job
// (and the same idempotency fingerprint) for a tick.
func ScheduleJitter(scheduleID string, tick time.Time, jitter time.Duration) time.Duration {
	if jitter <= 0 {
		return 0
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(scheduleID))
	_, _ = h.Write([]byte(tick.UTC().Format(time.RFC3339Nano)))
	return time.Duration(h.Sum64() % uint64(jitter)).Truncate(time.Microsecond)
}

// ScheduleTickRequestID is the idempotency key of a tick's job.
func ScheduleTickRequestID(scheduleID string, tick time.Time) string {
	return "schedule:" + scheduleID + ":" + tick.UTC().Format(time.RFC3339Nano)
}

// ScheduleTriggerRequestID is the idempotency key of a triggered job; ""
// (not idempotent) without a request id.
func ScheduleTriggerRequestID(scheduleID, requestID string) string {
	if requestID == "" {
		return ""
	}
	return "schedule:" + scheduleID + ":trigger:" + requestID
}

// TickRequest is the job a tick of sc creates: the spec's job, available
// at tick + jitter, with metadata naming the schedule and the tick, and
// the tick's idempotency key (requestID overrides it, for triggers).
func TickRequest(sc *Schedule, tick time.Time, requestID string) CreateRequest {
	s := sc.Spec
	spec := s.jobSpec()
	md := make(map[string]string, len(s.Metadata)+2)
	for k, v := range s.Metadata {
		md[k] = v
	}
	md[ScheduleMetadataKey] = sc.ID
	md[ScheduleTickMetadataKey] = tick.UTC().Format(time.RFC3339Nano)
	spec.Metadata = md
	spec.RunAt = tick.Add(ScheduleJitter(sc.ID, tick, s.Jitter)).UTC()
	return CreateRequest{Spec: spec, RequestID: requestID}
}

// ErrScheduleLimit is returned when a tenant already has as many schedules
// as allowed.
var ErrScheduleLimit = errors.New("schedule limit reached")

// ErrScheduleNotFound is returned when a schedule does not exist (or
// belongs to another tenant). It matches ErrNotFound.
var ErrScheduleNotFound error = &notFound{what: "schedule"}

// ErrScheduleExists is returned when a schedule of the same name exists.
// It matches ErrAlreadyExists.
var ErrScheduleExists = fmt.Errorf("schedule name is taken: %w", ErrAlreadyExists)
