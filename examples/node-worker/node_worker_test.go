// Package nodeworker_test runs the Node.js example worker (worker.js) as a
// real process against a real coordinator process, and checks from the
// coordinator's side that every job it handled reached the expected terminal
// state with the expected history.
//
// The test needs Node.js. Without it, the test fails when CI=true (.ci/run
// installs Node, so CI always runs it) and is skipped otherwise, so that
// `make test` runs it wherever Node is present.
package nodeworker_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/otlptest"
	"github.com/leasehold/leasehold/internal/testkit/testcert"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	// leaseSeconds is the lease the worker asks for: short, so that a job
	// outliving it proves renewals work and a withheld heartbeat loses it
	// within the test's time budget.
	leaseSeconds = 2
	// demoRetryAfter is the retry-after worker.js sends with DEMO_TRANSIENT.
	demoRetryAfter = 250 * time.Millisecond
	// workerTimeout bounds one worker run; the jobs below need about 6 s.
	workerTimeout = 45 * time.Second
	// npmTimeout bounds `npm ci` when node_modules is missing.
	npmTimeout = 3 * time.Minute
)

// TestNodeWorkerHandlesEveryOutcome gives the Node worker one job for each
// path through its loop and checks each job's terminal state and exact event
// history:
//
//   - plain jobs complete on the first attempt;
//   - a job that works longer than the lease completes on the first attempt,
//     which only renewals make possible;
//   - {"fail": true} with max_attempts 2 reports DEMO_TRANSIENT twice, waits
//     at least the worker's retry-after in between, and ends DEAD;
//   - a job whose first attempt withholds heartbeats loses its lease: the
//     worker's late Complete is answered LEASE_LOST and dropped, the second
//     attempt completes, and exactly one success is recorded;
//   - a payload that is not JSON fails non-retryably (FAILED);
//   - a job cancelled while it runs is acknowledged with Cancel.
func TestNodeWorkerHandlesEveryOutcome(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout+npmTimeout)
	defer cancel()

	srv := startCoordinator(t)
	conn := dial(t, srv.Addr)
	jobs := pb.NewJobServiceClient(conn)
	admin := pb.NewAdminServiceClient(conn)
	const queue = "node-demo"

	// Fast, jitter-free backoff so that the worker's 250 ms retry-after is
	// the longer delay and therefore the one the coordinator must honour.
	if _, err := admin.UpdateQueuePolicy(ctx, &pb.UpdateQueuePolicyRequest{Policy: &pb.QueuePolicy{
		Queue: queue,
		Retry: &pb.RetryPolicy{
			MaxAttempts:    5,
			InitialDelay:   durationpb.New(50 * time.Millisecond),
			MaxDelay:       durationpb.New(time.Second),
			Multiplier:     1,
			JitterFraction: proto.Float64(0),
		},
	}}); err != nil {
		t.Fatalf("UpdateQueuePolicy: %v", err)
	}

	create := func(name, payload string, maxAttempts int32) string {
		t.Helper()
		res, err := jobs.CreateJob(ctx, &pb.CreateJobRequest{
			RequestId: "node-worker-test/" + name,
			Job:       &pb.JobSpec{Queue: queue, Kind: "demo", Payload: []byte(payload), MaxAttempts: maxAttempts},
		})
		if err != nil {
			t.Fatalf("CreateJob %s: %v", name, err)
		}
		return res.GetJob().GetId()
	}
	plain1 := create("plain-1", `{"n": 1}`, 0)
	plain2 := create("plain-2", `{"n": 2}`, 0)
	long := create("long", `{"work_ms": 2500}`, 0)
	flaky := create("flaky", `{"fail": true}`, 2)
	partitioned := create("partitioned", `{"work_ms": 2500, "partition_on_attempt": 1}`, 0)
	bad := create("bad-payload", `not json`, 0)
	cancelled := create("cancelled", `{"work_ms": 60000}`, 0)
	// One handling per attempt: the flaky and the partitioned job run twice.
	const handlings = 9

	ensureDeps(ctx, t)
	w := startWorker(ctx, t, node, map[string]string{
		"LEASEHOLD_ADDR":          srv.Addr,
		"LEASEHOLD_QUEUE":         queue,
		"LEASEHOLD_WORKER_ID":     "node-test-worker",
		"LEASEHOLD_MAX_JOBS":      strconv.Itoa(handlings),
		"LEASEHOLD_CONCURRENCY":   "2",
		"LEASEHOLD_LEASE_SECONDS": strconv.Itoa(leaseSeconds),
		// A short long-poll bounds how late the worker sees a rescheduled or
		// expired job if the coordinator only wakes long-polls on new jobs.
		"LEASEHOLD_WAIT_SECONDS": "1",
	})

	// Cancel the long-running job once the worker holds it; the worker learns
	// it at its next renewal and acknowledges.
	waitForEvent(t, w, jobs, cancelled, pb.EventType_EVENT_TYPE_LEASED)
	if _, err := jobs.CancelJob(ctx, &pb.CancelJobRequest{JobId: cancelled, Reason: "test cancels a running job"}); err != nil {
		t.Fatalf("CancelJob: %v", err)
	}

	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exited with %d, want 0 after %d handlings\n%s", code, handlings, w.output())
	}
	logs := w.logs(t)

	type want struct {
		state    pb.JobState
		attempts int32
		events   []pb.EventType
	}
	const (
		queued         = pb.EventType_EVENT_TYPE_QUEUED
		leased         = pb.EventType_EVENT_TYPE_LEASED
		succeeded      = pb.EventType_EVENT_TYPE_SUCCEEDED
		runFailed      = pb.EventType_EVENT_TYPE_RUN_FAILED
		dead           = pb.EventType_EVENT_TYPE_DEAD
		failed         = pb.EventType_EVENT_TYPE_FAILED
		leaseExpired   = pb.EventType_EVENT_TYPE_LEASE_EXPIRED
		cancelReq      = pb.EventType_EVENT_TYPE_CANCEL_REQUESTED
		cancelledEvent = pb.EventType_EVENT_TYPE_CANCELLED
	)
	wants := map[string]want{
		plain1:      {pb.JobState_JOB_STATE_SUCCEEDED, 1, []pb.EventType{queued, leased, succeeded}},
		plain2:      {pb.JobState_JOB_STATE_SUCCEEDED, 1, []pb.EventType{queued, leased, succeeded}},
		long:        {pb.JobState_JOB_STATE_SUCCEEDED, 1, []pb.EventType{queued, leased, succeeded}},
		flaky:       {pb.JobState_JOB_STATE_DEAD, 2, []pb.EventType{queued, leased, runFailed, leased, runFailed, dead}},
		partitioned: {pb.JobState_JOB_STATE_SUCCEEDED, 2, []pb.EventType{queued, leased, leaseExpired, leased, succeeded}},
		bad:         {pb.JobState_JOB_STATE_FAILED, 1, []pb.EventType{queued, leased, failed}},
		cancelled:   {pb.JobState_JOB_STATE_CANCELLED, 1, []pb.EventType{queued, leased, cancelReq, cancelledEvent}},
	}
	got := map[string]*pb.Job{}
	events := map[string][]*pb.Event{}
	for id, wt := range wants {
		res, err := jobs.GetJob(ctx, &pb.GetJobRequest{JobId: id})
		if err != nil {
			t.Fatalf("GetJob %s: %v", id, err)
		}
		j := res.GetJob()
		got[id] = j
		events[id] = listEvents(ctx, t, jobs, id)
		if j.GetState() != wt.state || j.GetAttempts() != wt.attempts {
			t.Errorf("job %s (payload %q): state %v after %d attempts, want %v after %d", id, j.GetPayload(), j.GetState(), j.GetAttempts(), wt.state, wt.attempts)
		}
		if types := eventTypes(events[id]); !slices.Equal(types, wt.events) {
			t.Errorf("job %s (payload %q): events %v, want %v", id, j.GetPayload(), types, wt.events)
		}
	}

	// Completed jobs carry the handler's JSON result from the attempt that
	// succeeded.
	type result struct {
		Kind     string          `json:"kind"`
		Attempt  int32           `json:"attempt"`
		Renewals int             `json:"renewals"`
		Echo     json.RawMessage `json:"echo"`
	}
	results := map[string]result{}
	for _, id := range []string{plain1, plain2, long, partitioned} {
		var r result
		if err := json.Unmarshal(got[id].GetResult(), &r); err != nil {
			t.Fatalf("job %s result %q is not the handler's JSON: %v", id, got[id].GetResult(), err)
		}
		results[id] = r
	}
	if r := results[plain1]; r.Kind != "demo" || r.Attempt != 1 || !jsonEqual(r.Echo, `{"n": 1}`) {
		t.Errorf("plain-1 result = %+v, want kind demo, attempt 1, echo {\"n\":1}", r)
	}
	// Working 2.5 s on a 2 s lease and still succeeding on attempt 1 is only
	// possible if the heartbeat renewed the lease; the count says it did.
	if r := results[long]; r.Attempt != 1 || r.Renewals < 1 {
		t.Errorf("long job result = %+v, want attempt 1 with at least one renewal", r)
	}
	if r := results[partitioned]; r.Attempt != 2 {
		t.Errorf("partitioned job result = %+v, want it from attempt 2 (attempt 1 lost its lease)", r)
	}
	if g := got[partitioned].GetLease().GetGeneration(); g != 2 {
		t.Errorf("partitioned job lease generation = %d, want 2", g)
	}

	// The retryable failure is recorded as the worker reported it.
	le := got[flaky].GetLastError()
	if le.GetCode() != "DEMO_TRANSIENT" || le.GetMessage() != "demo failure on attempt 2" || !le.GetRetryable() {
		t.Errorf("flaky job last_error = %v, want DEMO_TRANSIENT / \"demo failure on attempt 2\" / retryable", le)
	}
	fe := events[flaky]
	if len(fe) == 6 {
		for _, i := range []int{2, 4} {
			if !strings.Contains(fe[i].GetDataJson(), "DEMO_TRANSIENT") {
				t.Errorf("flaky job event %d (%v) data %s does not name DEMO_TRANSIENT", fe[i].GetSequence(), fe[i].GetType(), fe[i].GetDataJson())
			}
		}
		// The policy's own delay is 50 ms; only the worker's retry-after
		// explains a longer gap before the second claim.
		if gap := fe[3].GetTime().AsTime().Sub(fe[2].GetTime().AsTime()); gap < demoRetryAfter {
			t.Errorf("second attempt of the flaky job was claimed %v after the failure, want at least the retry-after %v", gap, demoRetryAfter)
		}
	}
	if le := got[bad].GetLastError(); le.GetCode() != "BAD_PAYLOAD" || le.GetRetryable() {
		t.Errorf("bad-payload job last_error = %v, want BAD_PAYLOAD, not retryable", le)
	}

	// The worker's own account: the LEASE_LOST answer was recognised from its
	// ErrorInfo and only the partitioned job's first generation was dropped;
	// the cancel was acknowledged; it stopped after exactly 9 handlings.
	var lost, acks, done []logLine
	for _, l := range logs {
		switch l.Msg {
		case "lease lost; dropping job":
			lost = append(lost, l)
		case "cancel requested; acknowledging":
			acks = append(acks, l)
		case "job done":
			done = append(done, l)
		}
	}
	if len(lost) != 1 || lost[0].JobID != partitioned || lost[0].Generation != "1" || lost[0].Reason != "LEASE_LOST" {
		t.Errorf("lease-lost log lines = %+v, want one for job %s generation 1 with reason LEASE_LOST", lost, partitioned)
	}
	if len(acks) != 1 || acks[0].JobID != cancelled {
		t.Errorf("cancel log lines = %+v, want one for job %s", acks, cancelled)
	}
	outcomes := map[string]int{}
	for _, l := range done {
		outcomes[l.Outcome]++
	}
	wantOutcomes := map[string]int{"succeeded": 4, "queued": 1, "dead": 1, "lease_lost": 1, "failed": 1, "cancelled": 1}
	if len(done) != handlings || !maps.Equal(outcomes, wantOutcomes) {
		t.Errorf("worker handled %d jobs with outcomes %v, want %d with %v", len(done), outcomes, handlings, wantOutcomes)
	}
	if t.Failed() {
		t.Logf("worker output:\n%s", w.output())
	}
}

