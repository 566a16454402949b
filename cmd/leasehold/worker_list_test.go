package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// TestWorkerListShowsUnaryWorkersAndLabels lists a worker that only made a
// unary Claim (as a grpcurl script does) and a stream worker with labels.
func TestWorkerListShowsUnaryWorkersAndLabels(t *testing.T) {
	t.Parallel()
	h := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := leaseholdv1.NewWorkerServiceClient(h.conn).Claim(ctx, &leaseholdv1.ClaimRequest{
		WorkerId: "script-1", Queues: []string{"reports", "emails"},
	}); err != nil {
		t.Fatalf("Claim: %v", err)
	}
	w := h.startExec("--queue", "thumbs", "--worker-id", "exec-labelled", "--label", "zone=b", "--label", "host=h1", "--", "true")
	defer w.stop(t)
	// The stream is registered once the worker's Hello is answered, and
	// its credit follows the Welcome; its log says it started before
	// either, so wait for both in the listing.
	var resp leaseholdv1.ListWorkersResponse
	granted := func() bool {
		for _, wi := range resp.GetWorkers() {
			if wi.GetWorkerId() == "exec-labelled" && wi.GetCredits() == 1 {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); ; {
		h.json(&resp, "worker", "list")
		if len(resp.GetWorkers()) == 2 && granted() || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	byID := map[string]*leaseholdv1.WorkerInfo{}
	for _, wi := range resp.GetWorkers() {
		byID[wi.GetWorkerId()] = wi
	}
	unary, stream := byID["script-1"], byID["exec-labelled"]
	if unary.GetTransport() != leaseholdv1.WorkerTransport_WORKER_TRANSPORT_UNARY ||
		!slices.Equal(unary.GetQueues(), []string{"reports", "emails"}) || unary.GetLastSeenAt() == nil {
		t.Errorf("unary worker: %v", unary)
	}
	if stream.GetTransport() != leaseholdv1.WorkerTransport_WORKER_TRANSPORT_STREAM || stream.GetLabels()["zone"] != "b" {
		t.Errorf("stream worker: %v", stream)
	}

	r := h.ok("worker", "list")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("worker list table:\n%s", r.stdout)
	}
	for _, want := range [][]string{
		{"WORKER", "VIA", "QUEUES", "CAPACITY", "ACTIVE", "CREDITS", "LABELS", "SDK", "CONNECTED", "LAST SEEN", "COORDINATOR"},
		{"exec-labelled", "stream", "thumbs", "1", "0", "1", "host=h1,zone=b", "leasehold-go/"},
		{"script-1", "unary", "reports,emails", "-", "-", "-", "-", "-"},
	} {
		line := strings.Join(strings.Fields(lines[slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, want[0]) })]), " ")
		if !strings.HasPrefix(line, strings.Join(want, " ")) {
			t.Errorf("row %q, want it to start with %q", line, strings.Join(want, " "))
		}
	}
}

// TestWorkerReleaseBinding: the command answers whose binding it removed
// (none under --auth none, where no worker id is ever bound).
func TestWorkerReleaseBinding(t *testing.T) {
	t.Parallel()
	h := setup(t)
	if r := h.ok("worker", "release-binding", "fixed-1"); !strings.Contains(r.stdout, "worker id fixed-1 had no owner") {
		t.Errorf("release-binding said %q", r.stdout)
	}
	var resp leaseholdv1.ReleaseWorkerBindingResponse
	h.json(&resp, "worker", "release-binding", "fixed-1")
	if resp.GetPreviousOwnerId() != "" {
		t.Errorf("previous owner %q under --auth none", resp.GetPreviousOwnerId())
	}
}
