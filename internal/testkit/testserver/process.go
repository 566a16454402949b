package testserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/leasehold/leasehold/internal/testkit/testlog"
)

// processStartTimeout bounds how long a started binary may take to report
// SERVING (it migrates its database first).
const processStartTimeout = 60 * time.Second

// processStopTimeout bounds how long cleanup waits after SIGTERM before
// killing the process.
const processStopTimeout = 60 * time.Second

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// Binary builds ./cmd/leasehold once per test process and returns the
// binary's path.
//
// The binary lives in the user's cache directory, in a folder of this
// checkout's own (leasehold-test/<hash of the module root>), and is built
// under a file lock there. go build leaves an up-to-date binary alone, so
// the test binaries of one `go test ./...` link it once between them
// instead of once each; a checkout whose code changed relinks it.
func Binary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() { binPath, binErr = buildBinary() })
	if binErr != nil {
		t.Fatalf("testserver: %v", binErr)
	}
	return binPath
}

func buildBinary() (string, error) {
	root := moduleRoot()
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	sum := sha256.Sum256([]byte(root))
	dir := filepath.Join(cache, "leasehold-test", hex.EncodeToString(sum[:8]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer func() { _ = lock.Close() }() // releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	path := filepath.Join(dir, "leasehold")
	cmd := exec.Command("go", "build", "-o", path, "./cmd/leasehold")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/leasehold: %w\n%s", err, out)
	}
	return path, nil
}

// moduleRoot is the repository root: three directories above this file.
func moduleRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}

// Process is a `leasehold serve` process.
type Process struct {
	// Addr is the address it listens on.
	Addr string
	// HTTPAddr is the address of its HTTP port (/metrics, /healthz,
	// /readyz), read from its log; empty when args disabled the port.
	HTTPAddr string
	// Cmd is the running command.
	Cmd *exec.Cmd

	stderr   *testlog.Buffer
	dialOpts []grpc.DialOption // how Dial and the start-up health watch connect
	exited   chan struct{}     // closed when the process has exited
	exitCode int
	waitErr  error
}

// StartProcess runs `leasehold serve --listen 127.0.0.1:<free port>
// --http-listen 127.0.0.1:0 args...` in a temporary working directory (so
// the default ./leasehold.db lands there), waits until its health reports
// SERVING, and stops it with SIGTERM when the test ends (SIGKILL if it does
// not exit in time). A --listen or --http-listen in args wins; the HTTP
// port is never the default 7401, so processes started in parallel do not
// collide. LEASEHOLD_* and OTEL_*
// variables of the test's environment are not passed on: args decide, and
// a developer's tracing setup neither receives test spans nor breaks tests.
func StartProcess(t testing.TB, args ...string) *Process {
	t.Helper()
	return StartProcessEnv(t, nil, args...)
}

// StartProcessEnv is StartProcess with env ("KEY=value" entries) added to
// the process's environment, e.g. OTEL_* settings pointing at a test
// collector.
func StartProcessEnv(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	return StartProcessDial(t, nil, env, args...)
}