// TestNodeWorkerReleasesOnSIGTERM stops the worker while it holds a job: the
// job goes back to the queue through Release, without spending the attempt,
// and the worker exits 0.
func TestNodeWorkerReleasesOnSIGTERM(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout+npmTimeout)
	defer cancel()

	srv := startCoordinator(t)
	jobs := pb.NewJobServiceClient(dial(t, srv.Addr))
	res, err := jobs.CreateJob(ctx, &pb.CreateJobRequest{Job: &pb.JobSpec{Queue: "node-release", Kind: "demo", Payload: []byte(`{"work_ms": 60000}`)}})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	id := res.GetJob().GetId()

	ensureDeps(ctx, t)
	w := startWorker(ctx, t, node, map[string]string{
		"LEASEHOLD_ADDR":          srv.Addr,
		"LEASEHOLD_QUEUE":         "node-release",
		"LEASEHOLD_WORKER_ID":     "node-release-worker",
		"LEASEHOLD_LEASE_SECONDS": "30",
	})
	// Wait for the worker's own word that it holds the job: the coordinator's
	// LEASED event commits before the Claim answer reaches the worker, and a
	// worker stopped in between never learns of the lease (it just expires).
	w.waitForLog(t, "job claimed", id)
	if err := w.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatalf("SIGTERM the worker: %v", err)
	}
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exited with %d after SIGTERM, want 0\n%s", code, w.output())
	}

	got, err := jobs.GetJob(ctx, &pb.GetJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("GetJob: %v", err)
	}
	j := got.GetJob()
	wantEvents := []pb.EventType{pb.EventType_EVENT_TYPE_QUEUED, pb.EventType_EVENT_TYPE_LEASED, pb.EventType_EVENT_TYPE_RELEASED}
	if types := eventTypes(listEvents(ctx, t, jobs, id)); j.GetState() != pb.JobState_JOB_STATE_QUEUED || j.GetAttempts() != 0 || !slices.Equal(types, wantEvents) {
		t.Errorf("after SIGTERM the job is %v with %d attempts and events %v, want QUEUED, 0 attempts, events %v\n%s",
			j.GetState(), j.GetAttempts(), types, wantEvents, w.output())
	}
}

