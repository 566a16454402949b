package main

// Mapping how a job's program ended onto the job's outcome: its result, or
// an error with a code and whether it may be retried.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/leasehold/leasehold/worker"
)

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
