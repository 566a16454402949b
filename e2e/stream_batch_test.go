package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// batchHello is the Hello of a raw stream that takes batches (or not).
func batchHello(worker, queue string, batches bool) *leaseholdv1.Hello {
	h := &leaseholdv1.Hello{WorkerId: worker, Queues: []string{queue}, Capacity: 32,
		Features: []string{coordinator.FeatureLeaseAcks}}
	if batches {
		h.Features = append(h.Features, coordinator.FeatureLeaseBatches)
	}
	return h
}

// createJobs creates n jobs on queue.
func createJobs(t *testing.T, ctx context.Context, c clients, queue string, n int) {
	t.Helper()
	for i := range n {
		if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec(queue, fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
}

// leasesOf collects n pushed leases, whether they came alone or in
// LeaseBatch messages, and counts the LeaseBatch messages (and the most
// leases one held).
func leasesOf(st *stream, n int) (leases []*leaseholdv1.LeasedJob, batches, largest int) {
	for len(leases) < n {
		m := st.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetLease() != nil || m.GetLeaseBatch() != nil })
		if l := m.GetLease(); l != nil {
			leases = append(leases, l)
			continue
		}
		batches++
		largest = max(largest, len(m.GetLeaseBatch().GetLeases()))
		leases = append(leases, m.GetLeaseBatch().GetLeases()...)
	}
	return leases, batches, largest
}

// answersOf collects n report answers, alone or in ReportResultBatch
// messages, and counts the batches.
func answersOf(st *stream, n int) (answers []*leaseholdv1.ReportResult, batches int) {
	for len(answers) < n {
		m := st.next(func(m *leaseholdv1.ConnectResponse) bool {
			return m.GetReportResult() != nil || m.GetReportResults() != nil
		})
		if r := m.GetReportResult(); r != nil {
			answers = append(answers, r)
			continue
		}
		batches++
		answers = append(answers, m.GetReportResults().GetResults()...)
	}
	return answers, batches
}

func completeItem(tok *leaseholdv1.LeaseToken) *leaseholdv1.BatchedReport {
	return &leaseholdv1.BatchedReport{Report: &leaseholdv1.BatchedReport_Complete{Complete: &leaseholdv1.CompleteRequest{Token: tok, Result: []byte("r")}}}
}

func reportBatchOf(items ...*leaseholdv1.BatchedReport) *leaseholdv1.ConnectRequest {
	return &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_ReportBatch{ReportBatch: &leaseholdv1.ReportBatch{Reports: items}}}
}

// Leases ready at the same moment go in one LeaseBatch to a worker that
// declared lease_batches, and one by one to a worker that did not (the
// Node example, older SDKs); each batched lease spends a credit and
// counts against the unacknowledged bound as if pushed alone.
func TestLeaseBatchesGoOnlyToWorkersThatAskForThem(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		v, err := c.workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
		if err != nil || !slices.Contains(v.GetCapabilities(), coordinator.CapabilityLeaseBatches) ||
			!slices.Contains(v.GetCapabilities(), coordinator.CapabilityReportBatches) {
			t.Fatalf("GetVersion = %v, %v; want lease_batches and report_batches", v, err)
		}
		const n = 12
		createJobs(t, ctx, c, "batched", n)
		createJobs(t, ctx, c, "single", n)

		batched := connect(t, ctx, c, batchHello("batching-worker", "batched", true))
		batched.credit(n)
		leases, batches, largest := leasesOf(batched, n)
		if batches == 0 || largest < 2 {
			t.Fatalf("%d leases ready at once came in %d LeaseBatch messages (largest %d); want batches", n, batches, largest)
		}
		seen := map[string]bool{}
		for _, l := range leases {
			if l.GetToken().GetWorkerId() != "batching-worker" || seen[l.GetToken().GetJobId()] {
				t.Fatalf("lease %v: another worker's, or pushed twice", l.GetToken())
			}
			seen[l.GetToken().GetJobId()] = true
		}
		workers, err := c.admin.ListWorkers(ctx, &leaseholdv1.ListWorkersRequest{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range workers.GetWorkers() {
			if w.GetWorkerId() == "batching-worker" && (w.GetActiveLeases() != n || w.GetUnacknowledgedLeases() != n || w.GetCredits() != 0) {
				t.Fatalf("ListWorkers: %v; want %d active and unacknowledged leases and no credit left", w, n)
			}
		}

		single := connect(t, ctx, c, batchHello("plain-worker", "single", false))
		single.credit(n)
		for range n {
			m := single.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetLease() != nil || m.GetLeaseBatch() != nil })
			if m.GetLeaseBatch() != nil {
				t.Fatalf("a worker without lease_batches was pushed a LeaseBatch: %v", m)
			}
		}
	})
}