// The worker continues the producer's trace: the job's traceparent goes
// out as gRPC metadata on its Complete, so the coordinator's span of that
// call is a child of the producer's span, and the group commit that applied
// it links to that span.
func TestNodeWorkerContinuesTheTrace(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout+npmTimeout)
	defer cancel()

	col := otlptest.Start(t)
	srv := testserver.StartProcessEnv(t, []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.HTTPEndpoint,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_BSP_SCHEDULE_DELAY=100",
		"OTEL_METRICS_EXPORTER=none",
	})
	const (
		traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
		parentID = "00f067aa0ba902b7"
	)
	jobs := pb.NewJobServiceClient(dial(t, srv.Addr))
	res, err := jobs.CreateJob(ctx, &pb.CreateJobRequest{Job: &pb.JobSpec{
		Queue: "node-traced", Kind: "demo", Payload: []byte(`{"n": 1}`),
		Metadata: map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"},
	}})
	if err != nil {
		t.Fatalf("CreateJob: %v", err)
	}
	id := res.GetJob().GetId()

	ensureDeps(ctx, t)
	w := startWorker(ctx, t, node, map[string]string{
		"LEASEHOLD_ADDR":      srv.Addr,
		"LEASEHOLD_QUEUE":     "node-traced",
		"LEASEHOLD_WORKER_ID": "node-traced-worker",
		"LEASEHOLD_MAX_JOBS":  "1",
	})
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exited with %d, want 0\n%s", code, w.output())
	}
	// Exit comes after the final flush: the spans have arrived by then.
	srv.Signal(syscall.SIGTERM)
	if code, err := srv.Wait(); code != 0 || err != nil {
		t.Fatalf("coordinator exited %d, %v", code, err)
	}

	var complete *otlptest.Span
	var names []string
	spans := col.Spans()
	for _, s := range spans {
		names = append(names, s.GetName())
		if s.GetName() == "leasehold.v1.WorkerService/Complete" && s.GetKind() == tracepb.Span_SPAN_KIND_SERVER {
			complete = &s
		}
	}
	if complete == nil {
		t.Fatalf("no Complete server span for job %s among %v", id, names)
	}
	if got, parent := hex.EncodeToString(complete.GetTraceId()), hex.EncodeToString(complete.GetParentSpanId()); got != traceID || parent != parentID {
		t.Errorf("Complete span in trace %s under %s, want the producer's trace %s under its span %s", got, parent, traceID, parentID)
	}
	linked := false
	for _, s := range spans {
		for _, l := range s.GetLinks() {
			if s.GetName() == "leasehold.commit reports" && bytes.Equal(l.GetSpanId(), complete.GetSpanId()) {
				linked = true
			}
		}
	}
	if !linked {
		t.Errorf("no commit span links to the Complete span; spans %v", names)
	}
}

