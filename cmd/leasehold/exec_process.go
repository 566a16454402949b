package main

// Running one job's program: start it in its own process group, wait for
// it, and stop the whole group when the handler's context ends.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"syscall"
	"time"

	"github.com/leasehold/leasehold/worker"
)

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
	case <-waited: //nolint:errcheck // as below
	case <-grace.C:
		r.logger.WarnContext(ctx, "job's process group ignored SIGTERM; killing it", slog.String("job_id", job.ID),
			slog.Duration("kill_grace", r.killGrace))
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-waited //nolint:errcheck // stopped: the exit status (a signal) is not the outcome, cause is
	}
}
