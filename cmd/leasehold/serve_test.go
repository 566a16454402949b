package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
)

// serveRun is `leasehold serve` running in-process until cancel.
type serveRun struct {
	addr     string
	httpAddr string // "" when the HTTP port is disabled
	stderr   *testlog.Buffer
	cancel   context.CancelFunc
	code     chan int
}

func freeListenAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// startServe runs `serve args...` with env as the whole environment and
// waits for its "serving" log line. Unless env or args choose one, the
// HTTP port is a free one (never the default 7401, which parallel tests
// would fight over).
func startServe(t *testing.T, env map[string]string, args ...string) *serveRun {
	t.Helper()
	if _, set := env["LEASEHOLD_HTTP_LISTEN"]; !set && !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--http-listen") }) {
		args = append([]string{"--http-listen", "127.0.0.1:0"}, args...)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &serveRun{stderr: &testlog.Buffer{}, cancel: cancel, code: make(chan int, 1)}
	c := &cli{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: r.stderr, getenv: func(k string) string { return env[k] }}
	go func() { r.code <- c.run(ctx, append([]string{"serve"}, args...)) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.code:
		case <-time.After(time.Minute):
			t.Error("serve did not return after cancel")
		}
	})
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	waitFor(t, wctx, r.stderr, "leasehold coordinator serving")
	r.addr = logValue(r.stderr.String(), "leasehold coordinator serving", "listen")
	r.httpAddr = logValue(r.stderr.String(), "leasehold http serving", "http_listen")
	return r
}

// logValue is the value of key= on the first text log line containing msg,
// or "".
func logValue(log, msg, key string) string {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, msg) {
			continue
		}
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, key+"="); ok {
				return v
			}
		}
	}
	return ""
}

func (r *serveRun) stop(t *testing.T) int {
	t.Helper()
	r.cancel()
	select {
	case code := <-r.code:
		r.code <- code
		return code
	case <-time.After(time.Minute):
		t.Fatal("serve did not return after cancel")
		return -1
	}
}

func dialServe(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestServeOnSQLiteFromTheEnvironmentThenShutsDownWithExitZero(t *testing.T) {
	t.Parallel()
	addr := freeListenAddr(t)
	dbPath := filepath.Join(t.TempDir(), "env.db")
	r := startServe(t, map[string]string{"LEASEHOLD_LISTEN": addr, "LEASEHOLD_SQLITE_PATH": dbPath}, "--shutdown-grace", "2s")
	if r.addr != addr || !strings.Contains(r.stderr.String(), "engine=sqlite") {
		t.Fatalf("serving line does not name %s and sqlite:\n%s", addr, r.stderr.String())
	}
	conn := dialServe(t, addr)
	ctx := context.Background()
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v", h, err)
	}
	v, err := leaseholdv1.NewWorkerServiceClient(conn).GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	if err != nil || v.GetVersion() != Version || v.GetStoreEngine() != "sqlite" || v.GetApiVersion() != "leasehold.v1" {
		t.Fatalf("GetVersion = %v, %v", v, err)
	}
	if _, err := os.Stat(dbPath); err != nil {
		t.Fatalf("the SQLite file was not created: %v", err)
	}
	if code := r.stop(t); code != exitOK {
		t.Fatalf("exit code after the signal = %d, want 0\n%s", code, r.stderr.String())
	}
	if !strings.Contains(r.stderr.String(), "leasehold coordinator stopped") {
		t.Fatalf("no shutdown log:\n%s", r.stderr.String())
	}
}

func TestServeOnPostgresAppliesMigrations(t *testing.T) {
	t.Parallel()
	url := pgtest.Schema(t)
	r := startServe(t, map[string]string{"LEASEHOLD_DATABASE_URL": url}, "--listen", freeListenAddr(t), "--tenant", "acme")
	if !strings.Contains(r.stderr.String(), "engine=postgres") {
		t.Fatalf("serving line does not name postgres:\n%s", r.stderr.String())
	}
	conn := dialServe(t, r.addr)
	ctx := context.Background()
	created, err := leaseholdv1.NewJobServiceClient(conn).CreateJob(ctx, &leaseholdv1.CreateJobRequest{
		Job: &leaseholdv1.JobSpec{Queue: "q", Kind: "k"},
	})
	if err != nil || created.GetJob().GetState() != leaseholdv1.JobState_JOB_STATE_QUEUED {
		t.Fatalf("create on a freshly migrated database = %v, %v", created, err)
	}
	if code := r.stop(t); code != exitOK {
		t.Fatalf("exit code = %d\n%s", code, r.stderr.String())
	}
}

func TestServeAndMigrateRejectBadUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"serve", "--log-level", "loud"},
		{"serve", "--shutdown-grace", "0s"},
		{"serve", "extra"},
		{"migrate", "--bogus"},
		{"migrate", "--database-url", "::not a url::"},
	} {
		var stderr bytes.Buffer
		c := &cli{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }}
		if code := c.run(context.Background(), args); code != exitUsage {
			t.Errorf("%v: exit %d, want %d (stderr %q)", args, code, exitUsage, stderr.String())
		}
	}
}

func TestServeFailsWhenTheAddressIsTaken(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	var stderr bytes.Buffer
	c := &cli{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(string) string { return "" }}
	code := c.run(context.Background(), []string{"serve", "--listen", lis.Addr().String(), "--sqlite-path", filepath.Join(t.TempDir(), "x.db")})
	if code != exitFail || !strings.Contains(stderr.String(), "cannot listen") {
		t.Fatalf("exit %d, stderr %q; want 1 and a listen error", code, stderr.String())
	}
}

func TestMigrateAppliesEachEngineAndIsIdempotent(t *testing.T) {
	t.Parallel()
	dbPath := filepath.Join(t.TempDir(), "m.db")
	url := pgtest.Schema(t)
	for _, args := range [][]string{
		{"migrate", "--sqlite-path", dbPath},
		{"migrate", "--sqlite-path", dbPath},
		{"migrate", "--database-url", url},
		{"migrate", "--database-url", url},
	} {
		var stdout, stderr bytes.Buffer
		c := &cli{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
		if code := c.run(context.Background(), args); code != exitOK || !strings.Contains(stdout.String(), "schema is up to date") {
			t.Fatalf("%v: exit %d, stdout %q, stderr %q", args, code, stdout.String(), stderr.String())
		}
	}
	if _, err := os.Stat(dbPath); err != nil {
		t.Fatalf("migrate did not create the SQLite file: %v", err)
	}
}

// Every limit flag has its LEASEHOLD_* variable: set from the environment,
// a limit is in force; a flag given on the command line wins over it.
func TestServeTakesItsLimitsFromTheEnvironmentAndFlags(t *testing.T) {
	t.Parallel()
	r := startServe(t, map[string]string{
		"LEASEHOLD_SQLITE_PATH": filepath.Join(t.TempDir(), "limits.db"),
		"LEASEHOLD_UNARY_RATE":  "0.5", "LEASEHOLD_UNARY_BURST": "1000",
	}, "--listen", freeListenAddr(t), "--unary-burst", "1")
	conn := dialServe(t, r.addr)
	ctx := context.Background()
	workers := leaseholdv1.NewWorkerServiceClient(conn)
	if _, err := workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err := workers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a second call at 0.5/s with a burst of 1 = %v; want RESOURCE_EXHAUSTED", err)
	}
	if code := r.stop(t); code != exitOK {
		t.Fatalf("exit code = %d\n%s", code, r.stderr.String())
	}
}

func TestServeRejectsABadLimitInTheEnvironment(t *testing.T) {
	t.Parallel()
	for _, name := range numericServeFlags(t) {
		var stderr bytes.Buffer
		env := map[string]string{limitEnv(name): "not-a-number"}
		c := &cli{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(k string) string { return env[k] }}
		if code := c.run(context.Background(), []string{"serve", "--sqlite-path", filepath.Join(t.TempDir(), "x.db")}); code != exitUsage ||
			!strings.Contains(stderr.String(), limitEnv(name)) {
			t.Errorf("%s=not-a-number: exit %d, stderr %q; want a usage error naming it", limitEnv(name), code, stderr.String())
		}
	}
}
