package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// runCLI runs one command line in-process with an empty environment, for
// commands that need no coordinator.
func runCLI(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c := &cli{stdin: strings.NewReader(""), stdout: &stdout, stderr: &stderr, getenv: func(string) string { return "" }}
	code := c.run(t.Context(), args)
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

func TestGlobalFlagsBeforeOrAfterTheCommand(t *testing.T) {
	t.Parallel()
	h := setup(t)
	id := h.createJob("--queue", "global", "--kind", "k").GetId()
	// The environment points nowhere and asks for tables: only the flags
	// can make these calls succeed with JSON.
	env := &harness{t: t, srv: h.srv, conn: h.conn, env: map[string]string{envAddr: closedAddr(t), envOutput: "table"}}

	for _, args := range [][]string{
		{"--addr", h.srv.Addr, "--output", "json", "job", "get", id},
		{"--addr=" + h.srv.Addr, "job", "get", id, "--output", "json"},
		{"job", "--addr", h.srv.Addr, "get", "--output", "json", id},
		{"job", "get", id, "--addr", h.srv.Addr, "--output=json"},
		{"--timeout", "5s", "--addr", h.srv.Addr, "job", "get", "--output", "json", "--", id},
	} {
		r := env.ok(args...)
		var resp leaseholdv1.GetJobResponse
		if err := protojson.Unmarshal([]byte(r.stdout), &resp); err != nil || resp.GetJob().GetId() != id {
			t.Errorf("%q: got %v (%v)\n%s", args, resp.GetJob().GetId(), err, r.stdout)
		}
	}

	t.Run("a list command pages the same with the flags first", func(t *testing.T) {
		h.createJob("--queue", "global", "--kind", "k")
		r := h.ok("--output", "table", "job", "list", "--queue", "global", "--limit", "1")
		if !strings.Contains(r.stdout, "STATE") || !strings.Contains(r.stderr, "more: --page-token ") {
			t.Errorf("stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		}
	})

	t.Run("a bad global flag before the command is a usage error", func(t *testing.T) {
		h.fail(exitUsage, []string{"--output must be table or json"}, "--output", "xml", "job", "get", id)
		h.fail(exitUsage, []string{"invalid value", "--timeout"}, "--timeout", "soon", "job", "get", id)
	})
}

func TestCompletionPrintsAScript(t *testing.T) {
	t.Parallel()
	for shell, want := range map[string]string{
		"bash": "__start_leasehold",
		"zsh":  "#compdef leasehold",
		"fish": "complete -c leasehold",
	} {
		r := runCLI(t, "completion", shell)
		if r.code != exitOK || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: exit %d, stdout lacks %q (%d bytes); stderr %q", shell, r.code, want, len(r.stdout), r.stderr)
		}
	}
	// The script asks the binary for candidates; flag values are among them.
	r := runCLI(t, "__complete", "job", "list", "--state", "")
	if r.code != exitOK || !strings.Contains(r.stdout, "queued\n") || !strings.Contains(r.stdout, "dead\n") {
		t.Errorf("completing --state: exit %d\n%s", r.code, r.stdout)
	}
}

func TestUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "missing command"},
		{[]string{"frob"}, `unknown command "frob"`},
		{[]string{"jb"}, `did you mean "job"?`},
		{[]string{"--nope", "job", "list"}, "flag provided but not defined: --nope"},
		{[]string{"job", "list", "-x"}, "flag provided but not defined: -x"},
		{[]string{"job", "list", "--limit"}, "flag needs an argument"},
		{[]string{"job", "list", "--state", "done"}, `unknown state "done"`},
		{[]string{"job", "get", ""}, "ID must not be empty"},
		{[]string{"version", "extra"}, `unexpected argument "extra"`},
		{[]string{"serve", "--addr", "127.0.0.1:7400"}, "serve does not take it"},
		{[]string{"--output", "json", "migrate"}, "migrate does not take it"},
		{[]string{"worker", "exec", "--queue", "q", "--kill-grace", "0s", "sh", "-c", "true"}, "--kill-grace must be positive"},
	} {
		r := runCLI(t, tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) || !strings.Contains(r.stderr, "Usage") {
			t.Errorf("%q: exit %d, want %d with %q and the usage on stderr:\n%s", tc.args, r.code, exitUsage, tc.want, r.stderr)
		}
	}
}

func TestHelpExitsZero(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-h"}, {"help"}, {"help", "job", "create"}, {"--addr", "x", "job", "list", "--help"}} {
		r := runCLI(t, args...)
		if r.code != exitOK || !strings.Contains(r.stdout, "Usage:") || !strings.Contains(r.stdout, "--addr") {
			t.Errorf("%q: exit %d, stdout:\n%s", args, r.code, r.stdout)
		}
	}
	// serve and migrate do not talk to a coordinator: their help leaves the
	// global flags out.
	if r := runCLI(t, "serve", "-h"); r.code != exitOK || !strings.Contains(r.stdout, "--listen") || strings.Contains(r.stdout, "--addr string") {
		t.Errorf("serve -h: exit %d, stdout:\n%s", r.code, r.stdout)
	}
	if r := runCLI(t, "--version"); r.code != exitOK || r.stdout != "leasehold "+Version+"\n" {
		t.Errorf("--version: exit %d, %q", r.code, r.stdout)
	}
}

// worker exec stops reading its own flags at the command to run: what
// follows belongs to that command, with or without "--".
func TestWorkerExecLeavesTheCommandsFlagsAlone(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "missing")
	for _, args := range [][]string{
		{"worker", "exec", "--queue", "q", missing, "--kill-grace", "0s"},
		{"worker", "exec", "--queue", "q", "--", missing, "--kill-grace", "0s"},
	} {
		// Had --kill-grace 0s been taken for ours, this would be a usage
		// error; it reaches the lookup of the program instead.
		r := runCLI(t, args...)
		if r.code != exitFail || !strings.Contains(r.stderr, "cannot run") {
			t.Errorf("%q: exit %d, stderr %q; want 1 and cannot run", args, r.code, r.stderr)
		}
	}
}
