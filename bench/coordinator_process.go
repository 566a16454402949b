package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

const (
	// coordinatorStartLimit bounds the wait for SERVING (it migrates first).
	coordinatorStartLimit = 60 * time.Second
	// coordinatorGrace is the coordinator's --shutdown-grace: by the time it
	// is stopped its workers are gone, so there is nothing to drain.
	coordinatorGrace = 5 * time.Second
	// stopLimit bounds each step of stopping a child (graceful, then
	// SIGTERM, then SIGKILL).
	stopLimit = 30 * time.Second
)

// coordinatorProcess is the `leasehold serve` child.
type coordinatorProcess struct {
	addr    string
	cmd     *exec.Cmd
	logPath string
	// exited is closed when the process has exited; waitErr is its
	// outcome.
	exited  chan struct{}
	waitErr error
}

// startCoordinator runs `bin serve --listen <free loopback port> args...`
// with its output in dir/coordinator.log.
func startCoordinator(bin, dir string, args ...string) (*coordinatorProcess, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	logPath := filepath.Join(dir, "coordinator.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	// The HTTP port (metrics, probes) gets a free port too, so that
	// benchmarks never collide with each other or a running coordinator.
	args = append([]string{"serve", "--listen", addr, "--http-listen", "127.0.0.1:0",
		"--shutdown-grace", coordinatorGrace.String()}, args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = childEnv()
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the coordinator: %w", err)
	}
	c := &coordinatorProcess{addr: addr, cmd: cmd, logPath: logPath, exited: make(chan struct{})}
	go func() {
		c.waitErr = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// waitServing watches grpc.health.v1 on conn until SERVING; the
// connection retries until the process listens.
func (c *coordinatorProcess) waitServing(ctx context.Context, conn *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(ctx, coordinatorStartLimit)
	defer cancel()
	go func() {
		select {
		case <-c.exited:
			cancel()
		case <-ctx.Done():
		}
	}()
	stream, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	for err == nil {
		var resp *healthpb.HealthCheckResponse
		if resp, err = stream.Recv(); err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
	}
	select {
	case <-c.exited:
		return fmt.Errorf("the coordinator exited before serving (%w); its log: %s", c.waitErr, c.logPath)
	default:
		return fmt.Errorf("the coordinator on %s is not SERVING: %w (log: %s)", c.addr, err, c.logPath)
	}
}

// stop sends SIGTERM and waits, killing the process past stopLimit.
func (c *coordinatorProcess) stop() error {
	select {
	case <-c.exited:
		return fmt.Errorf("the coordinator had exited already (%w); its log: %s", c.waitErr, c.logPath)
	default:
	}
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	if !waitFor(c.exited, stopLimit) {
		_ = c.cmd.Process.Kill()
		<-c.exited
		return fmt.Errorf("the coordinator did not stop within %s of SIGTERM and was killed", stopLimit)
	}
	if c.waitErr != nil {
		return fmt.Errorf("the coordinator: %w (log: %s)", c.waitErr, c.logPath)
	}
	return nil
}

// kill ends the coordinator at once (error paths).
func (c *coordinatorProcess) kill() {
	select {
	case <-c.exited:
	default:
		_ = c.cmd.Process.Kill()
		<-c.exited
	}
}

func freeAddr() (string, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer lis.Close()
	return lis.Addr().String(), nil
}

// httpListenPattern finds the HTTP address serve logs once it listens
// (it was started with port 0).
var httpListenPattern = regexp.MustCompile(`msg="leasehold http serving[^"]*" http_listen=(\S+)`)

// httpAddr returns the coordinator's HTTP address (metrics), read from
// its log; serve logs it before it serves gRPC, so by SERVING it is there.
func (c *coordinatorProcess) httpAddr() (string, error) {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return "", err
	}
	m := httpListenPattern.FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("the coordinator's log does not say where its HTTP port is (log: %s)", c.logPath)
	}
	return string(m[1]), nil
}
