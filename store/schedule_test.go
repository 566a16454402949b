package store

import (
	"errors"
	"testing"
	"time"
)

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// ticksFrom lists n ticks of spec strictly after from.
func ticksFrom(t *testing.T, s ScheduleSpec, from time.Time, n int) []time.Time {
	t.Helper()
	s = s.WithDefaults()
	if err := ValidateScheduleSpec("spec", s); err != nil {
		t.Fatal(err)
	}
	ts, err := s.ticks(from)
	if err != nil {
		t.Fatal(err)
	}
	var out []time.Time
	for cur := from; len(out) < n; {
		cur = ts.next(cur)
		if cur.IsZero() {
			break
		}
		out = append(out, cur)
	}
	return out
}

func wantTicks(t *testing.T, got []time.Time, want ...time.Time) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d ticks %v, want %d %v", len(got), got, len(want), want)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Errorf("tick %d = %s, want %s", i, got[i].UTC(), want[i].UTC())
		}
	}
}

func TestScheduleTicksAcrossDST(t *testing.T) {
	t.Parallel()
	ny := mustZone(t, "America/New_York")
	spec := func(cron string) ScheduleSpec {
		return ScheduleSpec{Queue: "q", Kind: "k", Cron: cron, TimeZone: "America/New_York"}
	}
	t.Run("a tick in the skipped hour fires once right after the jump", func(t *testing.T) {
		t.Parallel()
		// 2026-03-08 02:00 EST jumps to 03:00 EDT: 02:30 does not exist.
		got := ticksFrom(t, spec("30 2 * * *"), time.Date(2026, 3, 7, 12, 0, 0, 0, ny), 3)
		wantTicks(t, got,
			time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), // 03:00 EDT, the jump
			time.Date(2026, 3, 9, 6, 30, 0, 0, time.UTC),
			time.Date(2026, 3, 10, 6, 30, 0, 0, time.UTC))
		if got[0].In(ny).Hour() != 3 {
			t.Errorf("the skipped tick fired at %s local, want 03:00", got[0].In(ny))
		}
	})
	t.Run("an hourly tick of the skipped hour and the next hour's fire once together", func(t *testing.T) {
		t.Parallel()
		got := ticksFrom(t, spec("0 * * * *"), time.Date(2026, 3, 8, 0, 30, 0, 0, ny), 3)
		wantTicks(t, got,
			time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC), // 01:00 EST
			time.Date(2026, 3, 8, 7, 0, 0, 0, time.UTC), // 03:00 EDT (02:00 and 03:00, once)
			time.Date(2026, 3, 8, 8, 0, 0, 0, time.UTC)) // 04:00 EDT
	})
	t.Run("a tick in the repeated hour fires once", func(t *testing.T) {
		t.Parallel()
		// 2026-11-01 02:00 EDT goes back to 01:00 EST: 01:30 happens twice.
		got := ticksFrom(t, spec("30 1 * * *"), time.Date(2026, 10, 31, 12, 0, 0, 0, ny), 2)
		wantTicks(t, got,
			time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), // 01:30 EDT
			time.Date(2026, 11, 2, 6, 30, 0, 0, time.UTC)) // next day, 01:30 EST
	})
	t.Run("every half hour through the repeated hour fires each wall time once", func(t *testing.T) {
		t.Parallel()
		got := ticksFrom(t, spec("*/30 * * * *"), time.Date(2026, 11, 1, 0, 45, 0, 0, ny), 4)
		wantTicks(t, got,
			time.Date(2026, 11, 1, 5, 0, 0, 0, time.UTC),  // 01:00 EDT
			time.Date(2026, 11, 1, 5, 30, 0, 0, time.UTC), // 01:30 EDT
			time.Date(2026, 11, 1, 7, 0, 0, 0, time.UTC),  // 02:00 EST
			time.Date(2026, 11, 1, 7, 30, 0, 0, time.UTC))
	})
	t.Run("fixed intervals ignore the zone", func(t *testing.T) {
		t.Parallel()
		start := time.Date(2026, 3, 8, 6, 0, 0, 0, time.UTC)
		got := ticksFrom(t, ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Hour, StartAt: start}, start, 3)
		wantTicks(t, got, start.Add(time.Hour), start.Add(2*time.Hour), start.Add(3*time.Hour))
	})
}

