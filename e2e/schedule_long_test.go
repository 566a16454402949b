//go:build long

package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/store"
)

// longInt reads an integer knob of a long test from the environment
// (to try a smaller run by hand), or def.
func longInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q is not a positive integer", name, v)
	}
	return n
}

// TestLongSchedulesFireEachTickOnceAcrossACrash: three `leasehold serve`
// processes on one PostgreSQL database, 1,000 schedules each firing every
// second for 60 s, and one coordinator SIGKILLed mid-run and restarted:
// every tick of every schedule in the window has exactly one job, none
// missing and none doubled. The tick lag (due time to the job's creation
// in its firing transaction) is reported, not asserted: this machine is
// shared and noisy.
//
// LEASEHOLD_LONG_SCHEDULES and LEASEHOLD_LONG_SECONDS shrink the run for a
// try by hand.
func TestLongSchedulesFireEachTickOnceAcrossACrash(t *testing.T) {
	schedules := longInt(t, "LEASEHOLD_LONG_SCHEDULES", 1000)
	seconds := longInt(t, "LEASEHOLD_LONG_SECONDS", 60)
	url := pgtest.Schema(t)
	// The first process migrates; the others find the schema up to date.
	procs := []*testserver.Process{testserver.StartProcess(t, "--database-url", url)}
	for range 2 {
		procs = append(procs, testserver.StartProcess(t, "--database-url", url))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(seconds)*time.Second+10*time.Minute)
	t.Cleanup(cancel)

	// Every schedule's ticks are the whole seconds [t0, t0 + seconds): the
	// window starts once every schedule exists, outside what is measured.
	t0 := time.Now().Add(20 * time.Second).Truncate(time.Second)
	end := t0.Add(time.Duration(seconds-1) * time.Second)
	conns := make([]leaseholdv1.ScheduleServiceClient, len(procs))
	for i, p := range procs {
		conns[i] = leaseholdv1.NewScheduleServiceClient(p.Dial(t))
	}
	var wg sync.WaitGroup
	errs := make(chan error, schedules)
	next := make(chan int)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				_, err := conns[w%len(conns)].CreateSchedule(ctx, &leaseholdv1.CreateScheduleRequest{
					Name: fmt.Sprintf("every-second-%04d", i),
					Spec: &leaseholdv1.ScheduleSpec{
						Queue: "ticks", Kind: "tick", Interval: durationpb.New(time.Second),
						StartTime: timestamppb.New(t0), EndTime: timestamppb.New(end),
					},
				})
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range schedules {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create schedule: %v", err)
	}
	if time.Now().After(t0) {
		t.Fatalf("creating %d schedules took past the window's start; raise the lead time", schedules)
	}
	t.Logf("%d schedules created; window %s .. %s", schedules, t0.Format(time.RFC3339), end.Format(time.RFC3339))

	// SIGKILL the second coordinator a third of the way in, restart it at
	// two thirds.
	sleepUntil(ctx, t0.Add(time.Duration(seconds)*time.Second/3))
	procs[1].Kill()
	<-procs[1].Exited()
	killedAt := time.Now()
	sleepUntil(ctx, t0.Add(2*time.Duration(seconds)*time.Second/3))
	procs[1] = testserver.StartProcess(t, "--database-url", url)
	t.Logf("coordinator 2 SIGKILLed at %s, restarted at %s", killedAt.Format(time.RFC3339Nano), time.Now().Format(time.RFC3339Nano))

	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	// Every schedule ends after its last tick: wait until none has a next
	// tick left.
	deadline := end.Add(5 * time.Minute)
	for {
		var pending int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM schedules WHERE next_tick_at IS NOT NULL`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		if pending == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d schedules still have ticks to fire 5 minutes after the window", pending)
		}
		sleepUntil(ctx, time.Now().Add(500*time.Millisecond))
	}
	for _, p := range procs {
		p.Signal(syscall.SIGTERM)
	}

	// Exactly one job per (schedule, tick): count duplicates and gaps.
	var jobs, distinct, outside int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT (metadata->>$1, metadata->>$2)),
		count(*) FILTER (WHERE (metadata->>$2)::timestamptz NOT BETWEEN $3 AND $4)
		FROM jobs WHERE queue = 'ticks'`,
		store.ScheduleMetadataKey, store.ScheduleTickMetadataKey, t0, end).Scan(&jobs, &distinct, &outside); err != nil {
		t.Fatal(err)
	}
	want := schedules * seconds
	t.Logf("jobs %d, distinct (schedule, tick) %d, outside the window %d, want %d", jobs, distinct, outside, want)
	if jobs != want || distinct != want || outside != 0 {
		rows, _ := db.Query(ctx, `SELECT metadata->>$1, metadata->>$2, count(*) FROM jobs WHERE queue = 'ticks'
			GROUP BY 1, 2 HAVING count(*) <> 1 LIMIT 10`, store.ScheduleMetadataKey, store.ScheduleTickMetadataKey)
		for rows != nil && rows.Next() {
			var sc, tick string
			var n int
			_ = rows.Scan(&sc, &tick, &n)
			t.Logf("doubled: schedule %s tick %s has %d jobs", sc, tick, n)
		}
		if rows != nil {
			rows.Close()
		}
		t.Fatalf("every tick must have exactly one job: %d jobs, %d distinct ticks, %d outside, want %d", jobs, distinct, outside, want)
	}
	var perSchedule int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM (SELECT metadata->>$1 FROM jobs WHERE queue = 'ticks'
		GROUP BY 1 HAVING count(*) = $2) s`, store.ScheduleMetadataKey, seconds).Scan(&perSchedule); err != nil {
		t.Fatal(err)
	}
	if perSchedule != schedules {
		t.Fatalf("%d of %d schedules have %d jobs each", perSchedule, schedules, seconds)
	}
	var runsMissed, runsSkipped int
	if err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE outcome = 'missed'), count(*) FILTER (WHERE outcome = 'skipped')
		FROM schedule_runs`).Scan(&runsMissed, &runsSkipped); err != nil {
		t.Fatal(err)
	}
	if runsMissed != 0 || runsSkipped != 0 {
		t.Errorf("runs recorded %d missed and %d skipped, want none", runsMissed, runsSkipped)
	}

	// The lag from each tick to its job's creation time (the firing
	// transaction's clock; its commit follows in the same pass). Reported.
	var p50, p99, maxLag float64
	if err := db.QueryRow(ctx, `SELECT
		percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), max(lag)
		FROM (SELECT extract(epoch FROM created_at - (metadata->>$1)::timestamptz) AS lag FROM jobs WHERE queue = 'ticks') l`,
		store.ScheduleTickMetadataKey).Scan(&p50, &p99, &maxLag); err != nil {
		t.Fatal(err)
	}
	var p99Crash float64
	if err := db.QueryRow(ctx, `SELECT percentile_cont(0.99) WITHIN GROUP (ORDER BY lag)
		FROM (SELECT extract(epoch FROM created_at - (metadata->>$1)::timestamptz) AS lag FROM jobs
		WHERE queue = 'ticks' AND (metadata->>$1)::timestamptz BETWEEN $2 AND $3) l`,
		store.ScheduleTickMetadataKey, killedAt.Add(-5*time.Second), killedAt.Add(5*time.Second)).Scan(&p99Crash); err != nil {
		t.Fatal(err)
	}
	t.Logf("tick lag (due -> job created): p50 %.3fs, p99 %.3fs, max %.3fs; p99 of the ticks within 5s of the SIGKILL %.3fs",
		p50, p99, maxLag, p99Crash)
}

// sleepUntil waits until t or ctx's end.
func sleepUntil(ctx context.Context, t time.Time) {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
	case <-timer.C:
	}
}
