package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
)

// missingJobID is a well-formed job id (UUIDv7) that no test creates.
const missingJobID = "01890a5d-ac96-774b-bcce-b302099a8057"

func TestJobCommands(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("create sends every flag and is idempotent by request id", func(t *testing.T) {
		var first leaseholdv1.CreateJobResponse
		h.json(&first, "job", "create", "--queue", "mail", "--kind", "send", "--payload", `{"to":"a@b"}`,
			"--request-id", "req-1", "--priority", "7", "--max-attempts", "4", "--run-after", "1h",
			"--meta", "tenant=acme", "--meta", "trace=a=b")
		j := first.GetJob()
		if first.GetReplayed() || j.GetQueue() != "mail" || j.GetKind() != "send" || string(j.GetPayload()) != `{"to":"a@b"}` ||
			j.GetPriority() != 7 || j.GetMaxAttempts() != 4 || j.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED ||
			j.GetMetadata()["tenant"] != "acme" || j.GetMetadata()["trace"] != "a=b" {
			t.Fatalf("created %v", &first)
		}
		if d := j.GetAvailableAt().AsTime().Sub(j.GetCreatedAt().AsTime()); d < 59*time.Minute || d > 61*time.Minute {
			t.Errorf("--run-after 1h: available %v after creation", d)
		}
		var again leaseholdv1.CreateJobResponse
		h.json(&again, "job", "create", "--queue", "mail", "--kind", "send", "--payload", `{"to":"a@b"}`,
			"--request-id", "req-1", "--priority", "7", "--max-attempts", "4", "--run-after", "1h",
			"--meta", "tenant=acme", "--meta", "trace=a=b")
		if !again.GetReplayed() || again.GetJob().GetId() != j.GetId() {
			t.Errorf("repeat with the same request id: replayed=%v id=%s, want the original %s", again.GetReplayed(), again.GetJob().GetId(), j.GetId())
		}
		r := h.ok("job", "create", "--queue", "mail", "--kind", "send", "--payload", `{"to":"a@b"}`,
			"--request-id", "req-1", "--priority", "7", "--max-attempts", "4", "--run-after", "1h",
			"--meta", "tenant=acme", "--meta", "trace=a=b")
		if !strings.Contains(r.stdout, "Replayed:") || !strings.Contains(r.stdout, j.GetId()) {
			t.Errorf("table output of a replay:\n%s", r.stdout)
		}
		h.fail(exitFail, []string{"ALREADY_EXISTS", "IDEMPOTENCY_CONFLICT"},
			"job", "create", "--queue", "mail", "--kind", "send", "--payload", "different", "--request-id", "req-1")
	})

	t.Run("create with unique flags answers the holder, or fails with --unique-fail", func(t *testing.T) {
		var first, dup leaseholdv1.CreateJobResponse
		h.json(&first, "job", "create", "--queue", "uniq", "--kind", "sync", "--meta", "customer=c1", "--payload", "a",
			"--unique-by-meta", "customer")
		h.json(&dup, "job", "create", "--queue", "uniq", "--kind", "sync", "--meta", "customer=c1", "--payload", "b",
			"--unique-by-meta", "customer")
		if first.GetDuplicate() || !dup.GetDuplicate() || dup.GetJob().GetId() != first.GetJob().GetId() {
			t.Fatalf("first duplicate=%v; second duplicate=%v id %s, want the first %s",
				first.GetDuplicate(), dup.GetDuplicate(), dup.GetJob().GetId(), first.GetJob().GetId())
		}
		r := h.ok("job", "create", "--queue", "uniq", "--kind", "sync", "--meta", "customer=c1", "--unique-by-meta", "customer")
		if !strings.Contains(r.stdout, "Duplicate:") || !strings.Contains(r.stdout, first.GetJob().GetId()) {
			t.Errorf("table output of a duplicate:\n%s", r.stdout)
		}
		h.fail(exitFail, []string{"ALREADY_EXISTS", "UNIQUE_CONFLICT"},
			"job", "create", "--queue", "uniq", "--kind", "sync", "--meta", "customer=c1", "--unique-by-meta", "customer", "--unique-fail")
		var p1, p2 leaseholdv1.CreateJobResponse
		h.json(&p1, "job", "create", "--queue", "uniq", "--kind", "digest", "--unique-key", "d-1", "--unique-period", "1h")
		h.ok("job", "cancel", p1.GetJob().GetId())
		h.json(&p2, "job", "create", "--queue", "uniq", "--kind", "digest", "--unique-key", "d-1", "--unique-period", "1h")
		if !p2.GetDuplicate() || p2.GetJob().GetId() != p1.GetJob().GetId() {
			t.Errorf("within --unique-period after a cancel: duplicate=%v id %s, want %s", p2.GetDuplicate(), p2.GetJob().GetId(), p1.GetJob().GetId())
		}
		h.fail(exitUsage, []string{"--unique-period and --unique-fail need"}, "job", "create", "--queue", "uniq", "--kind", "k", "--unique-fail")
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "unique.period"},
			"job", "create", "--queue", "uniq", "--kind", "k", "--unique-key", "x", "--unique-period", "1ms")
	})

	t.Run("create reads the payload from a file or stdin", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "payload.bin")
		if err := os.WriteFile(path, []byte{0, 1, 2, 0xff}, 0o600); err != nil {
			t.Fatal(err)
		}
		j := h.createJob("--queue", "files", "--kind", "k", "--payload-file", path)
		if string(j.GetPayload()) != "\x00\x01\x02\xff" {
			t.Errorf("payload from file = %q", j.GetPayload())
		}
		var resp leaseholdv1.CreateJobResponse
		r := h.runStdin("from stdin\n", "job", "create", "--queue", "files", "--kind", "k", "--payload-stdin", "--output", "json")
		if r.code != exitOK {
			t.Fatalf("--payload-stdin: exit %d: %s", r.code, r.stderr)
		}
		if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil || string(resp.GetJob().GetPayload()) != "from stdin\n" {
			t.Errorf("payload from stdin = %q (%v)", resp.GetJob().GetPayload(), err)
		}
		// Table view shows binary payloads as base64.
		if r := h.ok("job", "get", j.GetId()); !strings.Contains(r.stdout, "base64:AAEC/w==") {
			t.Errorf("binary payload in table view:\n%s", r.stdout)
		}
		h.fail(exitFail, []string{"payload"}, "job", "create", "--queue", "files", "--kind", "k", "--payload-file", filepath.Join(t.TempDir(), "missing"))
	})

	t.Run("create usage errors exit 2", func(t *testing.T) {
		h.fail(exitUsage, []string{"--queue and --kind are required"}, "job", "create", "--queue", "q")
		h.fail(exitUsage, []string{"at most one of"}, "job", "create", "--queue", "q", "--kind", "k", "--payload", "x", "--payload-stdin")
		h.fail(exitUsage, []string{"want key=value"}, "job", "create", "--queue", "q", "--kind", "k", "--meta", "novalue")
		h.fail(exitUsage, []string{"given twice"}, "job", "create", "--queue", "q", "--kind", "k", "--meta", "a=1", "--meta", "a=2")
		h.fail(exitUsage, []string{"--run-after must not be negative"}, "job", "create", "--queue", "q", "--kind", "k", "--run-after", "-1s")
		h.fail(exitUsage, []string{"invalid value"}, "job", "create", "--queue", "q", "--kind", "k", "--priority", "high")
	})

	t.Run("the server's validation is exit 1 with the field", func(t *testing.T) {
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "priority"}, "job", "create", "--queue", "q", "--kind", "k", "--priority", "5000")
	})

	t.Run("get shows the job and an unknown job is NOT_FOUND", func(t *testing.T) {
		j := h.createJob("--queue", "get", "--kind", "report", "--payload", "hello", "--meta", "owner=ops")
		r := h.ok("job", "get", j.GetId())
		for _, want := range []string{"ID:", j.GetId(), "Queue:", "get", "Kind:", "report", "State:", "QUEUED", "Attempts:", "0 of", "hello", "owner=ops"} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("job get lacks %q:\n%s", want, r.stdout)
			}
		}
		var resp leaseholdv1.GetJobResponse
		h.json(&resp, "job", "get", j.GetId())
		if resp.GetJob().GetId() != j.GetId() || string(resp.GetJob().GetPayload()) != "hello" {
			t.Errorf("job get --output json = %v", &resp)
		}
		h.fail(exitFail, []string{"NOT_FOUND", "JOB_NOT_FOUND"}, "job", "get", missingJobID)
	})

	t.Run("list shows no payloads (the BASIC view) while get shows the payload", func(t *testing.T) {
		j := h.createJob("--queue", "viewed", "--kind", "k", "--payload", "a payload")
		var list leaseholdv1.ListJobsResponse
		h.json(&list, "job", "list", "--queue", "viewed")
		if len(list.GetJobs()) != 1 || list.GetJobs()[0].GetId() != j.GetId() || list.GetJobs()[0].GetPayload() != nil {
			t.Fatalf("job list --queue viewed = %v; want the job without its payload", &list)
		}
		var got leaseholdv1.GetJobResponse
		h.json(&got, "job", "get", j.GetId())
		if string(got.GetJob().GetPayload()) != "a payload" {
			t.Fatalf("job get payload = %q", got.GetJob().GetPayload())
		}
	})

	t.Run("list filters by queue, state and kind and pages", func(t *testing.T) {
		var ids []string
		for i := range 3 {
			ids = append(ids, h.createJob("--queue", "listed", "--kind", []string{"a", "b", "a"}[i]).GetId())
		}
		h.ok("job", "cancel", ids[2])
		var resp leaseholdv1.ListJobsResponse
		h.json(&resp, "job", "list", "--queue", "listed")
		if len(resp.GetJobs()) != 3 || resp.GetJobs()[0].GetId() != ids[2] {
			t.Fatalf("job list --queue listed: %v", &resp)
		}
		h.json(&resp, "job", "list", "--queue", "listed", "--state", "queued", "--kind", "a")
		if len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetId() != ids[0] {
			t.Errorf("queued jobs of kind a: %v", &resp)
		}
		h.json(&resp, "job", "list", "--queue", "listed", "--state", "queued,cancelled")
		if len(resp.GetJobs()) != 3 {
			t.Errorf("--state queued,cancelled: %d jobs", len(resp.GetJobs()))
		}
		h.json(&resp, "job", "list", "--queue", "listed", "--limit", "2")
		if len(resp.GetJobs()) != 2 || resp.GetNextPageToken() == "" {
			t.Fatalf("--limit 2: %v", &resp)
		}
		var next leaseholdv1.ListJobsResponse
		h.json(&next, "job", "list", "--queue", "listed", "--limit", "2", "--page-token", resp.GetNextPageToken())
		if len(next.GetJobs()) != 1 || next.GetJobs()[0].GetId() != ids[0] {
			t.Errorf("second page: %v", &next)
		}
		r := h.ok("job", "list", "--queue", "listed", "--limit", "2")
		if !strings.Contains(r.stdout, "STATE") || !strings.Contains(r.stdout, "CANCELLED") || !strings.Contains(r.stderr, "--page-token") {
			t.Errorf("table listing:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
		h.fail(exitUsage, []string{`unknown state "done"`}, "job", "list", "--state", "done")
		h.fail(exitUsage, []string{"--limit must not be negative"}, "job", "list", "--limit", "-1")
	})

	t.Run("list --filter selects by the filter, ANDed with the flags; a bad filter is INVALID_FILTER", func(t *testing.T) {
		a := h.createJob("--queue", "filtered", "--kind", "a", "--meta", "customer=42").GetId()
		h.createJob("--queue", "filtered", "--kind", "a", "--meta", "customer=7")
		b := h.createJob("--queue", "filtered", "--kind", "b", "--meta", "customer=42").GetId()
		var resp leaseholdv1.ListJobsResponse
		h.json(&resp, "job", "list", "--filter", `queue = filtered AND metadata.customer = "42"`)
		if len(resp.GetJobs()) != 2 || resp.GetJobs()[0].GetId() != b || resp.GetJobs()[1].GetId() != a {
			t.Errorf("--filter customer 42: %v", &resp)
		}
		h.json(&resp, "job", "list", "--kind", "a", "--filter", `queue = filtered AND metadata.customer = "42"`)
		if len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetId() != a {
			t.Errorf("--kind a with --filter customer 42: %v", &resp)
		}
		h.fail(exitFail, []string{"INVALID_ARGUMENT", "INVALID_FILTER", "SLEEPING"}, "job", "list", "--filter", "state = SLEEPING")
	})

	t.Run("cancel cancels a queued job and a final one is FAILED_PRECONDITION", func(t *testing.T) {
		j := h.createJob("--queue", "cancel", "--kind", "k")
		r := h.ok("job", "cancel", j.GetId(), "--reason", "not needed")
		if !strings.Contains(r.stdout, j.GetId()+" cancelled") {
			t.Errorf("cancel output: %s", r.stdout)
		}
		if got := h.getJob(j.GetId()).GetState(); got != leaseholdv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("after cancel: %v", got)
		}
		h.fail(exitFail, []string{"FAILED_PRECONDITION", "JOB_ALREADY_FINAL"}, "job", "cancel", j.GetId())
		h.fail(exitFail, []string{"NOT_FOUND"}, "job", "cancel", missingJobID)
	})

	t.Run("events lists the history in order", func(t *testing.T) {
		j := h.createJob("--queue", "events", "--kind", "k")
		h.ok("job", "cancel", j.GetId(), "--reason", "audit me")
		var resp leaseholdv1.ListJobEventsResponse
		h.json(&resp, "job", "events", j.GetId())
		if len(resp.GetEvents()) != 2 || resp.GetEvents()[0].GetType() != leaseholdv1.EventType_EVENT_TYPE_QUEUED ||
			resp.GetEvents()[1].GetType() != leaseholdv1.EventType_EVENT_TYPE_CANCELLED || resp.GetEvents()[1].GetSequence() != 2 {
			t.Fatalf("events: %v", &resp)
		}
		r := h.ok("job", "events", j.GetId())
		if !strings.Contains(r.stdout, "SEQ") || !strings.Contains(r.stdout, "QUEUED") || !strings.Contains(r.stdout, "CANCELLED") {
			t.Errorf("events table:\n%s", r.stdout)
		}
		h.fail(exitFail, []string{"NOT_FOUND"}, "job", "events", missingJobID)
	})

	t.Run("watch streams events until the job is final", func(t *testing.T) {
		j := h.createJob("--queue", "watch", "--kind", "k")
		stdout, stderr := &testlog.Buffer{}, &testlog.Buffer{}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		done := make(chan int, 1)
		go func() {
			done <- h.cli("", stdout, stderr).run(ctx, []string{"job", "watch", j.GetId(), "--output", "json"})
		}()
		// The first event proves the stream is open; the cancel must then
		// arrive live and end it.
		waitFor(t, ctx, stdout, "EVENT_TYPE_QUEUED")
		h.ok("job", "cancel", j.GetId())
		select {
		case code := <-done:
			if code != exitOK {
				t.Fatalf("watch exit %d: %s", code, stderr.String())
			}
		case <-ctx.Done():
			t.Fatal("watch did not end after the job was cancelled")
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		if len(lines) != 2 {
			t.Fatalf("watch printed %d lines, want 2:\n%s", len(lines), stdout.String())
		}
		var last leaseholdv1.WatchJobResponse
		if err := protojson.Unmarshal([]byte(lines[1]), &last); err != nil || last.GetEvent().GetType() != leaseholdv1.EventType_EVENT_TYPE_CANCELLED {
			t.Errorf("last watched event %v (%v)", &last, err)
		}
		// Watching a finished job replays its history and ends at once.
		r := h.ok("job", "watch", j.GetId())
		if !strings.Contains(r.stdout, "QUEUED") || !strings.Contains(r.stdout, "CANCELLED") {
			t.Errorf("watch of a final job:\n%s", r.stdout)
		}
		h.fail(exitFail, []string{"NOT_FOUND"}, "job", "watch", missingJobID)
	})
}