func TestScheduleTicksOnALeapDay(t *testing.T) {
	t.Parallel()
	got := ticksFrom(t, ScheduleSpec{Queue: "q", Kind: "k", Cron: "0 12 29 2 *"}, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), 2)
	wantTicks(t, got, time.Date(2028, 2, 29, 12, 0, 0, 0, time.UTC), time.Date(2032, 2, 29, 12, 0, 0, 0, time.UTC))
	// Six fields, seconds first.
	got = ticksFrom(t, ScheduleSpec{Queue: "q", Kind: "k", Cron: "15 0 0 * * *"}, time.Date(2028, 2, 28, 1, 0, 0, 0, time.UTC), 2)
	wantTicks(t, got, time.Date(2028, 2, 29, 0, 0, 15, 0, time.UTC), time.Date(2028, 3, 1, 0, 0, 15, 0, time.UTC))
}

// hourly is a schedule due since t0, every hour on the hour (UTC).
func hourly(t0 time.Time, catchUp CatchUpPolicy, mut func(*ScheduleSpec)) *Schedule {
	s := ScheduleSpec{Queue: "q", Kind: "k", Cron: "0 * * * *", CatchUp: catchUp}
	if mut != nil {
		mut(&s)
	}
	return &Schedule{ID: "s1", Spec: s.WithDefaults(), NextTickAt: t0, CreatedAt: t0.Add(-time.Hour)}
}

func TestScheduleCatchUpAfterThreeDaysDown(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	now := t0.Add(72*time.Hour + 30*time.Second) // the tick at t0+72h is 30 s late: on time
	h := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Hour) }
	cases := []struct {
		name        string
		sc          *Schedule
		fire        []time.Time
		missed      int64
		firstMissed time.Time
	}{
		{"skip fires only the on-time tick", hourly(t0, CatchUpSkip, nil), []time.Time{h(72)}, 72, h(0)},
		{"one fires the newest late tick and the on-time one", hourly(t0, CatchUpOne, nil), []time.Time{h(71), h(72)}, 71, h(0)},
		{"all fires each late tick within the window", hourly(t0, CatchUpAll, nil),
			append(hours(h, 49, 71), h(72)), 49, h(0)},
		{"all fires at most catch_up_max late ticks", hourly(t0, CatchUpAll, func(s *ScheduleSpec) { s.CatchUpMax = 5 }),
			append(hours(h, 67, 71), h(72)), 67, h(0)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, err := DecideScheduleTicks(ScheduleTicksInput{Schedule: c.sc, Now: now})
			if err != nil {
				t.Fatal(err)
			}
			wantTicks(t, d.Fire, c.fire...)
			if d.Missed != c.missed || !d.FirstMissed.Equal(c.firstMissed) {
				t.Errorf("missed %d from %s, want %d from %s", d.Missed, d.FirstMissed, c.missed, c.firstMissed)
			}
			if !d.Next.Equal(h(73)) {
				t.Errorf("next = %s, want %s", d.Next, h(73))
			}
		})
	}
	t.Run("every second for three days jumps ahead instead of counting each", func(t *testing.T) {
		t.Parallel()
		sc := &Schedule{ID: "s2", Spec: ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Second, CatchUp: CatchUpSkip}.WithDefaults(),
			NextTickAt: t0, CreatedAt: t0.Add(-time.Second)}
		now := t0.Add(72 * time.Hour)
		d, err := DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: now})
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Fire) != 61 || !d.Fire[0].Equal(now.Add(-time.Minute)) || !d.Fire[60].Equal(now) {
			t.Errorf("fired %d ticks (%v … ), want the 61 of the last minute", len(d.Fire), d.Fire[:min(2, len(d.Fire))])
		}
		if d.Missed < MissedCountMax || !d.Next.Equal(now.Add(time.Second)) {
			t.Errorf("missed %d, next %s; want at least %d and %s", d.Missed, d.Next, MissedCountMax, now.Add(time.Second))
		}
	})
}

func hours(h func(int) time.Time, from, to int) []time.Time {
	var out []time.Time
	for i := from; i <= to; i++ {
		out = append(out, h(i))
	}
	return out
}

func TestScheduleOnTimeTicksFireUnderEveryPolicy(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, p := range []CatchUpPolicy{CatchUpSkip, CatchUpOne, CatchUpAll} {
		sc := &Schedule{ID: "s", Spec: ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Second, CatchUp: p}.WithDefaults(),
			NextTickAt: t0, CreatedAt: t0.Add(-time.Second)}
		// A slow coordinator finds three ticks due at once, all within the
		// misfire grace: each fires.
		d, err := DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: t0.Add(2500 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		wantTicks(t, d.Fire, t0, t0.Add(time.Second), t0.Add(2*time.Second))
		if d.Missed != 0 || !d.Next.Equal(t0.Add(3*time.Second)) {
			t.Errorf("%s: missed %d, next %s", p, d.Missed, d.Next)
		}
	}
}

