package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
)

// workerProcess is one `leasehold bench worker` child, driven over its
// stdin and stdout (the protocol is on workerMode).
type workerProcess struct {
	id      string
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	logPath string

	// ready is closed when the worker said it is connected.
	ready chan struct{}
	// progress is its latest handler-start count; notify is poked (never
	// blocking) each time it changes.
	progress atomic.Int64
	notify   chan<- struct{}
	// read is closed when stdout has been read to its end; the fields
	// below are written before that and read only after it.
	read     chan struct{}
	starts   []stamp
	acks     []stamp
	ended    bool
	protoErr error
	// exited is closed when the process has exited; waitErr is its
	// outcome.
	exited  chan struct{}
	waitErr error
}

// startWorkerProcess starts worker id against addr, its stderr in dir;
// extra are more worker flags (see workerMode).
func startWorkerProcess(bin, dir, id, addr string, capacity int, notify chan<- struct{}, extra ...string) (*workerProcess, error) {
	logPath := filepath.Join(dir, id+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	args := append([]string{"bench", workerMode, "--addr", addr, "--id", id, "--capacity", strconv.Itoa(capacity)}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stderr = logFile
	cmd.SysProcAttr = childSysProcAttr()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &workerProcess{
		id: id, cmd: cmd, stdin: stdin, logPath: logPath,
		ready: make(chan struct{}), notify: notify,
		read: make(chan struct{}), exited: make(chan struct{}),
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker %s: %w", id, err)
	}
	go p.readStdout(stdout)
	go func() {
		// Wait only after stdout is read to its end: Wait closes the pipe.
		<-p.read
		p.waitErr = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *workerProcess) readStdout(r io.Reader) {
	defer close(p.read)
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	readyOnce := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 0 {
			continue
		}
		switch {
		case fields[0] == lineReady && !readyOnce:
			readyOnce = true
			close(p.ready)
		case fields[0] == lineProgress && len(fields) == 2:
			if n, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
				p.progress.Store(n)
				select {
				case p.notify <- struct{}{}:
				default:
				}
			}
		case (fields[0] == lineStart || fields[0] == lineAck) && len(fields) == 3:
			at, err := strconv.ParseInt(fields[2], 10, 64)
			if err != nil {
				p.protoErr = fmt.Errorf("worker %s: bad line %q", p.id, sc.Text())
				continue
			}
			if fields[0] == lineStart {
				p.starts = append(p.starts, stamp{id: fields[1], at: at})
			} else {
				p.acks = append(p.acks, stamp{id: fields[1], at: at})
			}
		case fields[0] == lineEnd && len(fields) == 3:
			ns, err1 := strconv.Atoi(fields[1])
			na, err2 := strconv.Atoi(fields[2])
			if err1 != nil || err2 != nil || ns != len(p.starts) || na != len(p.acks) {
				p.protoErr = fmt.Errorf("worker %s: end line %q does not match the %d starts and %d acks read", p.id, sc.Text(), len(p.starts), len(p.acks))
			}
			p.ended = true
		default:
			p.protoErr = fmt.Errorf("worker %s: unexpected line %q", p.id, sc.Text())
		}
	}
	if err := sc.Err(); err != nil && p.protoErr == nil {
		p.protoErr = fmt.Errorf("worker %s: read stdout: %w", p.id, err)
	}
	// Drain whatever is left so the child never blocks on a full pipe.
	_, _ = io.Copy(io.Discard, r)
}

// waitReady waits until the worker is connected.
func (p *workerProcess) waitReady(ctx context.Context) error {
	select {
	case <-p.ready:
		return nil
	case <-p.read:
		return fmt.Errorf("worker %s exited before it was ready (log: %s)", p.id, p.logPath)
	case <-ctx.Done():
		return fmt.Errorf("worker %s not ready: %w", p.id, context.Cause(ctx))
	}
}

// begin tells the worker to start taking work.
func (p *workerProcess) begin() error {
	if _, err := io.WriteString(p.stdin, lineGo+"\n"); err != nil {
		return fmt.Errorf("start worker %s: %w", p.id, err)
	}
	return nil
}

// requestStop closes the worker's stdin, which shuts it down gracefully.
func (p *workerProcess) requestStop() { _ = p.stdin.Close() }

// stop requests a stop and waits for the worker; past timeout it sends
// SIGTERM, and past another timeout kills it. It returns an error unless
// the worker exited 0 and reported its whole list of instants.
func (p *workerProcess) stop(timeout time.Duration) error {
	p.requestStop()
	if !waitFor(p.exited, timeout) {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		if !waitFor(p.exited, timeout) {
			_ = p.cmd.Process.Kill()
			<-p.exited
			return fmt.Errorf("worker %s did not stop within %s of SIGTERM and was killed", p.id, timeout)
		}
	}
	if p.waitErr != nil {
		return fmt.Errorf("worker %s: %w (log: %s)", p.id, p.waitErr, p.logPath)
	}
	if p.protoErr != nil {
		return p.protoErr
	}
	if !p.ended {
		return fmt.Errorf("worker %s exited without its end line (log: %s)", p.id, p.logPath)
	}
	return nil
}

// kill ends the worker at once (error paths).
func (p *workerProcess) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		_ = p.stdin.Close()
		<-p.exited
	}
}

func waitFor(ch <-chan struct{}, timeout time.Duration) bool {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

// childEnv is this process's environment without LEASEHOLD_* and OTEL_*:
// the flags decide, and a developer's tracing set-up neither slows the
// run nor receives its spans.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		// LEASEHOLD_PPROF and the workers' profile directory pass, so
		// that a run can be profiled (they change nothing else).
		profiling := strings.HasPrefix(kv, "LEASEHOLD_PPROF=") || strings.HasPrefix(kv, envCPUProfile+"=")
		if profiling || !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	return env
}
