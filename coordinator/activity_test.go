package coordinator

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/store/sqlite"
)

func TestActivityCountsWhatTheCoordinatorDid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, sqlite.Config{Path: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	// An hour-long interval keeps the ticker out of the way; the test reads
	// the counters and logs them itself.
	c, err := New(Config{Store: st, Logger: logs.Logger(slog.LevelDebug), ActivityLogInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, c)
	jobs := leaseholdv1.NewJobServiceClient(conn)
	workers := leaseholdv1.NewWorkerServiceClient(conn)

	create := &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"}, RequestId: "r1"}
	for range 2 { // the second is a replay
		if _, err := jobs.CreateJob(ctx, create); err != nil {
			t.Fatal(err)
		}
	}
	second, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: second.GetJob().GetId()}); err != nil {
		t.Fatal(err)
	}
	claimed, err := workers.Claim(ctx, &leaseholdv1.ClaimRequest{
		WorkerId: "w1", Queues: []string{"q"}, LeaseDuration: durationpb.New(time.Minute),
	})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("claim: %d jobs, %v", len(claimed.GetJobs()), err)
	}
	if _, err := workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: claimed.GetJobs()[0].GetToken()}); err != nil {
		t.Fatal(err)
	}

	got := c.core.activity.read()
	want := activityCounts{created: 2, replayed: 1, leased: 1, succeeded: 1, cancelled: 1}
	if got != want {
		t.Fatalf("activity = %+v, want %+v", got, want)
	}
	if last := c.core.reporter.runOnce(ctx, got); last != got {
		t.Fatalf("an unchanged reading must not log or move: %+v", last)
	}
	if strings.Contains(logs.String(), "activity (totals since start)") {
		t.Fatalf("logged an unchanged reading:\n%s", logs.String())
	}
	c.core.reporter.runOnce(ctx, activityCounts{})
	out := logs.String()
	for _, want := range []string{"jobs_created=2", "creates_replayed=1", "leases_granted=1", "succeeded=1", "cancelled=1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("activity line lacks %s:\n%s", want, out)
		}
	}
}
