package main

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/leasehold/leasehold/coordinator"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

// fakeSecrets stands in for the Kubernetes API server's Secrets of the
// namespace "leasehold": GET and POST, as the bootstrap Job uses them.
type fakeSecrets struct {
	mu      sync.Mutex
	secrets map[string][]byte // name → data["api-key"], decoded
	posts   int
}

func (f *fakeSecrets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	const prefix = "/api/v1/namespaces/leasehold/secrets"
	if r.Header.Get("Authorization") != "Bearer sa-token" {
		http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/"):
		if _, ok := f.secrets[strings.TrimPrefix(r.URL.Path, prefix+"/")]; !ok {
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
		}
	case r.Method == http.MethodPost && r.URL.Path == prefix:
		f.posts++
		var obj struct {
			Metadata struct{ Name string }
			Data     map[string]string
		}
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &obj); err != nil {
			http.Error(w, `{"message":"bad"}`, http.StatusBadRequest)
			return
		}
		key, _ := base64.StdEncoding.DecodeString(obj.Data[kubeSecretKey])
		f.secrets[obj.Metadata.Name] = key
		w.WriteHeader(http.StatusCreated)
	default:
		http.Error(w, `{"message":"forbidden"}`, http.StatusForbidden)
	}
}

// The chart's bootstrap Job: the first run creates an admin key into the
// Secret without printing it, a second run (an upgrade) creates nothing.
func TestKeyCreateIntoKubernetesSecret(t *testing.T) {
	t.Parallel()
	api := &fakeSecrets{secrets: map[string][]byte{}}
	srv := httptest.NewTLSServer(api)
	t.Cleanup(func() { srv.Close(); srv.Client().CloseIdleConnections() })
	u, _ := url.Parse(srv.URL)
	host, port, _ := net.SplitHostPort(u.Host)

	dir := t.TempDir()
	for name, content := range map[string]string{
		"token": "sa-token", "namespace": "leasehold",
		"ca.crt": string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	db := filepath.Join(t.TempDir(), "leasehold.db")
	boot := &harness{t: t, kubeDir: dir, env: map[string]string{"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}}
	args := []string{"key", "create", "--role", "admin", "--name", "bootstrap", "--sqlite-path", db, "--kubernetes-secret", "leasehold-admin-key"}

	first := boot.ok(args...)
	key := api.secrets["leasehold-admin-key"]
	if !strings.HasPrefix(string(key), coordinator.APIKeyPrefix) {
		t.Fatalf("the Secret holds %q, want an API key", key)
	}
	if strings.Contains(first.stdout+first.stderr, string(key)) {
		t.Fatalf("key create --kubernetes-secret printed the key:\n%s\n%s", first.stdout, first.stderr)
	}
	if !strings.Contains(first.stderr, "Secret leasehold/leasehold-admin-key") {
		t.Errorf("stderr does not say where the key is:\n%s", first.stderr)
	}

	second := boot.ok(args...)
	if !strings.Contains(second.stdout, "exists: no key created") || api.posts != 1 {
		t.Errorf("second run (posts %d):\n%s%s", api.posts, second.stdout, second.stderr)
	}

	// The stored key works, and it is the only one.
	s := testserver.Start(t, testserver.Options{SQLitePath: db, Configure: func(c *coordinator.Config) { c.Auth = coordinator.AuthAPIKey }})
	h := &harness{t: t, srv: s, env: map[string]string{envAddr: s.Addr, worker.EnvAPIKey: string(key)}}
	list := h.ok("key", "list")
	if n := strings.Count(list.stdout, "bootstrap"); n != 1 {
		t.Errorf("%d keys named bootstrap, want 1:\n%s", n, list.stdout)
	}

	// Outside a pod it says so.
	outside := &harness{t: t, env: map[string]string{}}
	if r := outside.run(args...); r.code != exitFail || !strings.Contains(r.stderr, "KUBERNETES_SERVICE_HOST") {
		t.Errorf("outside a pod: exit %d\n%s", r.code, r.stderr)
	}
}
