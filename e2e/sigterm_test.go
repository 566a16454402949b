package e2e

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// SIGTERM while producers create jobs concurrently: the binary exits 0,
// every create it acknowledged is in the database, and after a restart
// every one of those jobs runs to completion.
func TestSIGTERMUnderLoadLosesNoAcknowledgedJob(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	p := testserver.StartProcess(t, "--database-url", url, "--shutdown-grace", "5s")
	c := newClients(p.Dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	const producers, perProducer = 8, 500
	var (
		mu      sync.Mutex // guards acked
		acked   = map[string]bool{}
		enough  = make(chan struct{})
		signal  sync.Once
		wg      sync.WaitGroup
		refused int
	)
	for g := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perProducer {
				resp, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{
					Job: spec("term", fmt.Sprintf("%d-%d", g, i)), RequestId: fmt.Sprintf("term-%d-%d", g, i),
				})
				if err != nil {
					mu.Lock()
					refused++
					mu.Unlock()
					return // the server is going away; the rest is unacknowledged
				}
				mu.Lock()
				acked[resp.GetJob().GetId()] = true
				if len(acked) >= 100 {
					signal.Do(func() { close(enough) })
				}
				mu.Unlock()
			}
		}()
	}
	select {
	case <-enough:
	case <-ctx.Done():
		t.Fatal("producers did not get 100 creates acknowledged")
	}
	p.Signal(syscall.SIGTERM)
	wg.Wait()
	code, err := p.Wait()
	if err != nil || code != 0 {
		t.Fatalf("leasehold serve exited with code %d, %v; want 0\n%s", code, err, p.Output())
	}
	t.Logf("%d creates acknowledged, %d producers refused at shutdown", len(acked), refused)

	// Restart on the same database and finish everything.
	p2 := testserver.StartProcess(t, "--database-url", url)
	c2 := newClients(p2.Dial(t))
	completed := map[string]bool{}
	for len(completed) < len(acked) {
		claim, err := c2.workers.Claim(ctx, &leaseholdv1.ClaimRequest{
			WorkerId: "finisher", Queues: []string{"term"}, MaxJobs: 500,
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(claim.GetJobs()) == 0 {
			break
		}
		for _, lj := range claim.GetJobs() {
			if _, err := c2.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: lj.GetToken()}); err != nil {
				t.Fatal(err)
			}
			completed[lj.GetToken().GetJobId()] = true
		}
	}
	for id := range acked {
		if !completed[id] {
			t.Errorf("acknowledged job %s was not there to finish", id)
		}
		job, err := c2.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: id})
		if err != nil || job.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED {
			t.Fatalf("acknowledged job %s: %v, %v", id, job.GetJob().GetState(), err)
		}
	}
}
