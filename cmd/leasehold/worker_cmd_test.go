package main

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// execRun is a "worker exec" running in-process in a goroutine, as main
// would run it; cancelling its context is what SIGTERM does in main.
type execRun struct {
	cancel context.CancelFunc
	done   chan int
	stderr *testlog.Buffer
	code   int
	exited bool
}

func (h *harness) startExec(args ...string) *execRun {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &execRun{cancel: cancel, done: make(chan int, 1), stderr: &testlog.Buffer{}}
	go func() {
		r.done <- h.cli("", &testlog.Buffer{}, r.stderr).run(ctx, append([]string{"worker", "exec"}, args...))
	}()
	// Registered after the server's cleanup, so it runs first: the worker
	// stops before its coordinator does.
	h.t.Cleanup(func() { r.stop(h.t) })
	return r
}

// stop cancels the worker and returns its exit code.
func (r *execRun) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	if r.exited {
		return r.code
	}
	select {
	case r.code = <-r.done:
		r.exited = true
	case <-time.After(time.Minute):
		t.Fatalf("worker exec did not stop; stderr:\n%s", r.stderr.String())
	}
	return r.code
}

// mkfifo makes a named pipe: the barrier between a script and the test.
// Opening one blocks until the other end is opened too, so neither side
// needs to poll or sleep.
func mkfifo(t *testing.T, name string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// readFIFO waits for a script to write a line to the FIFO and returns it.
func readFIFO(t *testing.T, path string) string {
	t.Helper()
	type read struct {
		b   []byte
		err error
	}
	ch := make(chan read, 1)
	go func() {
		b, err := os.ReadFile(path)
		ch <- read{b, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		return strings.TrimSpace(string(r.b))
	case <-time.After(time.Minute):
		// Unblock the reader (a writer that opens and closes gives it EOF)
		// so no goroutine is left behind.
		if f, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		<-ch
		t.Fatalf("nothing was written to %s", path)
		return ""
	}
}

// writeFIFO hands a line to a script blocked reading the FIFO.
func writeFIFO(t *testing.T, path, line string) {
	t.Helper()
	ch := make(chan error, 1)
	go func() { ch <- os.WriteFile(path, []byte(line+"\n"), 0o600) }()
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		if f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
		if err := <-ch; err != nil {
			t.Logf("the writer, unblocked: %v", err)
		}
		t.Fatalf("nobody read %s", path)
	}
}

// eventTypes lists a job's event types in order.
func (h *harness) eventTypes(id string) []leaseholdv1.EventType {
	h.t.Helper()
	var resp leaseholdv1.ListJobEventsResponse
	h.json(&resp, "job", "events", id)
	types := make([]leaseholdv1.EventType, len(resp.GetEvents()))
	for i, e := range resp.GetEvents() {
		types[i] = e.GetType()
	}
	return types
}

// outcomes is the script behind the exit-code tests: it acts on the job's
// kind.
const outcomes = `
case "$LEASEHOLD_JOB_KIND" in
ok)
	payload=$(cat)
	printf 'got %s as %s/%s attempt %s of %s, customer %s, id %s' "$payload" \
		"$LEASEHOLD_JOB_QUEUE" "$LEASEHOLD_JOB_KIND" "$LEASEHOLD_ATTEMPT" "$LEASEHOLD_MAX_ATTEMPTS" \
		"$LEASEHOLD_META_CUSTOMER_ID" "$LEASEHOLD_JOB_ID"
	echo "progress: all good" >&2
	;;
flaky)
	echo "attempt $LEASEHOLD_ATTEMPT: upstream timed out" >&2
	exit 1
	;;
bad)
	echo "cannot parse the payload" >&2
	exit 100
	;;
huge)
	head -c 1100000 /dev/zero
	;;
crash)
	kill -KILL $$
	;;
esac
`

func TestWorkerExecOutcomes(t *testing.T) {
	t.Parallel()
	h := setup(t)
	// Two attempts with a tiny, jitter-free delay, so retryable failures
	// reach DEAD quickly.
	h.ok("queue", "set-policy", "exec", "--max-attempts", "2", "--initial-delay", "10ms", "--max-delay", "10ms", "--jitter", "0")
	w := h.startExec("--queue", "exec", "--concurrency", "4", "--worker-id", "exec-outcomes", "--", "sh", "-c", outcomes)

	t.Run("exit 0 succeeds with stdout as the result", func(t *testing.T) {
		j := h.createJob("--queue", "exec", "--kind", "ok", "--payload", "hello", "--meta", "customer-id=c42")
		got := h.waitTerminal(j.GetId())
		want := "got hello as exec/ok attempt 1 of 2, customer c42, id " + j.GetId()
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(got.GetResult()) != want {
			t.Fatalf("job %v; want SUCCEEDED with result %q", got, want)
		}
		waitFor(t, t.Context(), w.stderr, "progress: all good")
		// The table view shows the result too.
		if r := h.ok("job", "get", j.GetId()); !strings.Contains(r.stdout, want) {
			t.Errorf("job get:\n%s", r.stdout)
		}
	})

	t.Run("exit 1 is retried until the budget is spent", func(t *testing.T) {
		j := h.createJob("--queue", "exec", "--kind", "flaky")
		got := h.waitTerminal(j.GetId())
		e := got.GetLastError()
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_DEAD || got.GetAttempts() != 2 || e.GetCode() != "EXIT_1" ||
			!e.GetRetryable() || !strings.Contains(e.GetMessage(), "attempt 2: upstream timed out") {
			t.Fatalf("job %v; want DEAD after 2 attempts with EXIT_1", got)
		}
		types := h.eventTypes(j.GetId())
		want := []leaseholdv1.EventType{
			leaseholdv1.EventType_EVENT_TYPE_QUEUED, leaseholdv1.EventType_EVENT_TYPE_LEASED,
			leaseholdv1.EventType_EVENT_TYPE_RUN_FAILED, leaseholdv1.EventType_EVENT_TYPE_LEASED,
		}
		if len(types) < len(want) || !slices.Equal(types[:len(want)], want) || types[len(types)-1] != leaseholdv1.EventType_EVENT_TYPE_DEAD {
			t.Errorf("events %v: want a failed attempt, a second lease and DEAD", types)
		}
		// It is in the dead-letter queue with both attempts as evidence.
		var dead leaseholdv1.GetDeadJobResponse
		h.json(&dead, "dlq", "show", j.GetId())
		if n := len(dead.GetDeadJob().GetAttempts()); n != 2 {
			t.Errorf("dead job has %d attempts, want 2", n)
		}
	})

	t.Run("exit 100 fails the job for good", func(t *testing.T) {
		j := h.createJob("--queue", "exec", "--kind", "bad")
		got := h.waitTerminal(j.GetId())
		e := got.GetLastError()
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_FAILED || got.GetAttempts() != 1 || e.GetCode() != "EXIT_100" ||
			e.GetRetryable() || !strings.Contains(e.GetMessage(), "cannot parse the payload") {
			t.Fatalf("job %v; want FAILED after 1 attempt with EXIT_100", got)
		}
	})

	t.Run("death by a signal is retryable", func(t *testing.T) {
		j := h.createJob("--queue", "exec", "--kind", "crash")
		got := h.waitTerminal(j.GetId())
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_DEAD || got.GetAttempts() != 2 || got.GetLastError().GetCode() != "SIGNAL_KILL" {
			t.Fatalf("job %v; want DEAD after 2 attempts with SIGNAL_KILL", got)
		}
	})

	t.Run("stdout over the limit fails instead of storing a cut result", func(t *testing.T) {
		j := h.createJob("--queue", "exec", "--kind", "huge")
		got := h.waitTerminal(j.GetId())
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_FAILED || got.GetLastError().GetCode() != execCodeResultTooLarge || len(got.GetResult()) != 0 {
			t.Fatalf("job %v; want FAILED with %s", got, execCodeResultTooLarge)
		}
	})

	t.Run("worker list shows the exec worker", func(t *testing.T) {
		var resp leaseholdv1.ListWorkersResponse
		h.json(&resp, "worker", "list")
		idx := slices.IndexFunc(resp.GetWorkers(), func(w *leaseholdv1.WorkerInfo) bool { return w.GetWorkerId() == "exec-outcomes" })
		if idx < 0 || !slices.Equal(resp.GetWorkers()[idx].GetQueues(), []string{"exec"}) || resp.GetWorkers()[idx].GetCapacity() != 4 {
			t.Fatalf("worker list: %v", &resp)
		}
		r := h.ok("worker", "list")
		if !strings.Contains(r.stdout, "WORKER") || !strings.Contains(r.stdout, "exec-outcomes") {
			t.Errorf("worker list table:\n%s", r.stdout)
		}
	})

	if code := w.stop(t); code != exitOK {
		t.Errorf("worker exec exit %d after a graceful stop; stderr:\n%s", code, w.stderr.String())
	}
}

// stoppable is a job that reports its background process's pid through a
// FIFO, then waits; on SIGTERM it writes a marker and exits.
const stoppable = `
trap 'echo "got TERM" > "$LEASEHOLD_META_MARKER"; exit 143' TERM
sleep 300 &
echo $! > "$LEASEHOLD_META_FIFO"
wait $!
`

// stubborn ignores SIGTERM (after noting it), so only SIGKILL ends it.
const stubborn = `
trap 'echo "ignored TERM" >> "$LEASEHOLD_META_MARKER"' TERM
echo started > "$LEASEHOLD_META_FIFO"
while :; do sleep 1; done
`

// processGone reports whether pid has exited (gone, or a zombie nobody has
// reaped yet).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func TestWorkerExecCancel(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("cancel sends SIGTERM to the whole process group", func(t *testing.T) {
		w := h.startExec("--queue", "cancel", "--worker-id", "exec-cancel", "--", "sh", "-c", stoppable)
		fifo, marker := mkfifo(t, "pid"), filepath.Join(t.TempDir(), "marker")
		j := h.createJob("--queue", "cancel", "--kind", "long", "--meta", "fifo="+fifo, "--meta", "marker="+marker)
		pid, err := strconv.Atoi(readFIFO(t, fifo))
		if err != nil {
			t.Fatal(err)
		}
		// The script is running: the job is leased to the exec worker.
		if got := h.getJob(j.GetId()); got.GetState() != leaseholdv1.JobState_JOB_STATE_LEASED || got.GetLease().GetOwner() != "exec-cancel" {
			t.Fatalf("running job: %v", got)
		}
		r := h.ok("job", "cancel", j.GetId(), "--reason", "operator says stop")
		if !strings.Contains(r.stdout, "cancel requested") {
			t.Errorf("cancel of a running job: %s", r.stdout)
		}
		got := h.waitTerminal(j.GetId())
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("job %v; want CANCELLED", got)
		}
		b, err := os.ReadFile(marker)
		if err != nil || strings.TrimSpace(string(b)) != "got TERM" {
			t.Fatalf("marker %q (%v): the script did not get SIGTERM", b, err)
		}
		// The background sleep, a grandchild, was signalled with the group:
		// the job finished only once it had closed its end of stdout.
		if !processGone(pid) {
			t.Errorf("grandchild %d still runs after the cancel", pid)
		}
		if code := w.stop(t); code != exitOK {
			t.Errorf("worker exec exit %d; stderr:\n%s", code, w.stderr.String())
		}
	})

	t.Run("a child that ignores SIGTERM is killed after --kill-grace", func(t *testing.T) {
		// The grace leaves sh time to run its trap on a loaded machine (sh runs
		// it once its foreground sleep, signalled with the group, has exited).
		w := h.startExec("--queue", "stubborn", "--kill-grace", "2s", "--", "sh", "-c", stubborn)
		fifo, marker := mkfifo(t, "started"), filepath.Join(t.TempDir(), "marker")
		j := h.createJob("--queue", "stubborn", "--kind", "long", "--meta", "fifo="+fifo, "--meta", "marker="+marker)
		readFIFO(t, fifo)
		h.ok("job", "cancel", j.GetId())
		// The script never exits by itself, so CANCELLED means SIGKILL.
		if got := h.waitTerminal(j.GetId()); got.GetState() != leaseholdv1.JobState_JOB_STATE_CANCELLED {
			t.Fatalf("job %v; want CANCELLED", got)
		}
		if b, err := os.ReadFile(marker); err != nil || !strings.Contains(string(b), "ignored TERM") {
			t.Errorf("marker %q (%v): SIGTERM was not sent first", b, err)
		}
		waitFor(t, t.Context(), w.stderr, "killing it")
		w.stop(t)
	})
}

