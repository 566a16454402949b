package main

// "worker exec" turns any program into a worker. The Go SDK holds the
// lease (stream, credits, heartbeats, reconnects, graceful shutdown); this
// file only maps one job onto one run of the program:
//
//   - the payload is the child's standard input;
//   - the job's identity and metadata are environment variables;
//   - standard output (at most execResultMaxBytes) is the job's result;
//   - standard error is passed through, and its tail is the error message;
//   - the exit status is the outcome: 0 succeeded, execExitNonRetryable (100)
//     failed for good, anything else (a signal included) retryable, reported
//     with the code EXIT_<n> or SIGNAL_<NAME> so queue policies can
//     reclassify by code.
//
// The child runs in its own process group. When the handler's context ends
// (cancel requested, lease lost, or the shutdown grace has passed) the whole
// group gets SIGTERM, then SIGKILL after --kill-grace. Being its own group
// also keeps a terminal's Ctrl-C away from running jobs, so a graceful
// shutdown lets them finish.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.opentelemetry.io/otel/propagation"
	"golang.org/x/sys/unix"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// worker exec's defaults.
const (
	// execKillGraceDefault is how long a signalled child has between SIGTERM
	// and SIGKILL.
	execKillGraceDefault = 10 * time.Second
	// execConcurrencyDefault is 1, not the SDK's 10: an arbitrary program
	// is not known to be safe to run many times at once on one host.
	execConcurrencyDefault = 1
)

func (c *cli) workerCommand() *cobra.Command {
	return c.group("worker", "List workers; exec a program as a worker",
		c.workerListCommand(),
		c.workerExecCommand(),
	)
}

func (c *cli) workerListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List workers connected to the coordinator",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				workers, err := client.ListWorkers(ctx)
				if err != nil {
					return err
				}
				return out.list(page{resp: &leaseholdv1.ListWorkersResponse{Workers: workers}, header: workerHeader, rows: rows(workers, workerRow)})
			})
		},
	}
}

// execFlags are worker exec's own flags.
type execFlags struct {
	queues        commaList
	concurrency   int
	leaseDuration time.Duration
	workerID      string
	killGrace     time.Duration
	shutdownGrace time.Duration
	labels        []string
	logLevel      string
}

func (c *cli) workerExecCommand() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec --queue Q [--queue Q2] [--concurrency N] [--lease-duration D] [--worker-id ID] [--kill-grace D] -- CMD [ARGS...]",
		Short: "Run a program once per job",
		Long: "Run CMD once per job: payload on stdin, metadata in LEASEHOLD_* env vars, stdout is the result.\n" +
			"Exit 0 succeeds the job, 100 fails it for good, anything else (or a signal) is retried.\n" +
			"On cancel or lease loss the child's process group gets SIGTERM, then SIGKILL after --kill-grace.\n" +
			"SIGTERM or SIGINT stops taking jobs and lets running ones finish within --shutdown-grace.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("missing the command to run: worker exec --queue Q -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.runWorkerExec(cmd.Context(), &f, args)
		},
	}
	fs := cmd.Flags()
	// The first argument that is not a flag starts the command line to
	// run, whose own flags must not be taken for ours.
	fs.SetInterspersed(false)
	fs.Var(&f.queues, "queue", "`queue` to take jobs from; repeatable or comma-separated (required)")
	fs.IntVar(&f.concurrency, "concurrency", execConcurrencyDefault, "most copies of CMD running at once")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 0, "lease asked for each job, renewed while CMD runs; 0 = the queue's (30s by default)")
	fs.StringVar(&f.workerID, "worker-id", "", "this worker's identity (default hostname-pid)")
	fs.DurationVar(&f.killGrace, "kill-grace", execKillGraceDefault, "time between SIGTERM and SIGKILL when a job is stopped")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", worker.ShutdownGraceDefault, "on SIGTERM/SIGINT, how long running jobs may finish before they are stopped and released")
	fs.StringArrayVar(&f.labels, "label", nil, "`key=value` shown in \"worker list\"; repeatable")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logLevels, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// logLevels are the values of every --log-level flag.
