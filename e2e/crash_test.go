package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// SIGKILL while workers report completions through the group committer: a
// batch may be gathering or committing when the process dies. Every
// completion the coordinator acknowledged is in the database, at the
// acknowledged generation; nothing acknowledged was lost; after a restart
// every job finishes with exactly one terminal event, its row moved to
// jobs_done exactly once.
func TestSIGKILLDuringReportBatchesLosesNoAcknowledgedReport(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	p := testserver.StartProcess(t, "--database-url", url)
	c := newClients(p.Dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	const jobs = 1500
	var reqs []*leaseholdv1.CreateJobRequest
	for i := range jobs {
		reqs = append(reqs, &leaseholdv1.CreateJobRequest{Job: spec("crash", fmt.Sprint(i))})
	}
	for i := 0; i < jobs; i += 500 {
		if _, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: reqs[i : i+500]}); err != nil {
			t.Fatal(err)
		}
	}

	var (
		mu     sync.Mutex           // guards acked
		acked  = map[string]int64{} // job id → generation of the acknowledged Complete
		enough = make(chan struct{})
		once   sync.Once
		wg     sync.WaitGroup
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("crash-%d", w)
			for ctx.Err() == nil {
				claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: worker, Queues: []string{"crash"}, MaxJobs: 10,
					LeaseDuration: durationpb.New(2 * time.Second), Wait: durationpb.New(time.Second)})
				if err != nil {
					return // the coordinator died
				}
				var inner sync.WaitGroup
				for _, lj := range claim.GetJobs() {
					inner.Add(1)
					go func() {
						defer inner.Done()
						if _, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: lj.GetToken()}); err != nil {
							return
						}
						mu.Lock()
						acked[lj.GetToken().GetJobId()] = lj.GetToken().GetLeaseGeneration()
						if len(acked) >= 300 {
							once.Do(func() { close(enough) })
						}
						mu.Unlock()
					}()
				}
				inner.Wait()
			}
		}()
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("workers did not get 300 completions acknowledged")
	}
	p.Kill()
	wg.Wait()
	p.Wait() //nolint:errcheck // killed on purpose

	// Straight from the database: every acknowledged completion committed.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	mu.Lock()
	defer mu.Unlock()
	for id, gen := range acked {
		var state string
		var g int64
		if err := conn.QueryRow(ctx, `SELECT state, lease_generation FROM jobs WHERE id = $1`, id).Scan(&state, &g); err != nil {
			t.Fatalf("acknowledged job %s: %v", id, err)
		}
		if state != "succeeded" || g != gen {
			t.Errorf("acknowledged completion of %s (generation %d) is not stored: state %s, generation %d", id, gen, state, g)
		}
	}
	t.Logf("%d completions acknowledged before SIGKILL", len(acked))

	// Restart: the rest finishes, each job exactly once.
	p2 := testserver.StartProcess(t, "--database-url", url)
	c2 := newClients(p2.Dial(t))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var left int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE state <> 'succeeded'`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs never finished after the restart", left)
		}
		// Leases the dead coordinator granted expire (2s); the reaper
		// requeues them and this claim takes them.
		claim, err := c2.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "finisher", Queues: []string{"crash"}, MaxJobs: 500, Wait: durationpb.New(2 * time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		for _, lj := range claim.GetJobs() {
			if _, err := c2.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: lj.GetToken()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var doubled int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM (SELECT job_id FROM job_events
		WHERE type IN ('succeeded', 'failed', 'cancelled', 'dead') GROUP BY job_id HAVING count(*) <> 1) d`).Scan(&doubled); err != nil {
		t.Fatal(err)
	}
	if doubled != 0 {
		t.Fatalf("%d jobs do not have exactly one terminal event", doubled)
	}
	// Every completion moved its row to jobs_done (migration 014), in the
	// statement that ended it: each job is there once, and none is left in
	// jobs_live or lost between the two.
	var rows, ids, moved, live int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT id),
		count(*) FILTER (WHERE tableoid::regclass::text LIKE 'jobs_done%'),
		(SELECT count(*) FROM jobs_live) FROM jobs`).Scan(&rows, &ids, &moved, &live); err != nil {
		t.Fatal(err)
	}
	if rows != jobs || ids != jobs || moved != jobs || live != 0 {
		t.Fatalf("%d job rows, %d ids, %d in jobs_done, %d in jobs_live; want %d, %d, %d, 0", rows, ids, moved, live, jobs, jobs, jobs)
	}
}