func TestWorkerExecShutdown(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("a running job finishes after the worker is told to stop", func(t *testing.T) {
		const script = `
echo started > "$LEASEHOLD_META_STARTED"
read line < "$LEASEHOLD_META_PROCEED"
printf 'finished after %s' "$line"
`
		w := h.startExec("--queue", "graceful", "--", "sh", "-c", script)
		started, proceed := mkfifo(t, "started"), mkfifo(t, "proceed")
		j := h.createJob("--queue", "graceful", "--kind", "k", "--meta", "started="+started, "--meta", "proceed="+proceed)
		readFIFO(t, started)
		w.cancel() // what SIGTERM does to the real process
		// Let the script finish only once the worker is draining, so the
		// job really completes during the shutdown.
		waitFor(t, t.Context(), w.stderr, "worker stopping")
		writeFIFO(t, proceed, "shutdown")
		if code := w.stop(t); code != exitOK {
			t.Fatalf("worker exec exit %d; stderr:\n%s", code, w.stderr.String())
		}
		got := h.getJob(j.GetId())
		if got.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(got.GetResult()) != "finished after shutdown" {
			t.Fatalf("job %v; want SUCCEEDED by the draining worker", got)
		}
	})

	t.Run("a job still running after --shutdown-grace is stopped and released", func(t *testing.T) {
		w := h.startExec("--queue", "slow", "--shutdown-grace", "200ms", "--", "sh", "-c", stoppable)
		fifo, marker := mkfifo(t, "pid"), filepath.Join(t.TempDir(), "marker")
		j := h.createJob("--queue", "slow", "--kind", "long", "--meta", "fifo="+fifo, "--meta", "marker="+marker)
		readFIFO(t, fifo)
		if code := w.stop(t); code != exitOK {
			t.Fatalf("worker exec exit %d; stderr:\n%s", code, w.stderr.String())
		}
		if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "got TERM" {
			t.Fatalf("marker %q (%v): the script did not get SIGTERM", b, err)
		}
		// Released, not failed: back in the queue for another worker.
		if got := h.getJob(j.GetId()); got.GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED || got.GetLastError() != nil {
			t.Fatalf("job %v; want QUEUED again without an error", got)
		}
	})
}

