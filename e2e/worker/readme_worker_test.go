package worker_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// readmeProgram returns the Go program between the sdk-example markers of
// README.md, exactly as written.
func readmeProgram(t *testing.T, repo string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	start := strings.Index(readme, "<!-- sdk-example:start -->")
	end := strings.Index(readme, "<!-- sdk-example:end -->")
	if start < 0 || end < start {
		t.Fatal("README.md has no sdk-example markers")
	}
	block := readme[start:end]
	open := strings.Index(block, "```go\n")
	closing := strings.LastIndex(block, "```")
	if open < 0 || closing <= open {
		t.Fatal("the sdk-example has no ```go block")
	}
	return block[open+len("```go\n") : closing]
}

// body returns the lines of the function declared by header in src,
// without its braces and with one level of indentation removed.
func body(t *testing.T, src, header string) []string {
	t.Helper()
	i := strings.Index(src, header)
	if i < 0 {
		t.Fatalf("no %q in the source", header)
	}
	var out []string
	for _, line := range strings.Split(src[i+len(header):], "\n")[1:] {
		if line == "}" {
			return out
		}
		out = append(out, strings.TrimPrefix(line, "\t"))
	}
	t.Fatalf("%q is not closed", header)
	return nil
}

// The README's ten-line worker is the worker package's Example, so the
// program a reader copies is one that compiles with every change.
func TestREADMEWorkerIsTheSDKExample(t *testing.T) {
	t.Parallel()
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")
	readme := body(t, readmeProgram(t, repo), "func main() {")
	src, err := os.ReadFile(filepath.Join(repo, "worker", "example_worker_test.go"))
	if err != nil {
		t.Fatal(err)
	}
	example := body(t, string(src), "func Example() {")
	if strings.Join(readme, "\n") != strings.Join(example, "\n") {
		t.Fatalf("README's main differs from Example in worker/example_worker_test.go:\nREADME:\n%s\n\nExample:\n%s",
			strings.Join(readme, "\n"), strings.Join(example, "\n"))
	}
}

// The README's worker, built as a user would after `go get` (its own
// module, this repository replacing the published one), runs a job and
// exits 0 on Ctrl-C: a clean shutdown is not an error.
func TestREADMEWorkerRunsAJobAndExitsZeroOnInterrupt(t *testing.T) {
	t.Parallel()
	h := setup(t, setupOptions{})
	_, file, _, _ := runtime.Caller(0)
	repo := filepath.Join(filepath.Dir(file), "..", "..")

	// The program as written, but for the address: the README's is the
	// default port, which this test's coordinator does not own.
	src := readmeProgram(t, repo)
	if !strings.Contains(src, `"127.0.0.1:7400"`) {
		t.Fatal(`the README worker no longer dials "127.0.0.1:7400"; update this test`)
	}
	src = strings.Replace(src, `"127.0.0.1:7400"`, `"`+h.srv.Addr+`"`, 1)

	dir := t.TempDir()
	gomod := "module readmeworker\n\ngo 1.26.0\n\nrequire github.com/leasehold/leasehold v0.0.0\n\nreplace github.com/leasehold/leasehold => " + repo + "\n"
	sum, err := os.ReadFile(filepath.Join(repo, "go.sum"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{"go.mod": []byte(gomod), "go.sum": sum, "main.go": []byte(src)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "worker")
	build := exec.CommandContext(context.Background(), "go", "build", "-mod=mod", "-o", bin, ".")
	build.Dir = dir
	// Only the module cache: the test must not need the network.
	build.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build of the README worker: %v\n%s", err, out)
	}

	cmd := exec.CommandContext(context.Background(), bin)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	waited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(waited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // an error when it has exited already
		<-waited
	})

	job := h.create("emails", "send-welcome", "ada@example.com")
	done := h.waitJob(job.GetId(), "SUCCEEDED", func(j *leaseholdv1.Job) bool {
		return j.GetState() == leaseholdv1.JobState_JOB_STATE_SUCCEEDED
	})
	if string(done.GetResult()) != "sent" {
		t.Fatalf("result %q, want sent", done.GetResult())
	}

	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
		if waitErr != nil {
			t.Fatalf("the README worker exited with %v after Ctrl-C, want 0:\n%s", waitErr, out.String())
		}
	case <-time.After(waitTimeout):
		_ = cmd.Process.Kill()
		<-waited // the output is complete once Wait has returned
		t.Fatalf("the README worker did not exit within %s of Ctrl-C:\n%s", waitTimeout, out.String())
	}
}