// requireNode returns the node binary, or ends the test when there is none:
// a failure in CI, which must run this test, a skip elsewhere.
func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		return node
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("node is not on PATH, and CI=true: CI must run the Node.js example (.ci/run installs Node): %v", err)
	}
	t.Skip("node is not on PATH: the Node.js example test is run by make test when Node is present (and always in CI)")
	return ""
}

var (
	depsOnce sync.Once
	depsErr  error
	depsOut  []byte
)

// ensureDeps installs the locked npm dependencies when node_modules is
// missing, once per test process.
func ensureDeps(ctx context.Context, t *testing.T) {
	t.Helper()
	depsOnce.Do(func() {
		if _, err := os.Stat(filepath.Join("node_modules", "@grpc", "grpc-js", "package.json")); err == nil {
			return
		}
		npm, err := exec.LookPath("npm")
		if err != nil {
			depsErr = err
			return
		}
		ctx, cancel := context.WithTimeout(ctx, npmTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "ci", "--no-audit", "--no-fund")
		depsOut, depsErr = cmd.CombinedOutput()
	})
	if depsErr != nil {
		t.Fatalf("installing the example's npm dependencies (npm ci in %s): %v\n%s", mustAbs(t, "."), depsErr, depsOut)
	}
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// startCoordinator runs `leasehold serve` as a real process on the embedded
// SQLite default; StartProcess runs it in a temporary directory, so the
// database file is the test's own.
func startCoordinator(t *testing.T) *testserver.Process {
	t.Helper()
	return testserver.StartProcess(t)
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// workerProcess is a running `node worker.js`.
type workerProcess struct {
	cmd    *exec.Cmd
	stdout *testlog.Buffer // JSON log lines
	stderr *testlog.Buffer // Node's own complaints, if any
	done   chan struct{}   // closed when the process has exited
	err    error           // cmd.Wait's error, set before done is closed
}

func startWorker(ctx context.Context, t *testing.T, node string, env map[string]string) *workerProcess {
	t.Helper()
	cmd := exec.Command(node, "worker.js")
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	w := &workerProcess{cmd: cmd, stdout: &testlog.Buffer{}, stderr: &testlog.Buffer{}, done: make(chan struct{})}
	cmd.Stdout = w.stdout
	cmd.Stderr = w.stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node worker.js: %v", err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	// Whatever happens to the test, the worker does not outlive it; its
	// output is shown when the test failed.
	t.Cleanup(func() {
		select {
		case <-w.done:
		default:
			_ = cmd.Process.Kill()
			<-w.done
		}
		if t.Failed() {
			t.Logf("node worker output:\n%s", w.output())
		}
	})
	go func() {
		// Kill a worker that overstays the context so that wait returns.
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		case <-w.done:
		}
	}()
	return w
}

// wait waits for the worker to exit, at most workerTimeout, and returns its
// exit code.
func (w *workerProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-w.done:
	case <-time.After(workerTimeout):
		_ = w.cmd.Process.Kill()
		<-w.done
		t.Fatalf("node worker did not exit within %v\n%s", workerTimeout, w.output())
	}
	var exit *exec.ExitError
	if errors.As(w.err, &exit) {
		return exit.ExitCode()
	}
	if w.err != nil {
		t.Fatalf("node worker: %v", w.err)
	}
	return 0
}

