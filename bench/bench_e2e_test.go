package bench_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/bench/measure"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// runBench runs the real binary's `bench args...` and returns its stdout
// and RESULT line; any failure fails the test with the run's output.
func runBench(t *testing.T, args ...string) (string, *measure.Result) {
	t.Helper()
	bin := testserver.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append([]string{"bench"}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The run's own flags decide; nothing from a developer's environment.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Run(); err != nil {
		t.Fatalf("leasehold bench %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	res, err := measure.FindResult(stdout.String())
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s", err, stdout.String())
	}
	t.Logf("leasehold bench %s:\n%s", strings.Join(args, " "), stdout.String())
	return stdout.String(), res
}

// checkDrainResult checks the RESULT line of a drain of 200 jobs, the
// short run the tests ask for.
func checkDrainResult(t *testing.T, res *measure.Result, engine string) {
	t.Helper()
	for key, want := range map[string]string{
		measure.KeySystem: "leasehold", measure.KeyEngine: engine, measure.KeyMode: measure.ModeDrain,
		"jobs": "200", "completed": "200", "worker_procs": "2", "capacity": "50",
	} {
		if got, _ := res.Get(key); got != want {
			t.Errorf("%s = %q, want %q in %s", key, got, want, res)
		}
	}
	positive := []string{"drain_jobs_per_s", "create_jobs_per_s", "start_p50_ms", "start_p99_ms", "done_p50_ms", "done_p90_ms", "done_p99_ms"}
	if engine == "postgres" {
		positive = append(positive, "commits_per_job")
	}
	for _, key := range positive {
		if v, ok := res.Float(key); !ok || !(v > 0) {
			t.Errorf("%s is %v (present %v), want a positive number in %s", key, v, ok, res)
		}
	}
	if engine == "sqlite" {
		if _, ok := res.Get("commits_per_job"); ok {
			t.Errorf("commits_per_job on SQLite: %s", res)
		}
	}
	p50, _ := res.Float("done_p50_ms")
	p99, _ := res.Float("done_p99_ms")
	if p99 < p50 {
		t.Errorf("done p99 %v < p50 %v", p99, p50)
	}
}

func TestBenchDrainSQLite(t *testing.T) {
	t.Parallel()
	_, res := runBench(t, "drain", "--engine", "sqlite", "--jobs", "200")
	checkDrainResult(t, res, "sqlite")
}

// TestBenchDrainPostgres needs PostgreSQL and fails, never skips, without
// it. The run makes its own schema on the test database and drops it.
func TestBenchDrainPostgres(t *testing.T) {
	t.Parallel()
	base := pgtest.BaseURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		t.Fatalf("PostgreSQL is required for this test and could not be reached (set %s): %v", pgtest.EnvURL, err)
	}
	defer conn.Close(context.Background())

	out, res := runBench(t, "drain", "--engine", "postgres", "--jobs", "200", "--database-url", base)
	checkDrainResult(t, res, "postgres")

	schema := regexp.MustCompile(`schema (lh_bench_[0-9a-f]+)`).FindStringSubmatch(out)
	if schema == nil {
		t.Fatalf("the output does not name the run's schema:\n%s", out)
	}
	// A fresh deadline: the run itself can take longer than ctx's 10s on
	// a loaded machine.
	qctx, qcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer qcancel()
	var exists bool
	if err := conn.QueryRow(qctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema[1]).Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Errorf("schema %s is still there after the run", schema[1])
	}
}
