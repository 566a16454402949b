package scheduler

import (
	"context"
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