func TestScheduleOverlap(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	sched := func(o OverlapPolicy) *Schedule {
		return &Schedule{ID: "s", Spec: ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Second, Overlap: o}.WithDefaults(),
			NextTickAt: t0, CreatedAt: t0.Add(-time.Second)}
	}
	now := t0.Add(1500 * time.Millisecond) // two ticks due
	t.Run("skip fires nothing while the previous run is live", func(t *testing.T) {
		t.Parallel()
		d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sched(OverlapSkip), Now: now, PreviousLive: true})
		wantTicks(t, d.Fire)
		wantTicks(t, d.Skipped, t0, t0.Add(time.Second))
		if d.SkipReason != "previous run live" || !d.Next.Equal(t0.Add(2*time.Second)) {
			t.Errorf("reason %q, next %s", d.SkipReason, d.Next)
		}
	})
	t.Run("skip fires the newest tick once the previous run ended", func(t *testing.T) {
		t.Parallel()
		d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sched(OverlapSkip), Now: now})
		wantTicks(t, d.Fire, t0.Add(time.Second))
		wantTicks(t, d.Skipped, t0)
	})
	t.Run("cancel previous fires and cancels the live run", func(t *testing.T) {
		t.Parallel()
		d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sched(OverlapCancelPrevious), Now: t0, PreviousLive: true})
		wantTicks(t, d.Fire, t0)
		if !d.CancelPrevious {
			t.Error("the previous run is not cancelled")
		}
	})
	t.Run("allow fires every tick", func(t *testing.T) {
		t.Parallel()
		d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sched(OverlapAllow), Now: now, PreviousLive: true})
		wantTicks(t, d.Fire, t0, t0.Add(time.Second))
	})
}

func TestSchedulePauseAndResume(t *testing.T) {
	t.Parallel()
	created := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	spec := ScheduleSpec{Queue: "q", Kind: "k", Cron: "*/5 * * * *"}.WithDefaults()
	first, err := FirstTick(spec, created, created)
	if err != nil || !first.Equal(created.Add(5*time.Minute)) {
		t.Fatalf("first tick %s, %v", first, err)
	}
	// Paused at 10:02, resumed at 11:03: the ticks while paused are not
	// caught up; the next is the first after the resume.
	resumed := created.Add(63 * time.Minute)
	next, _ := FirstTick(spec, created, resumed)
	if !next.Equal(created.Add(65 * time.Minute)) {
		t.Errorf("after resume the next tick is %s, want 11:05", next)
	}
	// An update at 11:03 with a NextTickAt still at 10:05 (the schedule
	// was due) never fires 10:05 again: the update recomputes from now.
	sc := &Schedule{ID: "s", Spec: spec, NextTickAt: next, CreatedAt: created}
	d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: resumed})
	if len(d.Fire) != 0 {
		t.Errorf("a resumed schedule fired %v before its next tick", d.Fire)
	}
}

func TestScheduleStartAndEnd(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	spec := ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Minute, StartAt: now.Add(time.Hour), EndAt: now.Add(time.Hour + 2*time.Minute)}.WithDefaults()
	first, _ := FirstTick(spec, now, now)
	if !first.Equal(spec.StartAt) {
		t.Fatalf("first tick %s, want the start %s", first, spec.StartAt)
	}
	sc := &Schedule{ID: "s", Spec: spec, NextTickAt: first, CreatedAt: now}
	d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: spec.EndAt.Add(time.Hour)})
	// Each of the three ticks is an hour late (past the grace): under the
	// default policy (one) the newest fires and the others are missed;
	// nothing follows the end.
	wantTicks(t, d.Fire, spec.EndAt)
	if d.Missed != 2 || !d.Next.IsZero() {
		t.Errorf("missed %d, next %s; want 2 and none", d.Missed, d.Next)
	}
}

func TestScheduleOwnerRevokedPauses(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	sc := &Schedule{ID: "s", Spec: ScheduleSpec{Queue: "billing.x", Kind: "k", Interval: time.Second}.WithDefaults(), NextTickAt: t0, CreatedAt: t0}
	d, _ := DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: t0, Owner: ScheduleOwner{Checked: true, Revoked: true}})
	if d.Pause != PauseOwnerRevoked || len(d.Fire) != 0 {
		t.Errorf("revoked owner: %+v", d)
	}
	d, _ = DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: t0, Owner: ScheduleOwner{Checked: true, Queues: []string{"emails"}}})
	if d.Pause != PauseOwnerScope {
		t.Errorf("owner out of scope: %+v", d)
	}
	d, _ = DecideScheduleTicks(ScheduleTicksInput{Schedule: sc, Now: t0, Owner: ScheduleOwner{Checked: true, Queues: []string{"billing.*"}}})
	if d.Pause != "" || len(d.Fire) != 1 {
		t.Errorf("owner in scope: %+v", d)
	}
}

