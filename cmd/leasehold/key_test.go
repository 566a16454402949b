package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

// keyHarness is a coordinator with --auth api-key on a SQLite file and an
// admin key made offline with `key create --sqlite-path` against that file.
func keyHarness(t *testing.T) (*harness, string) {
	t.Helper()
	db := filepath.Join(t.TempDir(), "leasehold.db")
	boot := &harness{t: t, env: map[string]string{}}
	r := boot.ok("key", "create", "--sqlite-path", db, "--role", "admin", "--tenant", "acme", "--name", "root")
	key := lastKey(t, r.stdout)
	if strings.Contains(r.stderr, key) || !strings.Contains(r.stderr, "shown only now") {
		t.Errorf("key create stderr:\n%s", r.stderr)
	}
	srv := testserver.Start(t, testserver.Options{SQLitePath: db, Configure: func(c *coordinator.Config) { c.Auth = coordinator.AuthAPIKey }})
	return &harness{t: t, srv: srv, env: map[string]string{envAddr: srv.Addr, worker.EnvAPIKey: key}}, key
}

func lastKey(t *testing.T, stdout string) string {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(stdout), "\n")
	last := lines[len(lines)-1]
	key, ok := strings.CutPrefix(last, "Key:")
	if !ok {
		t.Fatalf("the last line of key create is not the key:\n%s", stdout)
	}
	return strings.TrimSpace(key)
}

func TestKeyCommands(t *testing.T) {
	t.Parallel()
	h, rootKey := keyHarness(t)

	r := h.ok("key", "create", "--role", "worker", "--queue", "billing.*", "--queue", "emails", "--name", "billing workers")
	workerKey := lastKey(t, r.stdout)
	if !strings.HasPrefix(workerKey, coordinator.APIKeyPrefix) || workerKey == rootKey {
		t.Fatalf("new key %q", workerKey)
	}
	for _, want := range []string{"Role:", "worker", "Tenant:", "acme", "billing.*,emails", "Created by:"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("key create output lacks %q:\n%s", want, r.stdout)
		}
	}

	r = h.ok("--output", "json", "key", "create", "--role", "reader", "--cert-cn", "dash.acme")
	var created struct {
		Principal struct{ ID, Identity string }
		Secret    string
	}
	if err := json.Unmarshal([]byte(r.stdout), &created); err != nil {
		t.Fatal(err)
	}
	if created.Secret != "" || created.Principal.Identity != "cert:CN=dash.acme" {
		t.Errorf("certificate principal: %s", r.stdout)
	}

	r = h.ok("key", "list")
	for _, want := range []string{"root", "billing workers", "cert:CN=dash.acme", "LAST USED"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("key list lacks %q:\n%s", want, r.stdout)
		}
	}
	for _, secret := range []string{rootKey, workerKey} {
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Error("key list shows a secret")
		}
	}

	h.ok("key", "revoke", created.Principal.ID)
	if r := h.ok("key", "list"); strings.Contains(r.stdout, "dash.acme") {
		t.Errorf("a revoked key is listed without --all:\n%s", r.stdout)
	}
	if r := h.ok("key", "list", "--all"); !strings.Contains(r.stdout, "dash.acme") {
		t.Errorf("key list --all lacks the revoked key:\n%s", r.stdout)
	}

	r = h.ok("audit", "list", "--limit", "2")
	if !strings.Contains(r.stdout, "api_key_revoked") || !strings.Contains(r.stderr, "more: --page-token") {
		t.Errorf("audit list --limit 2:\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}

	// The worker key may not manage keys; a wrong role is a usage error.
	h.env[worker.EnvAPIKey] = workerKey
	if r := h.run("key", "list"); r.code != exitFail || !strings.Contains(r.stderr, "PERMISSION_DENIED") {
		t.Errorf("a worker listing keys: exit %d\n%s", r.code, r.stderr)
	}
	if r := h.run("key", "create", "--role", "root"); r.code != exitUsage {
		t.Errorf("--role root: exit %d\n%s", r.code, r.stderr)
	}
	delete(h.env, worker.EnvAPIKey)
	if r := h.run("job", "list"); r.code != exitFail || !strings.Contains(r.stderr, "UNAUTHENTICATED") || !strings.Contains(r.stderr, "LEASEHOLD_API_KEY") {
		t.Errorf("no key: exit %d\n%s", r.code, r.stderr)
	}
}

func TestKeyCreateOfflineValidates(t *testing.T) {
	t.Parallel()
	h := &harness{t: t, env: map[string]string{}}
	db := filepath.Join(t.TempDir(), "x.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--role", "admin", "--queue", "bad queue"}, "--queue"},
		{[]string{"--role", "admin", "--tenant", "a b"}, "--tenant"},
		{[]string{}, "--role is required"},
		{[]string{"--role", "admin", "--database-url", "postgres://x", "--sqlite-path", db}, "give one"},
	} {
		r := h.run(append([]string{"key", "create", "--sqlite-path", db}, c.args...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, c.want) {
			t.Errorf("key create %v: exit %d, want 2 naming %s\n%s", c.args, r.code, c.want, r.stderr)
		}
	}
}
