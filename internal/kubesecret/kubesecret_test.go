package kubesecret_test

import (
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/kubesecret"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// APIServer is a stand-in for the Kubernetes API server's Secrets of one
// namespace: GET and POST with the status codes the real one answers.
type APIServer struct {
	*httptest.Server
	token string

	mu      sync.Mutex
	secrets map[string]map[string]any // name → the object POSTed
}

func startAPIServer(t *testing.T, token string) *APIServer {
	t.Helper()
	a := &APIServer{token: token, secrets: map[string]map[string]any{}}
	a.Server = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(func() {
		a.Close()
		a.Client().CloseIdleConnections()
	})
	return a
}

func (a *APIServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Authorization") != "Bearer "+a.token {
		http.Error(w, `{"message":"Unauthorized"}`, http.StatusUnauthorized)
		return
	}
	const prefix = "/api/v1/namespaces/leasehold/secrets"
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, prefix+"/"):
		if _, ok := a.secrets[strings.TrimPrefix(r.URL.Path, prefix+"/")]; !ok {
			http.Error(w, `{"message":"secrets not found"}`, http.StatusNotFound)
			return
		}
		w.WriteHeader(http.StatusOK)
	case r.Method == http.MethodPost && r.URL.Path == prefix:
		b, _ := io.ReadAll(r.Body)
		var obj map[string]any
		if err := json.Unmarshal(b, &obj); err != nil {
			http.Error(w, `{"message":"bad body"}`, http.StatusBadRequest)
			return
		}
		name, _ := obj["metadata"].(map[string]any)["name"].(string)
		if _, ok := a.secrets[name]; ok {
			http.Error(w, `{"message":"secrets \"`+name+`\" already exists"}`, http.StatusConflict)
			return
		}
		a.secrets[name] = obj
		w.WriteHeader(http.StatusCreated)
	default:
		http.Error(w, `{"message":"forbidden"}`, http.StatusForbidden)
	}
}

func newClient(t *testing.T, a *APIServer, token string) *kubesecret.Client {
	t.Helper()
	pool := a.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	c, err := kubesecret.New(kubesecret.Config{Server: a.URL, Token: token, CAs: pool, Namespace: "leasehold"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCreateOnceThenExists(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t, "tok")
	c := newClient(t, a, "tok")
	ctx := t.Context()

	if ok, err := c.Exists(ctx, "admin-key"); err != nil || ok {
		t.Fatalf("Exists before Create = %v, %v; want false, nil", ok, err)
	}
	if err := c.Create(ctx, "admin-key", map[string][]byte{"api-key": []byte("lh_secret")}, map[string]string{"app": "x"}); err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Exists(ctx, "admin-key"); err != nil || !ok {
		t.Fatalf("Exists after Create = %v, %v; want true, nil", ok, err)
	}
	err := c.Create(ctx, "admin-key", map[string][]byte{"api-key": []byte("another")}, nil)
	if !errors.Is(err, kubesecret.ErrExists) {
		t.Fatalf("second Create = %v, want ErrExists", err)
	}

	obj := a.secrets["admin-key"]
	data, _ := obj["data"].(map[string]any)["api-key"].(string)
	if got, _ := base64.StdEncoding.DecodeString(data); string(got) != "lh_secret" {
		t.Errorf("stored api-key = %q, want the first key, base64-encoded", got)
	}
	if obj["type"] != "Opaque" || obj["metadata"].(map[string]any)["namespace"] != "leasehold" {
		t.Errorf("stored object %v", obj)
	}
}

func TestRefusalSaysWhatToCheck(t *testing.T) {
	t.Parallel()
	a := startAPIServer(t, "tok")
	c := newClient(t, a, "wrong")
	_, err := c.Exists(t.Context(), "admin-key")
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "get and create on secrets") {
		t.Fatalf("Exists with a bad token = %v; want a 401 naming the RBAC it needs", err)
	}
}

func TestInClusterConfig(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	if _, err := kubesecret.InClusterConfig(env(nil), t.TempDir()); err == nil || !strings.Contains(err.Error(), "KUBERNETES_SERVICE_HOST") {
		t.Fatalf("outside a pod: %v", err)
	}
	a := startAPIServer(t, "tok")
	dir := t.TempDir()
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inCluster := env(map[string]string{"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"})
	if _, err := kubesecret.InClusterConfig(inCluster, dir); err == nil || !strings.Contains(err.Error(), "automountServiceAccountToken") {
		t.Fatalf("without a token: %v", err)
	}
	write("token", "tok\n")
	write("namespace", "leasehold")
	write("ca.crt", string(pemOf(t, a)))
	cfg, err := kubesecret.InClusterConfig(inCluster, dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server != "https://10.0.0.1:443" || cfg.Token != "tok" || cfg.Namespace != "leasehold" || cfg.CAs == nil {
		t.Errorf("config = %+v", cfg)
	}
}

// pemOf is the stand-in API server's certificate in PEM, as a pod's ca.crt.
func pemOf(t *testing.T, a *APIServer) []byte {
	t.Helper()
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.Certificate().Raw})
}