func TestScheduleJitterIsFixedPerTick(t *testing.T) {
	t.Parallel()
	tick := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	seen := map[time.Duration]bool{}
	for i := range 50 {
		tk := tick.Add(time.Duration(i) * time.Minute)
		j := ScheduleJitter("s", tk, 10*time.Second)
		if j < 0 || j >= 10*time.Second || j != ScheduleJitter("s", tk, 10*time.Second) {
			t.Fatalf("jitter %s", j)
		}
		seen[j] = true
	}
	if len(seen) < 40 {
		t.Errorf("only %d distinct jitters of 50", len(seen))
	}
	sc := &Schedule{ID: "s", Spec: ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Minute, Jitter: 10 * time.Second,
		Metadata: map[string]string{"a": "b"}}}
	r := TickRequest(sc, tick, ScheduleTickRequestID(sc.ID, tick))
	if r.Spec.Metadata[ScheduleMetadataKey] != "s" || r.Spec.Metadata[ScheduleTickMetadataKey] != "2026-05-01T10:00:00Z" ||
		r.Spec.Metadata["a"] != "b" || len(sc.Spec.Metadata) != 1 {
		t.Errorf("metadata %v (spec's %v)", r.Spec.Metadata, sc.Spec.Metadata)
	}
	if !r.Spec.RunAt.Equal(tick.Add(ScheduleJitter("s", tick, 10*time.Second))) || r.RequestID != "schedule:s:2026-05-01T10:00:00Z" {
		t.Errorf("run at %s, request id %q", r.Spec.RunAt, r.RequestID)
	}
}

func TestValidateScheduleSpec(t *testing.T) {
	t.Parallel()
	base := ScheduleSpec{Queue: "q", Kind: "k"}
	cases := []struct {
		name  string
		mut   func(*ScheduleSpec)
		field string // "" = valid
	}{
		{"five fields", func(s *ScheduleSpec) { s.Cron = "*/5 * * * *" }, ""},
		{"six fields with seconds", func(s *ScheduleSpec) { s.Cron = "*/10 * * * * *" }, ""},
		{"a descriptor", func(s *ScheduleSpec) { s.Cron = "@daily"; s.TimeZone = "Europe/Paris" }, ""},
		{"seven fields", func(s *ScheduleSpec) { s.Cron = "* * * * * * *" }, "spec.cron"},
		{"a zone in the expression", func(s *ScheduleSpec) { s.Cron = "TZ=UTC * * * * *" }, "spec.cron"},
		{"an unknown zone", func(s *ScheduleSpec) { s.Cron = "* * * * *"; s.TimeZone = "Mars/Olympus" }, "spec.time_zone"},
		{"neither", func(*ScheduleSpec) {}, "spec.cron"},
		{"both", func(s *ScheduleSpec) { s.Cron = "* * * * *"; s.Interval = time.Minute }, "spec.interval"},
		{"an interval under a second", func(s *ScheduleSpec) { s.Interval = 500 * time.Millisecond }, "spec.interval"},
		{"jitter as long as the interval", func(s *ScheduleSpec) { s.Interval = time.Minute; s.Jitter = time.Minute }, "spec.jitter"},
		{"end before start", func(s *ScheduleSpec) {
			s.Interval = time.Minute
			s.StartAt = time.Unix(100, 0)
			s.EndAt = time.Unix(50, 0)
		}, "spec.end_time"},
		{"a reserved metadata key", func(s *ScheduleSpec) {
			s.Interval = time.Minute
			s.Metadata = map[string]string{ScheduleTickMetadataKey: "x"}
		}, "spec.metadata"},
		{"a bad queue", func(s *ScheduleSpec) { s.Interval = time.Minute; s.Queue = "" }, "spec.queue"},
		{"too many catch-ups", func(s *ScheduleSpec) { s.Interval = time.Minute; s.CatchUpMax = 5000 }, "spec.catch_up_max"},
	}
	for _, c := range cases {
		s := base
		c.mut(&s)
		err := ValidateScheduleSpec("spec", s.WithDefaults())
		var ie *InvalidError
		switch {
		case c.field == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.field != "" && (!errors.As(err, &ie) || ie.Field != c.field):
			t.Errorf("%s: %v, want a violation of %s", c.name, err, c.field)
		}
	}
}