// TestWorkerExecProcess runs the real binary and presses Ctrl-C: SIGINT to
// the foreground process group, as a terminal does. The job's program is in
// a group of its own, so it does not see the signal and finishes while the
// worker drains.
func TestWorkerExecProcess(t *testing.T) {
	t.Parallel()
	h := setup(t)
	const script = `
echo started > "$LEASEHOLD_META_STARTED"
read line < "$LEASEHOLD_META_PROCEED"
printf 'survived %s' "$line"
`
	cmd := exec.Command(testserver.Binary(t), "worker", "exec", "--addr", h.srv.Addr, "--queue", "proc", "--", "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	stderr := &testlog.Buffer{}
	cmd.Stderr = stderr
	// The job's program inherits stderr but lives in its own group: should
	// the test fail while it runs, Wait must not hang on its open pipe.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exited := make(chan struct{}) // closed once waitErr is set
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		select {
		case <-exited:
		default:
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})

	started, proceed := mkfifo(t, "started"), mkfifo(t, "proceed")
	j := h.createJob("--queue", "proc", "--kind", "k", "--meta", "started="+started, "--meta", "proceed="+proceed)
	readFIFO(t, started)
	if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, t.Context(), stderr, "worker stopping")
	writeFIFO(t, proceed, "ctrl-c")
	select {
	case <-exited:
		if waitErr != nil {
			t.Fatalf("worker exec: %v; stderr:\n%s", waitErr, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatalf("worker exec did not exit after SIGINT; stderr:\n%s", stderr.String())
	}
	got := h.getJob(j.GetId())
	if got.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(got.GetResult()) != "survived ctrl-c" {
		t.Fatalf("job %v; want SUCCEEDED by the draining worker", got)
	}
}

func TestWorkerExecUsage(t *testing.T) {
	t.Parallel()
	h := setup(t)
	h.fail(exitUsage, []string{"--queue is required"}, "worker", "exec", "--", "true")
	h.fail(exitUsage, []string{"missing the command"}, "worker", "exec", "--queue", "q")
	h.fail(exitUsage, []string{"--kill-grace must be positive"}, "worker", "exec", "--queue", "q", "--kill-grace", "0s", "--", "true")
	h.fail(exitUsage, []string{"Capacity"}, "worker", "exec", "--queue", "q", "--concurrency", "-1", "--", "true")
	h.fail(exitUsage, []string{"WorkerID"}, "worker", "exec", "--queue", "q", "--worker-id", "has space", "--", "true")
	h.fail(exitUsage, []string{"--log-level"}, "worker", "exec", "--queue", "q", "--log-level", "loud", "--", "true")
	h.fail(exitFail, []string{"cannot run"}, "worker", "exec", "--queue", "q", "--", filepath.Join(t.TempDir(), "missing"))
}

func TestMetaEnv(t *testing.T) {
	t.Parallel()
	got := metaEnv(map[string]string{"customer-id": "c1", "traceparent": "00-x", "a.b": "dot", "a-b": "dash", "nul": "a\x00b"})
	want := []string{"LEASEHOLD_META_A_B=dot", "LEASEHOLD_META_CUSTOMER_ID=c1", "LEASEHOLD_META_TRACEPARENT=00-x"}
	if !slices.Equal(got, want) {
		t.Errorf("metaEnv = %q, want %q (a.b sorts after a-b and wins)", got, want)
	}
}

// FuzzMetaEnvName checks that any metadata key becomes a valid, portable
// environment variable name.
func FuzzMetaEnvName(f *testing.F) {
	f.Add("customer-id")
	f.Add("ÄÖ.ü")
	f.Add("")
	f.Fuzz(func(t *testing.T, key string) {
		name := metaEnvName(key)
		rest, ok := strings.CutPrefix(name, "LEASEHOLD_META_")
		if !ok {
			t.Fatalf("metaEnvName(%q) = %q", key, name)
		}
		for _, r := range rest {
			if (r < 'A' || r > 'Z') && (r < '0' || r > '9') && r != '_' {
				t.Fatalf("metaEnvName(%q) = %q has %q", key, name, r)
			}
		}
	})
}

func TestChildEnv(t *testing.T) {
	t.Parallel()
	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	job := &worker.Job{ID: "j1", Queue: "q", Kind: "k", Attempt: 2, MaxAttempts: 5,
		Metadata: map[string]string{"x": "1", "traceparent": traceparent},
		Token:    worker.LeaseToken{JobID: "j1", Generation: 7}}
	env := childEnv(t.Context(), []string{"PATH=/bin", "LEASEHOLD_JOB_ID=stale", "LEASEHOLD_META_OLD=stale", "LEASEHOLD_ADDR=keep"}, job)
	for _, want := range []string{"PATH=/bin", "LEASEHOLD_ADDR=keep", "LEASEHOLD_JOB_ID=j1", "LEASEHOLD_JOB_QUEUE=q", "LEASEHOLD_JOB_KIND=k",
		"LEASEHOLD_ATTEMPT=2", "LEASEHOLD_MAX_ATTEMPTS=5", "LEASEHOLD_LEASE_GENERATION=7", "LEASEHOLD_META_X=1",
		"TRACEPARENT=" + traceparent} {
		if !slices.Contains(env, want) {
			t.Errorf("env lacks %s: %q", want, env)
		}
	}
	for _, stale := range []string{"LEASEHOLD_JOB_ID=stale", "LEASEHOLD_META_OLD=stale"} {
		if slices.Contains(env, stale) {
			t.Errorf("env keeps the inherited %s", stale)
		}
	}
}

func TestClassifyExit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		script    string
		code      string
		retryable bool
	}{
		{"exit 0", "EXIT_0", true},
		{"exit 3", "EXIT_3", true},
		{"exit 100", "EXIT_100", false},
		{"kill -TERM $$", "SIGNAL_TERM", true},
		{"kill -KILL $$", "SIGNAL_KILL", true},
	} {
		c := exec.Command("sh", "-c", tc.script)
		var ee *exec.ExitError
		if err := c.Run(); err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		ps := c.ProcessState
		code, retryable := classifyExit(ps)
		if code != tc.code || retryable != tc.retryable {
			t.Errorf("%q: classifyExit = %s, %v; want %s, %v", tc.script, code, retryable, tc.code, tc.retryable)
		}
	}
}

