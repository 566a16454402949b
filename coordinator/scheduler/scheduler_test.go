package scheduler

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunOnceFiresDueTicksAndReportsThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := st.CreateSchedule(ctx, store.CreateScheduleParams{Tenant: "t", Name: "s",
		Spec: store.ScheduleSpec{Queue: "q", Kind: "k", Interval: time.Second}, Now: t0}); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(2500 * time.Millisecond)
	var fired atomic.Int64
	s := New(Config{Store: st, Batch: 1, Now: func() time.Time { return now },
		Fired: func(_ context.Context, res store.FireSchedulesResult) {
			for _, f := range res.Schedules {
				fired.Add(int64(len(f.Fired)))
			}
		}})
	more, err := s.RunOnce(ctx)
	if err != nil || !more || fired.Load() != 2 {
		t.Fatalf("first pass: more %v, err %v, fired %d; want a full batch and ticks 1 and 2", more, err, fired.Load())
	}
	if more, err := s.RunOnce(ctx); err != nil || more || fired.Load() != 2 {
		t.Fatalf("second pass: more %v, err %v, fired %d; want nothing", more, err, fired.Load())
	}
}

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	s := New(Config{Store: st, PollInterval: time.Millisecond})
	s.Start(ctx)
	s.Start(ctx) // no-op
	<-s.Started()
	s.Stop()
	s.Stop() // safe twice
}

func TestNextWaitSleepsUntilTheEarliestTickWithinThePoll(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	poll := time.Second
	for _, tc := range []struct {
		name string
		res  store.FireSchedulesResult
		err  error
		want time.Duration
	}{
		{"failed pass", store.FireSchedulesResult{}, errors.New("down"), poll},
		{"full batch", store.FireSchedulesResult{Now: now, More: true}, nil, 0},
		{"fired some", store.FireSchedulesResult{Now: now, Schedules: []store.FiredSchedule{{}}}, nil, 0},
		{"no schedules", store.FireSchedulesResult{Now: now}, nil, poll},
		{"tick soon", store.FireSchedulesResult{Now: now, NextTick: now.Add(300 * time.Millisecond)}, nil, 300 * time.Millisecond},
		{"tick later than the poll", store.FireSchedulesResult{Now: now, NextTick: now.Add(time.Hour)}, nil, poll},
		{"due but locked elsewhere", store.FireSchedulesResult{Now: now, NextTick: now.Add(-time.Second)}, nil, passGapMin},
	} {
		if got := nextWait(tc.res, tc.err, poll); got != tc.want {
			t.Errorf("%s: wait %s, want %s", tc.name, got, tc.want)
		}
	}
}