var logLevels = []string{"debug", "info", "warn", "error"}

// runWorkerExec runs argv once per job until ctx (SIGTERM/SIGINT in main)
// is done and the running jobs have finished or been released.
func (c *cli) runWorkerExec(ctx context.Context, f *execFlags, argv []string) error {
	if len(f.queues) == 0 {
		return usagef("--queue is required")
	}
	if f.killGrace <= 0 {
		return usagef("--kill-grace must be positive")
	}
	labels, err := parseKeyValues("label", f.labels)
	if err != nil {
		return usagef("%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	// Fail now rather than once per job when the program cannot be found.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("cannot run %q: %w", argv[0], err)
	}

	// Children's stderr, the SDK's log and our own messages share the
	// stream; lockedWriter keeps each write whole.
	stderr := &lockedWriter{w: c.stderr}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := worker.Config{
		WorkerID:      f.workerID,
		Queues:        f.queues,
		Capacity:      f.concurrency,
		LeaseDuration: f.leaseDuration,
		ShutdownGrace: f.shutdownGrace,
		Labels:        labels,
		Logger:        logger,
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usagef("%v", err)
	}
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err := worker.New(conn, cfg)
	if err != nil {
		return usagef("%v", err)
	}
	r := &execRunner{
		path:      path,
		argv:      slices.Clone(argv),
		killGrace: f.killGrace,
		stderr:    stderr,
		baseEnv:   os.Environ(),
		logger:    logger,
	}
	w.HandleAny(r.handle)
	logger.InfoContext(ctx, "worker exec started", slog.String("command", strings.Join(argv, " ")),
		slog.Any("queues", []string(f.queues)), slog.Int("concurrency", f.concurrency), slog.String("addr", c.global.addr))
	if err := w.Run(ctx); err != nil {
		return err
	}
	logger.InfoContext(ctx, "worker exec stopped")
	return nil
}

// execRunner runs the program for one job per handler call; it is shared
// by the SDK's concurrent handlers and holds no mutable state.
type execRunner struct {
	path      string   // resolved argv[0]
	argv      []string // as given, argv[0] included
	killGrace time.Duration
	stderr    io.Writer // shared, safe for concurrent writes
	baseEnv   []string  // the worker's environment
	logger    *slog.Logger
}

// handle is the worker.Handler: one run of the program.
func (r *execRunner) handle(ctx context.Context, job *worker.Job) ([]byte, error) {
	child := exec.Command(r.path, r.argv[1:]...)
	child.Args = r.argv
	child.Env = childEnv(ctx, r.baseEnv, job)
	child.Stdin = bytes.NewReader(job.Payload)
	stdout := &boundedBuffer{limit: execResultMaxBytes}
	tail := &tailBuffer{limit: execStderrTailBytes}
	child.Stdout = stdout
	child.Stderr = io.MultiWriter(r.stderr, tail)
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// A grandchild that outlives the child may hold stdout or stderr open;
	// WaitDelay stops Wait from waiting on those pipes for ever.
	child.WaitDelay = r.killGrace
	if err := child.Start(); err != nil {
		return nil, worker.WithCode(execCodeStart, worker.Retryable(fmt.Errorf("start %s: %w", r.argv[0], err)))
	}

	waited := make(chan error, 1)
	go func() { waited <- child.Wait() }()
	select {
	case waitErr := <-waited:
		return r.outcome(ctx, job, child, waitErr, stdout, tail)
	case <-ctx.Done():
		stopped := context.Cause(ctx)
		r.stop(ctx, job, child.Process.Pid, stopped, waited)
		// The SDK decides what the outcome means (acknowledge a cancel,
		// publish nothing after a lost lease, release on shutdown); it only
		// needs an error that carries the cause.
		return nil, fmt.Errorf("%s stopped: %w", r.argv[0], stopped)
	}
}

// stop signals the job's process group, SIGTERM then SIGKILL after
// killGrace, and returns once the child has been waited for.
func (r *execRunner) stop(ctx context.Context, job *worker.Job, pgid int, cause error, waited <-chan error) {
	// Setpgid with Pgid 0: the group is named after the child's pid.
	r.logger.InfoContext(ctx, "stopping job's process group", slog.String("job_id", job.ID),
		slog.Int("pgid", pgid), slog.String("cause", cause.Error()))
	// The group outlives the child only while a member is alive, and a
	// group id is not reused while it is in use, so signalling the group
	// reaches exactly this job's processes. ESRCH (all gone) is fine.
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	grace := time.NewTimer(r.killGrace)
	defer grace.Stop()
	select {
	case <-waited:
	case <-grace.C:
		r.logger.WarnContext(ctx, "job's process group ignored SIGTERM; killing it", slog.String("job_id", job.ID),
			slog.Duration("kill_grace", r.killGrace))
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-waited
	}
}

// worker exec's contract.
const (
	// execExitNonRetryable is the exit status that ends a job FAILED. It is
	// outside the codes shells and common tools use for their own errors
	// (1, 2, 126, 127, 128+n), so a crash never reads as "give up".
	execExitNonRetryable = 100
	// execResultMaxBytes bounds the captured standard output, the server's
	// default payload (and result) limit. Output beyond it fails the
	// attempt: a cut result would be stored as if it were whole.
	execResultMaxBytes = 1 << 20
	// execStderrTailBytes is how much of the end of standard error becomes
	// the error message of a failed attempt.
	execStderrTailBytes = 4 << 10
)

// Error codes reported by worker exec besides EXIT_<n> and SIGNAL_<NAME>.
const (
	execCodeStart          = "EXEC_START"
	execCodeResultTooLarge = "RESULT_TOO_LARGE"
	execCodeIO             = "EXEC_IO"
)

// outcome classifies a child that ended by itself.
func (r *execRunner) outcome(ctx context.Context, job *worker.Job, child *exec.Cmd, waitErr error, stdout *boundedBuffer, tail *tailBuffer) ([]byte, error) {
	if errors.Is(waitErr, exec.ErrWaitDelay) {
		// The child exited, but something it started kept its output open
		// past --kill-grace; the exit status is still the child's answer.
		r.logger.WarnContext(ctx, "job's output stayed open after the command exited; ignoring the rest",
			slog.String("job_id", job.ID))
		waitErr = nil
		if !child.ProcessState.Success() {
			waitErr = &exec.ExitError{ProcessState: child.ProcessState}
		}
	}
	var exitErr *exec.ExitError
	switch {
	case waitErr == nil:
		if stdout.truncated() {
			return nil, worker.WithCode(execCodeResultTooLarge, worker.NonRetryable(fmt.Errorf(
				"%s wrote more than %d bytes to stdout; the result would be cut", r.argv[0], execResultMaxBytes)))
		}
		return stdout.bytes(), nil
	case errors.As(waitErr, &exitErr):
		code, retryable := classifyExit(exitErr.ProcessState)
		err := fmt.Errorf("%s: %s", exitErr.ProcessState, tail.message())
		if retryable {
			return nil, worker.WithCode(code, worker.Retryable(err))
		}
		return nil, worker.WithCode(code, worker.NonRetryable(err))
	default:
		return nil, worker.WithCode(execCodeIO, worker.Retryable(fmt.Errorf("run %s: %w", r.argv[0], waitErr)))
	}
}

// classifyExit maps how a child ended to an error code and whether the
// job may be retried: 100 is final, everything else is retryable.
func classifyExit(ps *os.ProcessState) (code string, retryable bool) {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		name := strings.TrimPrefix(unix.SignalName(ws.Signal()), "SIG")
		if name == "" {
			name = strconv.Itoa(int(ws.Signal()))
		}
		return "SIGNAL_" + name, true
	}
	n := ps.ExitCode()
	return "EXIT_" + strconv.Itoa(n), n != execExitNonRetryable
}