// writeAll writes s to w, which must take all of it: the output buffers
// drop what is over their limit but never refuse a write.
func writeAll(t *testing.T, w io.Writer, s string) {
	t.Helper()
	if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
		t.Fatalf("Write(%q) = %d, %v", s, n, err)
	}
}

func TestOutputBuffers(t *testing.T) {
	t.Parallel()
	b := &boundedBuffer{limit: 5}
	writeAll(t, b, "abc")
	writeAll(t, b, "defg")
	if string(b.bytes()) != "abcde" || !b.truncated() {
		t.Errorf("boundedBuffer = %q, truncated %v", b.bytes(), b.truncated())
	}
	exact := &boundedBuffer{limit: 3}
	writeAll(t, exact, "abc")
	if exact.truncated() {
		t.Error("exactly the limit counts as truncated")
	}
	tail := &tailBuffer{limit: 6}
	writeAll(t, tail, "hello ")
	writeAll(t, tail, "world")
	if got := tail.message(); got != "world" {
		t.Errorf("tail = %q", got)
	}
	writeAll(t, tail, "0123456789")
	if got := tail.message(); got != "456789" {
		t.Errorf("tail after a long write = %q", got)
	}
	if got := (&tailBuffer{limit: 4}).message(); got != "no output on stderr" {
		t.Errorf("empty tail = %q", got)
	}
}