// StartProcessDial is StartProcessEnv for a coordinator that needs more
// than a plaintext connection (TLS, client certificates): dialOpts are
// used to watch its health at start and by Dial. Nil means plaintext.
func StartProcessDial(t testing.TB, dialOpts []grpc.DialOption, env []string, args ...string) *Process {
	t.Helper()
	bin := Binary(t)
	addr := listenArg(args)
	if addr == "" {
		var err error
		if addr, err = freeAddr(); err != nil {
			t.Fatalf("testserver: free port: %v", err)
		}
		args = append([]string{"--listen", addr}, args...)
	}
	if _, ok := flagArg(args, "http-listen"); !ok {
		args = append([]string{"--http-listen", "127.0.0.1:0"}, args...)
	}
	p := &Process{Addr: addr, stderr: &testlog.Buffer{}, dialOpts: dialOpts, exited: make(chan struct{})}
	p.Cmd = exec.Command(bin, append([]string{"serve"}, args...)...)
	p.Cmd.Dir = t.TempDir()
	p.Cmd.Stdout = p.stderr
	p.Cmd.Stderr = p.stderr
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "OTEL_") {
			p.Cmd.Env = append(p.Cmd.Env, kv)
		}
	}
	p.Cmd.Env = append(p.Cmd.Env, env...)
	if err := p.Cmd.Start(); err != nil {
		t.Fatalf("testserver: start %s: %v", bin, err)
	}
	go func() {
		err := p.Cmd.Wait()
		p.exitCode = p.Cmd.ProcessState.ExitCode()
		if p.exitCode < 0 {
			p.waitErr = err
		}
		close(p.exited)
	}()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			p.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(processStopTimeout):
				t.Errorf("testserver: leasehold serve did not exit %v after SIGTERM; killing it", processStopTimeout)
				p.Kill()
				<-p.exited
			}
		}
		if t.Failed() {
			t.Logf("leasehold serve output:\n%s", p.Output())
		}
	})
	p.waitServing(t)
	p.HTTPAddr = httpAddrIn(p.Output())
	return p
}

func listenArg(args []string) string {
	v, _ := flagArg(args, "listen")
	return v
}

// flagArg finds --name (or -name) in args, as "--name v" or "--name=v".
func flagArg(args []string, name string) (string, bool) {
	for i, a := range args {
		switch {
		case (a == "--"+name || a == "-"+name) && i+1 < len(args):
			return args[i+1], true
		case strings.HasPrefix(a, "--"+name+"="):
			return strings.TrimPrefix(a, "--"+name+"="), true
		case strings.HasPrefix(a, "-"+name+"="):
			return strings.TrimPrefix(a, "-"+name+"="), true
		}
	}
	return "", false
}

// httpAddrIn reads the HTTP port's bound address from serve's log line
// "leasehold http serving ... http_listen=ADDR" (text or JSON format).
func httpAddrIn(log string) string {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, "leasehold http serving") {
			continue
		}
		for _, key := range []string{"http_listen=", `"http_listen":"`} {
			if i := strings.Index(line, key); i >= 0 {
				rest := line[i+len(key):]
				return strings.TrimRight(strings.Fields(rest)[0], `"},`)
			}
		}
	}
	return ""
}

// waitServing watches grpc.health.v1 until SERVING. The client connection
// retries with backoff until the process listens; Watch pushes the status,
// so there is no polling loop here.
func (p *Process) waitServing(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), processStartTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	conn := dial(t, p.Addr, p.dialOpts...)
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	if err == nil {
		for {
			var resp *healthpb.HealthCheckResponse
			if resp, err = stream.Recv(); err != nil {
				break
			}
			if resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
				cancel()
				return
			}
		}
	}
	select {
	case <-p.exited:
		t.Fatalf("testserver: leasehold serve exited with code %d before serving:\n%s", p.exitCode, p.Output())
	default:
		t.Fatalf("testserver: leasehold serve on %s not SERVING: %v\n%s", p.Addr, err, p.Output())
	}
}

// Signal sends sig to the process.
func (p *Process) Signal(sig os.Signal) { _ = p.Cmd.Process.Signal(sig) }

// Kill kills the process.
func (p *Process) Kill() { _ = p.Cmd.Process.Kill() }

// Wait waits for the process to exit and returns its exit code; err is
// set when it did not exit normally (killed by a signal).
func (p *Process) Wait() (exitCode int, err error) {
	<-p.exited
	return p.exitCode, p.waitErr
}

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Output returns what the process wrote to stdout and stderr so far.
func (p *Process) Output() string { return p.stderr.String() }

// Dial returns a client connection to the process (plaintext unless it was
// started with dial options), closed when the test ends.
func (p *Process) Dial(t testing.TB) *grpc.ClientConn {
	t.Helper()
	return dial(t, p.Addr, p.dialOpts...)
}
