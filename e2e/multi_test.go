package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/store"
)

// completions counts successful Completes per job across all workers.
type completions struct {
	mu    sync.Mutex // guards count and all
	count map[string]int
	want  int
	all   chan struct{}
}

func (c *completions) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.count[id]++
	if len(c.count) == c.want && c.all != nil {
		close(c.all)
		c.all = nil
	}
}

// runStreamWorker consumes pushed leases and completes each through the
// unary API of the same coordinator, granting credits back five at a time
// (as an SDK batches them). A Complete answered LEASE_LOST is not a
// completion — the lease expired on a slow machine and another worker owns
// the job now — so it is skipped, exactly as a real worker would.
func runStreamWorker(t *testing.T, ctx context.Context, c clients, id string, done *completions) {
	st := connect(t, ctx, c, &leaseholdv1.Hello{
		WorkerId: id, Queues: []string{"fleet"}, Capacity: 20, LeaseDuration: durationpb.New(5 * time.Minute),
	})
	st.credit(20)
	go func() {
		finished := 0
		for m := range st.msgs {
			lease := m.GetLease()
			if lease == nil {
				continue
			}
			_, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: lease.GetToken()})
			switch code, reason := errorInfo(err); {
			case err == nil:
				done.add(lease.GetToken().GetJobId())
			case code == codes.FailedPrecondition && reason == coordinator.ReasonLeaseLost:
				t.Logf("worker %s: lease of %s lost before completing", id, lease.GetToken().GetJobId())
			case ctx.Err() != nil:
				return
			default:
				t.Errorf("worker %s: complete %s: %v", id, lease.GetToken().GetJobId(), err)
			}
			if finished++; finished%5 != 0 {
				continue
			}
			if err := st.s.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 5}}}); err != nil {
				return
			}
		}
	}()
}

func TestTwoCoordinatorsOnOnePostgresCompleteEveryJobExactlyOnce(t *testing.T) {
	t.Parallel()
	const jobs = 2000
	a := testserver.Start(t, testserver.Options{Postgres: true})
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.DatabaseURL})
	ca, cb := newClients(a.Dial(t)), newClients(b.Dial(t))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)

	done := &completions{count: map[string]int{}, want: jobs, all: make(chan struct{})}
	all := done.all
	for i := range 2 {
		runStreamWorker(t, ctx, ca, fmt.Sprintf("a-%d", i), done)
		runStreamWorker(t, ctx, cb, fmt.Sprintf("b-%d", i), done)
	}

	var wg sync.WaitGroup
	for i, c := range []clients{ca, cb} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]*leaseholdv1.CreateJobRequest, 0, jobs/2)
			for j := range jobs / 2 {
				reqs = append(reqs, &leaseholdv1.CreateJobRequest{
					Job: spec("fleet", fmt.Sprintf("job-%d-%d", i, j)), RequestId: fmt.Sprintf("fleet-%d-%d", i, j),
				})
			}
			if _, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: reqs}); err != nil {
				t.Errorf("batch create via coordinator %d: %v", i, err)
			}
		}()
	}
	wg.Wait()

	select {
	case <-all:
	case <-ctx.Done():
		done.mu.Lock()
		n := len(done.count)
		done.mu.Unlock()
		t.Fatalf("only %d of %d jobs completed", n, jobs)
	}
	done.mu.Lock()
	for id, n := range done.count {
		if n != 1 {
			t.Errorf("job %s completed %d times", id, n)
		}
	}
	done.mu.Unlock()

	// The database agrees: every job SUCCEEDED, each with exactly one
	// terminal event.
	var ids []string
	cursor := ""
	for {
		page, err := a.Store.ListJobs(ctx, store.ListJobsParams{Tenant: coordinator.TenantDefault, Queue: "fleet", Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, j := range page.Jobs {
			if j.State != store.JobStateSucceeded {
				t.Errorf("job %s is %s", j.ID, j.State)
			}
			ids = append(ids, j.ID)
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(ids) != jobs {
		t.Fatalf("%d jobs in the database, want %d", len(ids), jobs)
	}
	sem := make(chan struct{}, 8)
	for _, id := range ids {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			evs, err := a.Store.ListEvents(ctx, store.ListEventsParams{Tenant: coordinator.TenantDefault, JobID: id, Limit: 100})
			if err != nil {
				t.Errorf("events of %s: %v", id, err)
				return
			}
			terminal := 0
			for _, e := range evs {
				if e.Type == store.EventSucceeded || e.Type == store.EventFailed || e.Type == store.EventCancelled || e.Type == store.EventDead {
					terminal++
				}
			}
			if terminal != 1 {
				t.Errorf("job %s has %d terminal events: %v", id, terminal, evs)
			}
		}()
	}
	wg.Wait()
}

// With polling effectively off, only PostgreSQL LISTEN/NOTIFY can bring a
// job created through coordinator A to an idle stream on coordinator B.
func TestJobCreatedOnOneCoordinatorReachesAnIdleStreamOnAnotherThroughNotify(t *testing.T) {
	t.Parallel()
	noPolling := func(cfg *coordinator.Config) { cfg.PollInterval, cfg.PollMaxInterval = time.Hour, time.Hour }
	a := testserver.Start(t, testserver.Options{Postgres: true, Configure: noPolling})
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.DatabaseURL, Configure: noPolling})
	ca, cb := newClients(a.Dial(t)), newClients(b.Dial(t))
	ctx := ctxT(t)

	st := connect(t, ctx, cb, &leaseholdv1.Hello{WorkerId: "idle-on-b", Queues: []string{"notify"}, Capacity: 5})
	st.credit(5)

	// The first job may be picked up by the stream's own first claim;
	// after it the stream is idle with credits left, and nothing but a
	// notification wakes it.
	for i := range 2 {
		created, err := ca.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("notify", fmt.Sprint(i))})
		if err != nil {
			t.Fatal(err)
		}
		got := st.next(isLease).GetLease()
		if got.GetToken().GetJobId() != created.GetJob().GetId() {
			t.Fatalf("stream on B got %v, want job %s", got.GetToken(), created.GetJob().GetId())
		}
	}
}