// childEnv is the worker's environment, minus any LEASEHOLD_ job variables
// it inherited (they would describe some other job), plus this job's.
func childEnv(ctx context.Context, base []string, job *worker.Job) []string {
	env := make([]string, 0, len(base)+8+len(job.Metadata))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if isJobEnvName(name) {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"LEASEHOLD_JOB_ID="+job.ID,
		"LEASEHOLD_JOB_KIND="+job.Kind,
		"LEASEHOLD_JOB_QUEUE="+job.Queue,
		"LEASEHOLD_ATTEMPT="+strconv.Itoa(int(job.Attempt)),
		"LEASEHOLD_MAX_ATTEMPTS="+strconv.Itoa(int(job.MaxAttempts)),
		"LEASEHOLD_LEASE_GENERATION="+strconv.FormatInt(job.Token.Generation, 10),
	)
	env = append(env, metaEnv(job.Metadata)...)
	// Trace context in the OpenTelemetry environment carrier (TRACEPARENT,
	// TRACESTATE) so an instrumented program joins the trace: the handler
	// span's when this process traces, otherwise the producer's from the
	// job metadata.
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if carrier.Get("traceparent") == "" {
		carrier = propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(
			propagation.TraceContext{}.Extract(context.Background(), propagation.MapCarrier(job.Metadata)), carrier)
	}
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := carrier.Get(k); v != "" {
			env = append(env, strings.ToUpper(k)+"="+v)
		}
	}
	return env
}