// The items of one ReportBatch are applied together but answered one by
// one, each exactly as if sent alone: a lost lease, another worker's
// token and an invalid report among them leave the others' outcomes
// alone; a repeated batch gets the same answers; the answers come back in
// ReportResultBatch messages.
func TestReportBatchItemsAreAnsweredOneByOne(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, nil)
		ctx := ctxT(t)
		createJobs(t, ctx, c, "mixed", 4)
		st := connect(t, ctx, c, batchHello("mixed-worker", "mixed", true))
		st.credit(4)
		leases, _, _ := leasesOf(st, 4)
		done, failed, lost, released := leases[0].GetToken(), leases[1].GetToken(), leases[2].GetToken(), leases[3].GetToken()
		// lost's lease ends elsewhere before the batch names it.
		if _, err := c.workers.Release(ctx, &leaseholdv1.ReleaseRequest{Token: lost}); err != nil {
			t.Fatal(err)
		}
		foreign := &leaseholdv1.LeaseToken{JobId: done.GetJobId(), LeaseGeneration: done.GetLeaseGeneration(), WorkerId: "someone-else", Secret: done.GetSecret()}
		batch := reportBatchOf(
			completeItem(done),
			&leaseholdv1.BatchedReport{Report: &leaseholdv1.BatchedReport_Retry{Retry: &leaseholdv1.RetryRequest{
				Token: failed, Error: &leaseholdv1.JobError{Code: "boom", Message: "it broke", Retryable: false},
			}}},
			completeItem(lost),
			completeItem(foreign),
			&leaseholdv1.BatchedReport{Report: &leaseholdv1.BatchedReport_Release{Release: &leaseholdv1.ReleaseRequest{Token: released}}},
			&leaseholdv1.BatchedReport{Report: &leaseholdv1.BatchedReport_Cancel{Cancel: &leaseholdv1.CancelRequest{Token: released, Reason: string(make([]byte, 2048))}}},
		)
		type key struct {
			kind leaseholdv1.ReportKind
			job  string
			who  string
		}
		want := map[key]func(r *leaseholdv1.ReportResult) bool{
			{leaseholdv1.ReportKind_REPORT_KIND_COMPLETE, done.GetJobId(), "mixed-worker"}: func(r *leaseholdv1.ReportResult) bool {
				return r.GetCode() == 0 && r.GetState() == leaseholdv1.JobState_JOB_STATE_SUCCEEDED
			},
			{leaseholdv1.ReportKind_REPORT_KIND_RETRY, failed.GetJobId(), "mixed-worker"}: func(r *leaseholdv1.ReportResult) bool {
				return r.GetCode() == 0 && r.GetState() == leaseholdv1.JobState_JOB_STATE_FAILED
			},
			{leaseholdv1.ReportKind_REPORT_KIND_COMPLETE, lost.GetJobId(), "mixed-worker"}: func(r *leaseholdv1.ReportResult) bool {
				return codes.Code(r.GetCode()) == codes.FailedPrecondition && r.GetReason() == coordinator.ReasonLeaseLost
			},
			{leaseholdv1.ReportKind_REPORT_KIND_COMPLETE, done.GetJobId(), "someone-else"}: func(r *leaseholdv1.ReportResult) bool {
				return codes.Code(r.GetCode()) == codes.PermissionDenied && len(r.GetToken().GetSecret()) == 0
			},
			{leaseholdv1.ReportKind_REPORT_KIND_RELEASE, released.GetJobId(), "mixed-worker"}: func(r *leaseholdv1.ReportResult) bool {
				return r.GetCode() == 0 && r.GetState() == leaseholdv1.JobState_JOB_STATE_QUEUED
			},
			{leaseholdv1.ReportKind_REPORT_KIND_CANCEL, released.GetJobId(), "mixed-worker"}: func(r *leaseholdv1.ReportResult) bool {
				return codes.Code(r.GetCode()) == codes.InvalidArgument // reason longer than 1 KiB
			},
		}
		for round := range 2 { // the second round repeats the batch
			st.send(batch)
			answers, batches := answersOf(st, len(want))
			got := map[key]bool{}
			for _, r := range answers {
				k := key{r.GetKind(), r.GetToken().GetJobId(), r.GetToken().GetWorkerId()}
				ok, known := want[k]
				if !known || got[k] {
					t.Fatalf("round %d: unexpected or repeated answer %v", round, r)
				}
				got[k] = true
				// The repeated release finds the job re-queued, not held: lost.
				if round == 1 && k.kind == leaseholdv1.ReportKind_REPORT_KIND_RELEASE {
					if codes.Code(r.GetCode()) != codes.FailedPrecondition {
						t.Fatalf("round 1: repeated release: %v; want LEASE_LOST", r)
					}
					continue
				}
				if !ok(r) {
					t.Fatalf("round %d: answer %v is not what the report alone gets", round, r)
				}
			}
			if round == 0 && batches == 0 {
				t.Fatalf("round %d: %d answers came one by one; want a ReportResultBatch", round, len(answers))
			}
		}
		for id, state := range map[string]leaseholdv1.JobState{
			done.GetJobId(): leaseholdv1.JobState_JOB_STATE_SUCCEEDED, failed.GetJobId(): leaseholdv1.JobState_JOB_STATE_FAILED,
			lost.GetJobId(): leaseholdv1.JobState_JOB_STATE_QUEUED, released.GetJobId(): leaseholdv1.JobState_JOB_STATE_QUEUED,
		} {
			if j, err := c.jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: id}); err != nil || j.GetJob().GetState() != state {
				t.Fatalf("job %s = %v, %v; want %s", id, j.GetJob().GetState(), err, state)
			}
		}

		// The same report twice in one batch: both answered, as a report
		// and its repetition would be.
		st.credit(1)
		again, _, _ := leasesOf(st, 1)
		st.send(reportBatchOf(completeItem(again[0].GetToken()), completeItem(again[0].GetToken())))
		twice, _ := answersOf(st, 2)
		for _, r := range twice {
			if r.GetCode() != 0 || r.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || r.GetToken().GetJobId() != again[0].GetToken().GetJobId() {
				t.Fatalf("a report and its repetition in one batch: %v; want both OK, SUCCEEDED", twice)
			}
		}

		// A batch with an item that holds no report breaks the protocol.
		st.send(reportBatchOf(completeItem(done), &leaseholdv1.BatchedReport{}))
		if err := st.end(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("batch with an empty item: stream ended with %v; want INVALID_ARGUMENT", err)
		}
	})
}

