package main

import (
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// deadJob creates a job with a budget of one attempt, claims it and fails it
// retryably through the worker API, so it lands in the dead-letter queue.
func (h *harness) deadJob(queue string) *leaseholdv1.Job {
	h.t.Helper()
	j := h.createJob("--queue", queue, "--kind", "doomed", "--payload", "evidence", "--max-attempts", "1")
	wc := leaseholdv1.NewWorkerServiceClient(h.conn)
	claim, err := wc.Claim(h.t.Context(), &leaseholdv1.ClaimRequest{WorkerId: "dlq-test", Queues: []string{queue}})
	if err != nil || len(claim.GetJobs()) != 1 || claim.GetJobs()[0].GetJob().GetId() != j.GetId() {
		h.t.Fatalf("claim %s: %v %v", j.GetId(), claim, err)
	}
	resp, err := wc.Retry(h.t.Context(), &leaseholdv1.RetryRequest{
		Token: claim.GetJobs()[0].GetToken(),
		Error: &leaseholdv1.JobError{Code: "HTTP_503", Message: "upstream down", Retryable: true},
	})
	if err != nil || resp.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_DEAD {
		h.t.Fatalf("retry of %s with no budget left: %v %v", j.GetId(), resp, err)
	}
	return resp.GetJob()
}

func TestDLQCommands(t *testing.T) {
	t.Parallel()
	h := setup(t)
	dead := h.deadJob("billing")
	other := h.deadJob("billing")

	t.Run("list shows dead jobs with their last error", func(t *testing.T) {
		var resp leaseholdv1.ListDeadJobsResponse
		h.json(&resp, "dlq", "list", "--queue", "billing")
		if len(resp.GetDeadJobs()) != 2 {
			t.Fatalf("dlq list: %v", &resp)
		}
		r := h.ok("dlq", "list")
		for _, want := range []string{"LAST ERROR", dead.GetId(), other.GetId(), "HTTP_503: upstream down"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dlq list lacks %q:\n%s", want, r.stdout)
			}
		}
		h.json(&resp, "dlq", "list", "--queue", "elsewhere")
		if len(resp.GetDeadJobs()) != 0 {
			t.Errorf("dlq list --queue elsewhere: %v", &resp)
		}
		h.json(&resp, "dlq", "list", "--filter", `queue = billing AND error_code = "HTTP_503" AND id:("`+dead.GetId()+`")`)
		if len(resp.GetDeadJobs()) != 1 || resp.GetDeadJobs()[0].GetJob().GetId() != dead.GetId() {
			t.Errorf("dlq list --filter on the first dead job's id: %v", &resp)
		}
		h.json(&resp, "dlq", "list", "--filter", `error_code = "OTHER"`)
		if len(resp.GetDeadJobs()) != 0 {
			t.Errorf("dlq list --filter on another error code: %v", &resp)
		}
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "INVALID_FILTER"}, "dlq", "list", "--filter", "queue = a OR queue = b")
	})

	t.Run("show has the job, its error and its attempts", func(t *testing.T) {
		var resp leaseholdv1.GetDeadJobResponse
		h.json(&resp, "dlq", "show", dead.GetId())
		if resp.GetDeadJob().GetJob().GetId() != dead.GetId() || len(resp.GetDeadJob().GetAttempts()) != 1 ||
			resp.GetDeadJob().GetAttempts()[0].GetWorkerId() != "dlq-test" {
			t.Fatalf("dlq show: %v", &resp)
		}
		r := h.ok("dlq", "show", dead.GetId())
		for _, want := range []string{"DEAD", "evidence", "HTTP_503", "ATTEMPT", "dlq-test", "FAILED"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("dlq show lacks %q:\n%s", want, r.stdout)
			}
		}
		h.fail(exitFail, []string{"NOT_FOUND"}, "dlq", "show", missingJobID)
	})

	t.Run("replay creates a new job once", func(t *testing.T) {
		var first leaseholdv1.ReplayDeadJobResponse
		h.json(&first, "dlq", "replay", dead.GetId(), "--reason", "upstream is back")
		nj := first.GetJob()
		if first.GetAlreadyReplayed() || nj.GetId() == dead.GetId() || nj.GetReplayOf() != dead.GetId() ||
			nj.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED || string(nj.GetPayload()) != "evidence" {
			t.Fatalf("replay: %v", &first)
		}
		r := h.ok("dlq", "replay", dead.GetId())
		if !strings.Contains(r.stdout, "already replayed as "+nj.GetId()) {
			t.Errorf("second replay: %s", r.stdout)
		}
		var shown leaseholdv1.GetDeadJobResponse
		h.json(&shown, "dlq", "show", dead.GetId())
		if shown.GetDeadJob().GetReplayedAs() != nj.GetId() {
			t.Errorf("replayed_as = %q, want %q", shown.GetDeadJob().GetReplayedAs(), nj.GetId())
		}
		h.fail(exitFail, []string{"FAILED_PRECONDITION", "JOB_NOT_DEAD"}, "dlq", "replay", nj.GetId())
	})

	t.Run("abandon hides a dead job from the default listing", func(t *testing.T) {
		r := h.ok("dlq", "abandon", other.GetId(), "--reason", "customer closed the account")
		if !strings.Contains(r.stdout, other.GetId()+" abandoned") {
			t.Errorf("abandon output: %s", r.stdout)
		}
		var resp leaseholdv1.ListDeadJobsResponse
		h.json(&resp, "dlq", "list", "--queue", "billing")
		for _, d := range resp.GetDeadJobs() {
			if d.GetJob().GetId() == other.GetId() {
				t.Errorf("abandoned job still listed: %v", d)
			}
		}
		h.json(&resp, "dlq", "list", "--queue", "billing", "--include-abandoned")
		found := false
		for _, d := range resp.GetDeadJobs() {
			found = found || (d.GetJob().GetId() == other.GetId() && d.GetAbandoned())
		}
		if !found {
			t.Errorf("--include-abandoned does not list %s: %v", other.GetId(), &resp)
		}
		h.fail(exitFail, []string{"FAILED_PRECONDITION", "JOB_ABANDONED"}, "dlq", "replay", other.GetId())
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		h.fail(exitUsage, []string{"missing ID"}, "dlq", "show")
		h.fail(exitUsage, []string{"missing ID"}, "dlq", "replay", "--reason", "x")
		h.fail(exitUsage, []string{"unexpected argument"}, "dlq", "list", "extra")
	})
}