// output is everything the worker wrote, for failure messages.
func (w *workerProcess) output() string {
	return "stdout:\n" + w.stdout.String() + "stderr:\n" + w.stderr.String()
}

// logLine is one JSON log line of worker.js (the attributes the test reads).
type logLine struct {
	Msg        string `json:"msg"`
	JobID      string `json:"job_id"`
	Generation string `json:"generation"`
	Reason     string `json:"reason"`
	Outcome    string `json:"outcome"`
}

// logs parses the worker's stdout; every line must be a JSON log line.
func (w *workerProcess) logs(t *testing.T) []logLine {
	t.Helper()
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(w.stdout.String()))
	for sc.Scan() {
		var l logLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("worker output line %q is not a JSON log line: %v", sc.Text(), err)
		}
		lines = append(lines, l)
	}
	return lines
}

// waitForLog waits until the worker logs msg for job id. It fails the test
// if the worker exits first or takes longer than workerTimeout.
func (w *workerProcess) waitForLog(t *testing.T, msg, id string) {
	t.Helper()
	logged := func(out string) bool {
		for line := range strings.Lines(out) {
			var l logLine
			if json.Unmarshal([]byte(line), &l) == nil && l.Msg == msg && l.JobID == id {
				return true
			}
		}
		return false
	}
	timeout := time.After(workerTimeout)
	for {
		out, changed := w.stdout.Snapshot()
		if logged(out) {
			return
		}
		select {
		case <-changed:
		case <-w.done:
			// Wait has copied all output by now: one last look.
			if logged(w.stdout.String()) {
				return
			}
			t.Fatalf("worker exited before logging %q for job %s\n%s", msg, id, w.output())
		case <-timeout:
			t.Fatalf("worker did not log %q for job %s within %v\n%s", msg, id, workerTimeout, w.output())
		}
	}
}

