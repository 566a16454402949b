package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitFor blocks until b contains s, failing the test when ctx ends first:
// the barrier between a command running in a goroutine and the test.
func waitFor(t *testing.T, ctx context.Context, b *testlog.Buffer, s string) {
	t.Helper()
	if err := b.WaitFor(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// result is one finished CLI invocation.
type result struct {
	code           int
	stdout, stderr string
}

// harness is a real coordinator on a real socket plus a way to run the CLI
// in-process against it.
type harness struct {
	t    *testing.T
	srv  *testserver.Server
	conn *grpc.ClientConn
	env  map[string]string
	// kubeDir is the pod's service account directory for key create
	// --kubernetes-secret (empty: the real one).
	kubeDir string
}

func setup(t *testing.T) *harness {
	t.Helper()
	srv := testserver.Start(t, testserver.Options{})
	return &harness{t: t, srv: srv, conn: srv.Dial(t), env: map[string]string{envAddr: srv.Addr}}
}

// cli builds a cli with the harness environment and the given streams.
func (h *harness) cli(stdin string, stdout, stderr interface {
	Write(p []byte) (n int, err error)
}) *cli {
	return &cli{
		stdin:  strings.NewReader(stdin),
		stdout: stdout,
		stderr: stderr,
		getenv: func(k string) string { return h.env[k] },

		kubeServiceAccountDir: h.kubeDir,
	}
}

// run runs one command to completion.
func (h *harness) run(args ...string) result {
	return h.runStdin("", args...)
}

func (h *harness) runStdin(stdin string, args ...string) result {
	h.t.Helper()
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(h.t.Context(), time.Minute)
	defer cancel()
	code := h.cli(stdin, &stdout, &stderr).run(ctx, args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// ok runs a command that must succeed.
func (h *harness) ok(args ...string) result {
	h.t.Helper()
	r := h.run(args...)
	if r.code != exitOK {
		h.t.Fatalf("leasehold %s: exit %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r
}

// json runs a command with --output json and decodes its output into m.
func (h *harness) json(m proto.Message, args ...string) {
	h.t.Helper()
	r := h.ok(append(args, "--output", "json")...)
	if err := protojson.Unmarshal([]byte(r.stdout), m); err != nil {
		h.t.Fatalf("leasehold %s --output json: not a %s: %v\n%s", strings.Join(args, " "),
			m.ProtoReflect().Descriptor().FullName(), err, r.stdout)
	}
}

// fail runs a command that must exit with code and mention every want on
// stderr.
func (h *harness) fail(code int, want []string, args ...string) {
	h.t.Helper()
	r := h.run(args...)
	if r.code != code {
		h.t.Fatalf("leasehold %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), r.code, code, r.stdout, r.stderr)
	}
	for _, w := range want {
		if !strings.Contains(r.stderr, w) {
			h.t.Errorf("leasehold %s: stderr lacks %q:\n%s", strings.Join(args, " "), w, r.stderr)
		}
	}
}

// createJob creates a job through the CLI and returns it.
func (h *harness) createJob(args ...string) *leaseholdv1.Job {
	h.t.Helper()
	var resp leaseholdv1.CreateJobResponse
	h.json(&resp, append([]string{"job", "create"}, args...)...)
	return resp.GetJob()
}

// getJob reads a job straight from the API.
func (h *harness) getJob(id string) *leaseholdv1.Job {
	h.t.Helper()
	resp, err := leaseholdv1.NewJobServiceClient(h.conn).GetJob(h.t.Context(), &leaseholdv1.GetJobRequest{JobId: id})
	if err != nil {
		h.t.Fatalf("GetJob(%s): %v", id, err)
	}
	return resp.GetJob()
}

// waitTerminal watches a job until its terminal event and returns the job:
// the server ends the stream then, so no polling is needed.
func (h *harness) waitTerminal(id string) *leaseholdv1.Job {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(h.t.Context(), time.Minute)
	defer cancel()
	stream, err := leaseholdv1.NewJobServiceClient(h.conn).WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: id})
	if err != nil {
		h.t.Fatalf("WatchJob(%s): %v", id, err)
	}
	for {
		if _, err := stream.Recv(); err != nil {
			if ctx.Err() != nil {
				h.t.Fatalf("job %s did not finish: %v; it is %v", id, err, h.getJob(id))
			}
			break
		}
	}
	return h.getJob(id)
}

// closedAddr is a local address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestCommonFlags(t *testing.T) {
	t.Parallel()
	h := setup(t)

	t.Run("an unknown group or subcommand is a usage error", func(t *testing.T) {
		h.fail(exitUsage, []string{`unknown subcommand "frob"`, "leasehold job create"}, "job", "frob")
		h.fail(exitUsage, []string{"missing subcommand"}, "dlq")
	})
	t.Run("-h prints usage on stdout and exits 0", func(t *testing.T) {
		for _, args := range [][]string{
			{"job", "create", "-h"}, {"job", "-h"}, {"dlq", "replay", "--help"}, {"queue", "set-policy", "-h"},
			{"breaker", "reset", "-h"}, {"worker", "exec", "-h"},
		} {
			r := h.ok(args...)
			if !strings.Contains(r.stdout, "Usage") || !strings.Contains(r.stdout, "leasehold "+args[0]) {
				t.Errorf("%v: usage missing:\n%s", args, r.stdout)
			}
		}
		r := h.ok("queue", "set-policy", "-h")
		for _, f := range []string{"--max-attempts", "--initial-delay", "--jitter", "--retryable-codes", "--concurrency-limit", "--addr", "--output"} {
			if !strings.Contains(r.stdout, f) {
				t.Errorf("set-policy usage lacks %s:\n%s", f, r.stdout)
			}
		}
	})
	t.Run("bad flags and arguments exit 2", func(t *testing.T) {
		h.fail(exitUsage, []string{"flag provided but not defined"}, "job", "get", "x", "--nope")
		h.fail(exitUsage, []string{"missing ID"}, "job", "get")
		h.fail(exitUsage, []string{`unexpected argument "b"`}, "job", "get", "a", "b")
		h.fail(exitUsage, []string{"--output must be table or json"}, "job", "get", "a", "--output", "xml")
		h.fail(exitUsage, []string{"invalid value"}, "job", "list", "--timeout", "soon")
	})
	t.Run("LEASEHOLD_OUTPUT and LEASEHOLD_ADDR are defaults a flag overrides", func(t *testing.T) {
		id := h.createJob("--queue", "env", "--kind", "k").GetId()
		env := &harness{t: t, srv: h.srv, conn: h.conn, env: map[string]string{envAddr: h.srv.Addr, envOutput: "json"}}
		r := env.ok("job", "get", id)
		var resp leaseholdv1.GetJobResponse
		if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil || resp.GetJob().GetId() != id {
			t.Fatalf("LEASEHOLD_OUTPUT=json: got %v (%v)\n%s", resp.GetJob().GetId(), err, r.stdout)
		}
		if r := env.ok("job", "get", id, "--output", "table"); !strings.Contains(r.stdout, "State:") {
			t.Errorf("--output table did not override the env:\n%s", r.stdout)
		}
		env.env[envOutput] = "yaml"
		env.fail(exitUsage, []string{"--output must be table or json"}, "job", "get", id)
		env.env[envOutput] = ""
		env.env[envTimeout] = "forever"
		env.fail(exitUsage, []string{"LEASEHOLD_TIMEOUT"}, "job", "get", id)
		env.ok("job", "get", id, "--timeout", "5s")
		env.env[envTimeout] = ""
		env.env[envAddr] = closedAddr(t)
		env.fail(exitFail, []string{"UNAVAILABLE", "is the coordinator running"}, "job", "get", id)
		env.ok("job", "get", id, "--addr", h.srv.Addr)
	})
}

func TestParseKeyValues(t *testing.T) {
	t.Parallel()
	m, err := parseKeyValues("meta", []string{"a=1", "b=x=y", "c="})
	if err != nil || len(m) != 3 || m["a"] != "1" || m["b"] != "x=y" || m["c"] != "" {
		t.Fatalf("parseKeyValues = %v, %v", m, err)
	}
	for _, bad := range [][]string{{"novalue"}, {"=v"}, {"a=1", "a=2"}} {
		if _, err := parseKeyValues("meta", bad); err == nil {
			t.Errorf("parseKeyValues(%q) succeeded", bad)
		}
	}
}

// FuzzParseKeyValues checks that a parsed pair always rebuilds its flag
// exactly and that the key never contains "=".
func FuzzParseKeyValues(f *testing.F) {
	f.Add("a=b")
	f.Add("=")
	f.Add("k==v")
	f.Add("traceparent=00-abc-def-01")
	f.Fuzz(func(t *testing.T, kv string) {
		m, err := parseKeyValues("meta", []string{kv})
		if err != nil {
			if k, _, ok := strings.Cut(kv, "="); ok && k != "" {
				t.Fatalf("parseKeyValues(%q) refused a valid pair: %v", kv, err)
			}
			return
		}
		if len(m) != 1 {
			t.Fatalf("parseKeyValues(%q) = %v", kv, m)
		}
		for k, v := range m {
			if k == "" || strings.Contains(k, "=") || k+"="+v != kv {
				t.Fatalf("parseKeyValues(%q) = %q=%q", kv, k, v)
			}
		}
	})
}

func TestParseJobState(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]leaseholdv1.JobState{
		"queued": leaseholdv1.JobState_JOB_STATE_QUEUED, "DEAD": leaseholdv1.JobState_JOB_STATE_DEAD,
		"job_state_leased": leaseholdv1.JobState_JOB_STATE_LEASED, " Cancelled ": leaseholdv1.JobState_JOB_STATE_CANCELLED, //nolint:gocritic // the spaces are the point: parseJobState trims them
	} {
		if got, err := parseJobState(in); err != nil || got != want {
			t.Errorf("parseJobState(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "unspecified", "done"} {
		if _, err := parseJobState(bad); err == nil {
			t.Errorf("parseJobState(%q) succeeded", bad)
		}
	}
}
