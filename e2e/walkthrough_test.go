package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// walkthroughAddr is where the README walkthrough expects the coordinator:
// the default of `leasehold serve`. Only this test listens there.
const walkthroughAddr = "127.0.0.1:7400"

// walkthroughScript returns the shell blocks between the walkthrough
// markers of README.md, exactly as written.
func walkthroughScript(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "<!-- walkthrough:start -->")
	end := strings.Index(readme, "<!-- walkthrough:end -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no walkthrough markers")
	}
	var script strings.Builder
	in := false
	for _, line := range strings.Split(readme[start:end], "\n") {
		switch {
		case !in && strings.TrimSpace(line) == "```sh":
			in = true
		case in && strings.TrimSpace(line) == "```":
			in = false
		case in:
			script.WriteString(line + "\n")
		}
	}
	if !strings.Contains(script.String(), "grpcurl") {
		t.Fatal("the walkthrough has no grpcurl commands")
	}
	return script.String()
}

// grpcurlPath makes grpcurl findable the way a developer would have it: on
// PATH, in the repository's ./.bin (make tools), or in GOPATH/bin.
func grpcurlPath(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	dirs := []string{filepath.Join(filepath.Dir(file), "..", ".bin")}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		dirs = append(dirs, filepath.Join(strings.TrimSpace(string(out)), "bin"))
	}
	path := strings.Join(append(dirs, os.Getenv("PATH")), string(os.PathListSeparator))
	for _, d := range filepath.SplitList(path) {
		if _, err := os.Stat(filepath.Join(d, "grpcurl")); err == nil {
			return path
		}
	}
	t.Fatal("grpcurl not found on PATH, in ./.bin or GOPATH/bin: run `make tools`")
	return ""
}

func TestREADMEWalkthroughRunsAsWritten(t *testing.T) {
	// The block is run as written but against a free port: CI must not
	// depend on 7400 being free. Only the address is substituted.
	script := walkthroughScript(t)
	if !strings.Contains(script, walkthroughAddr) {
		t.Fatalf("the walkthrough does not talk to %s, the default address", walkthroughAddr)
	}
	path := grpcurlPath(t)
	p := testserver.StartProcess(t)
	script = strings.ReplaceAll(script, walkthroughAddr, p.Addr)

	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "PATH="+path)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("walkthrough failed: %v\n%s", err, out)
	}
	for _, want := range []string{"JOB_STATE_QUEUED", `"jobId"`, "JOB_STATE_SUCCEEDED",
		"EVENT_TYPE_QUEUED", "EVENT_TYPE_LEASED", "EVENT_TYPE_SUCCEEDED"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("walkthrough output lacks %s:\n%s", want, out)
		}
	}

	// The server agrees: one job, SUCCEEDED, with its three events.
	c := newClients(p.Dial(t))
	list, err := c.jobs.ListJobs(ctxT(t), &leaseholdv1.ListJobsRequest{Queue: "emails", View: leaseholdv1.JobView_JOB_VIEW_FULL})
	if err != nil || len(list.GetJobs()) != 1 {
		t.Fatalf("jobs in emails = %v, %v; want 1", list, err)
	}
	job := list.GetJobs()[0]
	if job.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(job.GetResult()) != "done" || string(job.GetPayload()) != "hello" {
		t.Fatalf("walkthrough job = %v", job)
	}
	want := []leaseholdv1.EventType{
		leaseholdv1.EventType_EVENT_TYPE_QUEUED, leaseholdv1.EventType_EVENT_TYPE_LEASED, leaseholdv1.EventType_EVENT_TYPE_SUCCEEDED,
	}
	if got := eventTypes(t, c, job.GetId()); !equalTypes(got, want) {
		t.Fatalf("events = %v, want %v", got, want)
	}
}
