package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// makeDead makes n dead jobs in queue through the API: created with one
// attempt, claimed and failed.
func makeDead(ctx context.Context, t *testing.T, c clients, queue string, n int) {
	t.Helper()
	for i := 0; i < n; i += 500 {
		var reqs []*leaseholdv1.CreateJobRequest
		for j := i; j < min(n, i+500); j++ {
			sp := spec(queue, fmt.Sprint(j))
			sp.MaxAttempts = 1
			reqs = append(reqs, &leaseholdv1.CreateJobRequest{Job: sp})
		}
		if _, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: reqs}); err != nil {
			t.Fatal(err)
		}
	}
	for dead := 0; dead < n; {
		claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "poison", Queues: []string{queue}, MaxJobs: 100,
			LeaseDuration: durationpb.New(time.Minute), Wait: durationpb.New(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		for _, lj := range claim.GetJobs() {
			if _, err := c.workers.Retry(ctx, &leaseholdv1.RetryRequest{Token: lj.GetToken(),
				Error: &leaseholdv1.JobError{Code: "UPSTREAM_DOWN", Message: "upstream unavailable", Retryable: true}}); err != nil {
				t.Fatal(err)
			}
			dead++
		}
	}
}

// TestSIGKILLMidOperationIsResumedByAnotherCoordinator: a replay of N dead
// jobs runs on one coordinator process; it is killed with SIGKILL in the
// middle; the other process takes the operation over once the lease
// expires and finishes it. Every dead job is replayed exactly once (one
// job with replay_of = it), the operation counts N acted, and a dead job
// made after the start is not touched.
func TestSIGKILLMidOperationIsResumedByAnotherCoordinator(t *testing.T) {
	t.Parallel()
	const n = 2000
	url := pgtest.Schema(t)
	// Paced slowly (400 jobs/s in chunks of 100), so the kill lands mid-way.
	flags := []string{"--database-url", url, "--operation-rate", "400", "--operation-chunk", "100",
		"--operation-lease", "2s", "--operation-poll-interval", "100ms"}
	a := testserver.StartProcess(t, flags...)
	ca := newClients(a.Dial(t))
	ops := leaseholdv1.NewOperationServiceClient(a.Dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	makeDead(ctx, t, ca, "poisoned", n)

	started, err := ops.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue = poisoned", Reason: "upstream fixed"})
	if err != nil {
		t.Fatal(err)
	}
	op := started.GetOperation()
	if op.GetCounts().GetMatched() != n {
		t.Fatalf("matched %d, want %d", op.GetCounts().GetMatched(), n)
	}
	makeDead(ctx, t, ca, "poisoned", 1) // after the start: not in the match

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var holderA string
	// Not waitFor's 10s: a loaded machine may take longer to start.
	for deadline := time.Now().Add(time.Minute); ; {
		var acted int64
		if err := conn.QueryRow(ctx, `SELECT acted, lease_owner FROM operations WHERE id = $1`, op.GetId()).Scan(&acted, &holderA); err != nil {
			t.Fatal(err)
		}
		if acted >= 300 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d replayed after a minute", acted)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// B starts only now, so that A is the one running the operation.
	b := testserver.StartProcess(t, flags...)
	a.Kill()
	a.Wait() //nolint:errcheck // killed on purpose
	var acted int64
	if err := conn.QueryRow(ctx, `SELECT acted FROM operations WHERE id = $1`, op.GetId()).Scan(&acted); err != nil {
		t.Fatal(err)
	}
	if acted >= n {
		t.Fatalf("the operation finished (%d acted) before the kill: nothing to resume", acted)
	}
	t.Logf("killed %s with %d of %d replayed", holderA, acted, n)

	opsB := leaseholdv1.NewOperationServiceClient(b.Dial(t))
	var done *leaseholdv1.Operation
	for done == nil || !done.GetDone() {
		w, err := opsB.WaitOperation(ctx, &leaseholdv1.WaitOperationRequest{Name: op.GetName(), Timeout: durationpb.New(30 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		done = w.GetOperation()
	}
	if done.GetState() != leaseholdv1.OperationState_OPERATION_STATE_SUCCEEDED || done.GetCounts().GetActed() != n ||
		done.GetCounts().GetRemaining() != 0 || done.GetCounts().GetSkippedChanged() != 0 {
		t.Fatalf("after the resume: %v", done)
	}
	var holderB string
	if err := conn.QueryRow(ctx, `SELECT lease_owner FROM operations WHERE id = $1`, op.GetId()).Scan(&holderB); err != nil {
		t.Fatal(err)
	}
	if holderB == holderA {
		t.Errorf("the operation was finished by %s, the killed coordinator", holderB)
	}

	// Every matching dead job was replayed exactly once; the late one not.
	var deadJobs, once, notOnce, replayedAs int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state = 'dead'`).Scan(&deadJobs); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE r = 1), count(*) FILTER (WHERE r <> 1) FROM (
		SELECT d.id, (SELECT count(*) FROM jobs j WHERE j.replay_of = d.id) AS r
		FROM jobs d JOIN operation_items i ON i.job_id = d.id AND i.operation_id = $1) x`, op.GetId()).Scan(&once, &notOnce); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state = 'dead' AND replayed_as <> ''`).Scan(&replayedAs); err != nil {
		t.Fatal(err)
	}
	if deadJobs != n+1 || once != n || notOnce != 0 || replayedAs != n {
		t.Fatalf("%d dead jobs (want %d), %d replayed once (want %d), %d not once (want 0), %d marked replayed (want %d)",
			deadJobs, n+1, once, n, notOnce, replayedAs, n)
	}
	var replays int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE replay_of <> ''`).Scan(&replays); err != nil {
		t.Fatal(err)
	}
	if replays != n {
		t.Fatalf("%d replays in all, want %d", replays, n)
	}
}
