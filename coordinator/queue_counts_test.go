package coordinator

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// TestListQueuesStaleCountsAndThroughput: with max_staleness a second
// call is answered from the first's count (a job created in between is not
// counted, counted_at does not move) while a pause shows at once; without
// it the count is exact; and the jobs completed appear in the throughput
// samples of their queue, not of another.
func TestListQueuesStaleCountsAndThroughput(t *testing.T) {
	t.Parallel()
	const interval = 200 * time.Millisecond
	o := newObservedWith(t, func(c *Config) { c.ThroughputInterval = interval })
	ctx := withCaller(context.Background(), anonymous(TenantDefault))
	jobs, workers, admin := &jobService{c: o.c}, &workerService{c: o.c}, &adminService{c: o.c}
	create := func(queue string) {
		t.Helper()
		if _, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: queue, Kind: "k"}}); err != nil {
			t.Fatal(err)
		}
	}
	find := func(resp *leaseholdv1.ListQueuesResponse, queue string) *leaseholdv1.QueueSummary {
		t.Helper()
		for _, q := range resp.GetQueues() {
			if q.GetPolicy().GetQueue() == queue {
				return q
			}
		}
		t.Fatalf("queue %s not listed: %v", queue, resp.GetQueues())
		return nil
	}
	for range 3 {
		create("tp")
	}
	create("other")
	claimed, err := workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: "w", Queues: []string{"tp"}, MaxJobs: 2})
	if err != nil || len(claimed.GetJobs()) != 2 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	for _, j := range claimed.GetJobs() {
		if _, err := workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: j.GetToken()}); err != nil {
			t.Fatal(err)
		}
	}

	stale := &leaseholdv1.ListQueuesRequest{MaxStaleness: durationpb.New(time.Minute)}
	first, err := admin.ListQueues(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	if st := find(first, "tp").GetStats(); st.GetQueued() != 1 || st.GetSucceeded() != 2 || st.GetCountedAt() == nil {
		t.Fatalf("first stale count of tp: %v; want 1 queued, 2 succeeded, counted_at set", st)
	}
	create("tp")
	if _, err := admin.PauseQueue(ctx, &leaseholdv1.PauseQueueRequest{Queue: "tp"}); err != nil {
		t.Fatal(err)
	}
	second, err := admin.ListQueues(ctx, stale)
	if err != nil {
		t.Fatal(err)
	}
	st := find(second, "tp").GetStats()
	if st.GetQueued() != 1 || !st.GetPaused() || !st.GetCountedAt().AsTime().Equal(find(first, "tp").GetStats().GetCountedAt().AsTime()) {
		t.Fatalf("second stale call: %v; want the first count (1 queued, same counted_at) with the pause read now", st)
	}
	if !find(second, "tp").GetPolicy().GetPaused() {
		t.Fatal("the policy of the second stale call is not paused")
	}
	exact, err := admin.ListQueues(ctx, &leaseholdv1.ListQueuesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if st := find(exact, "tp").GetStats(); st.GetQueued() != 2 || !st.GetPaused() {
		t.Fatalf("exact count of tp: %v; want 2 queued, paused", st)
	}

	// The two completions land in one sample of tp once their interval
	// has settled (interval/2 after its end).
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := admin.ListQueues(ctx, &leaseholdv1.ListQueuesRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var tp, other int64
		for _, s := range find(resp, "tp").GetStats().GetThroughput() {
			if s.GetWidth().AsDuration() != interval {
				t.Fatalf("sample width %v, want %v", s.GetWidth().AsDuration(), interval)
			}
			tp += s.GetSucceeded()
		}
		for _, s := range find(resp, "other").GetStats().GetThroughput() {
			other += s.GetSucceeded() + s.GetFailed() + s.GetDead() + s.GetCancelled()
		}
		if other != 0 {
			t.Fatalf("queue other has %d finished jobs in its samples, want 0", other)
		}
		if tp == 2 {
			break
		}
		if tp > 2 || time.Now().After(deadline) {
			t.Fatalf("tp's samples count %d succeeded jobs, want 2", tp)
		}
		time.Sleep(interval / 2)
	}
}

// TestListQueuesRefusesAStalenessPastItsBound: max_staleness is at most
// QueueCountsMaxStaleness, and never negative.
func TestListQueuesRefusesAStalenessPastItsBound(t *testing.T) {
	t.Parallel()
	o := newObserved(t)
	ctx := withCaller(context.Background(), anonymous(TenantDefault))
	for _, d := range []time.Duration{QueueCountsMaxStaleness + time.Second, -time.Second} {
		_, err := (&adminService{c: o.c}).ListQueues(ctx, &leaseholdv1.ListQueuesRequest{MaxStaleness: durationpb.New(d)})
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("max_staleness %v: %v, want InvalidArgument", d, err)
		}
	}
}