// waitForEvent watches a job until an event of the given type arrives. It
// fails the test if the worker exits first or the stream ends without it.
func waitForEvent(t *testing.T, w *workerProcess, jobs pb.JobServiceClient, id string, typ pb.EventType) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout)
	defer cancel()
	go func() {
		// An exited worker will never produce the event: stop watching.
		select {
		case <-w.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	stream, err := jobs.WatchJob(ctx, &pb.WatchJobRequest{JobId: id})
	if err != nil {
		t.Fatalf("WatchJob %s: %v", id, err)
	}
	for {
		res, err := stream.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				t.Fatalf("job %s finished without a %v event\n%s", id, typ, w.output())
			}
			t.Fatalf("watching job %s for %v: %v\n%s", id, typ, err, w.output())
		}
		if res.GetEvent().GetType() == typ {
			return
		}
	}
}

func listEvents(ctx context.Context, t *testing.T, jobs pb.JobServiceClient, id string) []*pb.Event {
	t.Helper()
	var all []*pb.Event
	var after int64
	for {
		res, err := jobs.ListJobEvents(ctx, &pb.ListJobEventsRequest{JobId: id, AfterSequence: after})
		if err != nil {
			t.Fatalf("ListJobEvents %s: %v", id, err)
		}
		all = append(all, res.GetEvents()...)
		if !res.GetHasMore() || len(res.GetEvents()) == 0 {
			return all
		}
		after = res.GetEvents()[len(res.GetEvents())-1].GetSequence()
	}
}