// With Config.StreamBatchesOff the coordinator behaves as one that
// predates batches: no capability, single messages even to a worker that
// declared lease_batches, and a ReportBatch ends the stream.
func TestStreamBatchesOffAdvertisesAndSendsNoBatches(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, func(cfg *coordinator.Config) { cfg.StreamBatchesOff = true })
		ctx := ctxT(t)
		v, err := c.workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
		if err != nil || slices.Contains(v.GetCapabilities(), coordinator.CapabilityLeaseBatches) ||
			slices.Contains(v.GetCapabilities(), coordinator.CapabilityReportBatches) || !slices.Contains(v.GetCapabilities(), "stream_reports") {
			t.Fatalf("GetVersion = %v, %v; want stream_reports and no batch capability", v, err)
		}
		const n = 8
		createJobs(t, ctx, c, "off", n)
		st := connect(t, ctx, c, batchHello("off-worker", "off", true))
		st.credit(n)
		leases, batches, _ := leasesOf(st, n)
		if batches != 0 {
			t.Fatalf("%d LeaseBatch messages with batches off", batches)
		}
		for _, l := range leases {
			st.send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Complete{Complete: &leaseholdv1.CompleteRequest{Token: l.GetToken()}}})
		}
		answers, rbatches := answersOf(st, n)
		for _, r := range answers {
			if r.GetCode() != 0 {
				t.Fatalf("answer %v", r)
			}
		}
		if rbatches != 0 {
			t.Fatalf("%d ReportResultBatch messages with batches off", rbatches)
		}
		st.send(reportBatchOf(completeItem(leases[0].GetToken())))
		if err := st.end(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("ReportBatch with batches off: stream ended with %v; want INVALID_ARGUMENT", err)
		}
	})
}

// A LeaseBatch holds at most 64 leases and stays within 1 MiB: large
// leases go one to a message (well under the 4 MiB a gRPC client takes
// by default), however many are ready at once.
func TestLeaseBatchesStayWithinTheirBounds(t *testing.T) {
	engines(t, func(t *testing.T, pg bool) {
		_, c := setup(t, pg, func(cfg *coordinator.Config) { cfg.StreamUnackedLeases = 200 })
		ctx := ctxT(t)
		const small = 150
		createJobs(t, ctx, c, "many", small)
		hello := batchHello("many-worker", "many", true)
		hello.Capacity = small
		st := connect(t, ctx, c, hello)
		st.credit(small)
		got, largest := 0, 0
		for got < small {
			m := st.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetLease() != nil || m.GetLeaseBatch() != nil })
			n := max(len(m.GetLeaseBatch().GetLeases()), 1)
			if n > 64 {
				t.Fatalf("a LeaseBatch of %d leases; want at most 64", n)
			}
			largest = max(largest, n)
			got += n
		}
		if largest < 2 {
			t.Fatalf("%d leases ready at once never shared a message", small)
		}

		payload := make([]byte, 600<<10)
		for range 3 {
			if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "large", Kind: "k", Payload: payload}}); err != nil {
				t.Fatal(err)
			}
		}
		big := connect(t, ctx, c, batchHello("large-worker", "large", true))
		big.credit(3)
		for range 3 {
			m := big.next(func(m *leaseholdv1.ConnectResponse) bool { return m.GetLease() != nil || m.GetLeaseBatch() != nil })
			if m.GetLeaseBatch() != nil {
				t.Fatalf("leases of 600 KiB shared a message of %d bytes; want one each (1 MiB bound)", proto.Size(m))
			}
		}
	})
}