// isJobEnvName reports the variables worker exec sets per job.
func isJobEnvName(name string) bool {
	switch name {
	case "LEASEHOLD_JOB_ID", "LEASEHOLD_JOB_KIND", "LEASEHOLD_JOB_QUEUE", "LEASEHOLD_ATTEMPT",
		"LEASEHOLD_MAX_ATTEMPTS", "LEASEHOLD_LEASE_GENERATION", "TRACEPARENT", "TRACESTATE":
		return true
	}
	return strings.HasPrefix(name, "LEASEHOLD_META_")
}

// metaEnv turns metadata into LEASEHOLD_META_<KEY> variables: the key
// upper-cased, every character other than A-Z and 0-9 replaced by "_".
// When two keys map to the same name, the one that sorts last wins, so the
// result does not depend on map order. Values with NUL bytes cannot be
// passed in an environment and are left out (the API refuses them anyway).
func metaEnv(meta map[string]string) []string {
	keys := make([]string, 0, len(meta))
	for k := range meta {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	byName := make(map[string]string, len(keys))
	var names []string
	for _, k := range keys {
		v := meta[k]
		if strings.IndexByte(v, 0) >= 0 {
			continue
		}
		name := metaEnvName(k)
		if _, seen := byName[name]; !seen {
			names = append(names, name)
		}
		byName[name] = v
	}
	env := make([]string, len(names))
	for i, n := range names {
		env[i] = n + "=" + byName[n]
	}
	return env
}

// metaEnvName is the variable name for a metadata key.
func metaEnvName(key string) string {
	var b strings.Builder
	b.WriteString("LEASEHOLD_META_")
	for _, r := range strings.ToUpper(key) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// boundedBuffer keeps the first limit bytes written and counts the rest,
// always accepting the write so the child never blocks on a full pipe.
type boundedBuffer struct {
	limit int
	mu    sync.Mutex // guards buf and total: os/exec's copier writes, handle reads
	buf   []byte
	total int
}

func (b *boundedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if room := b.limit - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	b.total += len(p)
	return len(p), nil
}

func (b *boundedBuffer) truncated() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total > b.limit
}

func (b *boundedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.buf)
}

// tailBuffer keeps the last limit bytes written.
type tailBuffer struct {
	limit int
	mu    sync.Mutex // guards buf
	buf   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(p) >= t.limit {
		t.buf = append(t.buf[:0], p[len(p)-t.limit:]...)
		return len(p), nil
	}
	if over := len(t.buf) + len(p) - t.limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return len(p), nil
}

// message is the tail as an error message, or a note that there was none.
func (t *tailBuffer) message() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(strings.ToValidUTF8(string(t.buf), "\uFFFD"))
	if s == "" {
		return "no output on stderr"
	}
	return s
}

// lockedWriter serialises writes from concurrent children and the logger.
type lockedWriter struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