func eventTypes(events []*pb.Event) []pb.EventType {
	types := make([]pb.EventType, len(events))
	for i, e := range events {
		types[i] = e.GetType()
	}
	return types
}

func jsonEqual(got json.RawMessage, want string) bool {
	var a, b any
	return json.Unmarshal(got, &a) == nil && json.Unmarshal([]byte(want), &b) == nil && reflect.DeepEqual(a, b)
}

// TestNodeWorkerOverTLSWithAnAPIKey runs the worker against a coordinator
// serving TLS with --auth api-key: it trusts the coordinator through
// LEASEHOLD_TLS_CA_FILE and authenticates with LEASEHOLD_API_KEY (a
// worker-role key made offline). It also refuses, as misconfiguration, to
// send a key in clear text to a non-loopback address.
func TestNodeWorkerOverTLSWithAnAPIKey(t *testing.T) {
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), workerTimeout+npmTimeout)
	defer cancel()

	ca := testcert.NewCA(t, "node")
	srv := ca.Server(t, "server")
	db := filepath.Join(t.TempDir(), "leasehold.db")
	producerKey := offlineKey(t, db, "producer")
	workerKey := offlineKey(t, db, "worker")
	p := testserver.StartProcessDial(t, []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(ca.ClientTLS(t, nil)))}, nil,
		"--sqlite-path", db, "--auth", "api-key", "--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile)
	conn, err := worker.Dial(p.Addr, worker.DialConfig{CAFile: ca.CertFile, APIKey: producerKey})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	jobs := pb.NewJobServiceClient(conn)
	var ids []string
	for i := range 2 {
		res, err := jobs.CreateJob(ctx, &pb.CreateJobRequest{Job: &pb.JobSpec{Queue: "node-tls", Kind: "demo", Payload: []byte(`{"n": ` + strconv.Itoa(i) + `}`)}})
		if err != nil {
			t.Fatalf("CreateJob: %v", err)
		}
		ids = append(ids, res.GetJob().GetId())
	}

	ensureDeps(ctx, t)
	w := startWorker(ctx, t, node, map[string]string{
		"LEASEHOLD_ADDR":         p.Addr,
		"LEASEHOLD_QUEUE":        "node-tls",
		"LEASEHOLD_WORKER_ID":    "node-tls-worker",
		"LEASEHOLD_MAX_JOBS":     "2",
		"LEASEHOLD_WAIT_SECONDS": "1",
		"LEASEHOLD_TLS_CA_FILE":  ca.CertFile,
		"LEASEHOLD_API_KEY":      workerKey,
	})
	if code := w.wait(t); code != 0 {
		t.Fatalf("worker exited with %d, want 0 after 2 jobs\n%s", code, w.output())
	}
	for _, id := range ids {
		res, err := jobs.GetJob(ctx, &pb.GetJobRequest{JobId: id})
		if err != nil || res.GetJob().GetState() != pb.JobState_JOB_STATE_SUCCEEDED {
			t.Errorf("job %s: %v, %v; want SUCCEEDED", id, res.GetJob().GetState(), err)
		}
	}

	refused := startWorker(ctx, t, node, map[string]string{
		"LEASEHOLD_ADDR":    "coordinator.example:7400",
		"LEASEHOLD_QUEUE":   "node-tls",
		"LEASEHOLD_API_KEY": workerKey,
	})
	if code := refused.wait(t); code != 2 || !strings.Contains(refused.stderr.String(), "refusing to send LEASEHOLD_API_KEY without TLS") {
		t.Errorf("an API key in clear text beyond loopback: exit %d, want 2\n%s", code, refused.output())
	}
}

// offlineKey makes an API key with `leasehold key create --sqlite-path`.
func offlineKey(t *testing.T, db, role string) string {
	t.Helper()
	out, err := exec.Command(testserver.Binary(t), "key", "create", "--sqlite-path", db, "--role", role, "--tenant", "node").Output()
	if err != nil {
		t.Fatalf("leasehold key create: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return strings.TrimSpace(strings.TrimPrefix(lines[len(lines)-1], "Key:"))
}
