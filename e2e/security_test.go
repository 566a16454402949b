package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/certreload"
	"github.com/leasehold/leasehold/internal/testkit/testcert"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/worker"
)

// principal creates a principal straight in st and returns its API key
// (empty for a certificate principal, cn set).
func principal(t *testing.T, st store.Store, tenant string, role store.Role, cn string) string {
	t.Helper()
	p := store.CreatePrincipalParams{Tenant: tenant, Role: role, Name: string(role), Actor: "test"}
	var secret string
	if cn != "" {
		p.CertSubject = store.CertSubjectFor(cn)
	} else {
		var err error
		if secret, p.KeyHash, err = coordinator.NewAPIKey(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreatePrincipal(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return secret
}

// dialWith connects to addr with cfg, closed when the test ends.
func dialWith(t *testing.T, addr string, cfg worker.DialConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := worker.Dial(addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestRevokedKeyStopsWorkingOnEveryCoordinator: two coordinators share one
// PostgreSQL database; a key revoked through one is refused by the other
// within 5s (its cache TTL), and by the first at once.
func TestRevokedKeyStopsWorkingOnEveryCoordinator(t *testing.T) {
	t.Parallel()
	apiKey := func(cfg *coordinator.Config) { cfg.Auth = coordinator.AuthAPIKey }
	a := testserver.Start(t, testserver.Options{Postgres: true, Configure: apiKey})
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.DatabaseURL, Configure: apiKey})
	ctx := ctxT(t)

	admin := worker.NewClient(dialWith(t, a.Addr, worker.DialConfig{APIKey: principal(t, a.Store, "acme", store.RoleAdmin, "")}))
	made, err := admin.CreateAPIKey(ctx, &leaseholdv1.CreateApiKeyRequest{Role: leaseholdv1.Role_ROLE_PRODUCER, Name: "doomed"})
	if err != nil {
		t.Fatal(err)
	}
	onA := worker.NewClient(dialWith(t, a.Addr, worker.DialConfig{APIKey: made.GetSecret()}))
	onB := worker.NewClient(dialWith(t, b.Addr, worker.DialConfig{APIKey: made.GetSecret()}))
	created, _, err := onB.Create(ctx, "emails", "k", nil, nil)
	if err != nil {
		t.Fatalf("the new key on the other coordinator: %v", err)
	}
	if _, err := onA.Get(ctx, created.GetId()); err != nil {
		t.Fatalf("the job created through B, read through A: %v", err)
	}

	if _, err := admin.RevokeAPIKey(ctx, made.GetPrincipal().GetId()); err != nil {
		t.Fatal(err)
	}
	revoked := time.Now()
	if _, err := onA.Get(ctx, created.GetId()); status.Code(err) != codes.Unauthenticated {
		t.Errorf("the coordinator that revoked the key: %v, want UNAUTHENTICATED at once", err)
	}
	// Poll B, bounded: it must refuse the key within 5s of the revocation.
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		_, err := onB.Get(ctx, created.GetId())
		if code, reason := errorInfo(err); code == codes.Unauthenticated && reason == coordinator.ReasonUnauthenticated {
			t.Logf("the other coordinator refused the revoked key after %v", time.Since(revoked).Round(time.Millisecond))
			break
		} else if err != nil {
			t.Fatalf("the other coordinator: %v", err)
		}
		select {
		case <-deadline.C:
			t.Fatalf("the other coordinator still accepts the key %v after it was revoked", time.Since(revoked))
		case <-tick.C:
		}
	}
}

// tlsServer starts an in-process coordinator serving TLS from files
// issued by ca, verifying client certificates of ca (required with mtls).
func tlsServer(t *testing.T, ca *testcert.CA, mode coordinator.AuthMode) *testserver.Server {
	t.Helper()
	srv := ca.Server(t, "server")
	clientAuth := tls.VerifyClientCertIfGiven
	if mode == coordinator.AuthMTLS {
		clientAuth = tls.RequireAndVerifyClientCert
	}
	r, err := certreload.New(certreload.Config{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile, ClientAuth: clientAuth})
	if err != nil {
		t.Fatal(err)
	}
	return testserver.Start(t, testserver.Options{Configure: func(cfg *coordinator.Config) {
		cfg.Auth, cfg.TLS = mode, r.ServerConfig()
	}})
}

// runOneJob creates a job through producer and runs it with the Go SDK
// worker on workerConn, and checks it succeeded.
func runOneJob(t *testing.T, producer *worker.Client, workerConn *grpc.ClientConn, queue string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	job, _, err := producer.Create(ctx, queue, "greet", []byte("ada"), nil)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	w, err := worker.New(workerConn, worker.Config{WorkerID: "w-" + queue, Queues: []string{queue}, ShutdownGrace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("greet", func(_ context.Context, j *worker.Job) ([]byte, error) {
		return append([]byte("hello "), j.Payload...), nil
	})
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan error, 1)
	go func() { ran <- w.Run(wctx) }()
	defer func() {
		stop()
		if err := <-ran; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("worker: %v", err)
		}
	}()
	err = producer.Watch(ctx, job.GetId(), func(*leaseholdv1.Event) error { return nil })
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	done, err := producer.Get(ctx, job.GetId())
	if err != nil || done.GetState() != leaseholdv1.JobState_JOB_STATE_SUCCEEDED || string(done.GetResult()) != "hello ada" {
		t.Fatalf("job after the worker ran: %v, %v", done, err)
	}
}

// TestTLSWithAPIKeys: TLS with API keys end to end through the SDK; a
// client certificate is optional (kubelet probes have none), health needs
// no credential, a plaintext client gets nowhere, and the SDK refuses to
// send a key in clear text beyond loopback.
func TestTLSWithAPIKeys(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "tls-keys")
	s := tlsServer(t, ca, coordinator.AuthAPIKey)
	ctx := ctxT(t)
	producerKey := principal(t, s.Store, "acme", store.RoleProducer, "")
	workerKey := principal(t, s.Store, "acme", store.RoleWorker, "")

	producer := worker.NewClient(dialWith(t, s.Addr, worker.DialConfig{CAFile: ca.CertFile, APIKey: producerKey}))
	runOneJob(t, producer, dialWith(t, s.Addr, worker.DialConfig{CAFile: ca.CertFile, APIKey: workerKey}), "tls-keys")

	// Health over TLS without a client certificate or a key.
	if _, err := healthpb.NewHealthClient(dialWith(t, s.Addr, worker.DialConfig{CAFile: ca.CertFile})).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Errorf("health without credentials: %v", err)
	}
	// TLS but no key.
	_, err := worker.NewClient(dialWith(t, s.Addr, worker.DialConfig{CAFile: ca.CertFile})).ListQueues(ctx)
	wantReason(t, err, codes.Unauthenticated, coordinator.ReasonUnauthenticated)
	// A server the client does not trust.
	other := testcert.NewCA(t, "untrusted")
	_, err = worker.NewClient(dialWith(t, s.Addr, worker.DialConfig{CAFile: other.CertFile, APIKey: producerKey})).ListQueues(ctx)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a coordinator signed by an untrusted CA: %v, want UNAVAILABLE", err)
	}
	// Plaintext to a TLS port.
	_, err = worker.NewClient(dialWith(t, s.Addr, worker.DialConfig{APIKey: producerKey})).ListQueues(ctx)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("plaintext to a TLS coordinator: %v, want UNAVAILABLE", err)
	}
}

// eventually polls cond every 50ms until it holds, failing after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("%s: not within %v", what, limit)
		case <-tick.C:
		}
	}
}

// TestMutualTLS: --auth mtls identifies callers by their certificate's
// common name; unknown names, missing certificates and certificates of
// another CA get nowhere.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "mtls")
	s := tlsServer(t, ca, coordinator.AuthMTLS)
	ctx := ctxT(t)
	principal(t, s.Store, "acme", store.RoleProducer, "producer.acme")
	principal(t, s.Store, "acme", store.RoleWorker, "worker.acme")
	prodCert := ca.Client(t, "producer", "producer.acme")
	workCert := ca.Client(t, "worker", "worker.acme")
	certOf := func(p testcert.Pair) worker.DialConfig {
		return worker.DialConfig{CAFile: ca.CertFile, CertFile: p.CertFile, KeyFile: p.KeyFile}
	}

	producer := worker.NewClient(dialWith(t, s.Addr, certOf(prodCert)))
	runOneJob(t, producer, dialWith(t, s.Addr, certOf(workCert)), "mtls")

	// The worker's certificate does not make it a producer.
	_, _, err := worker.NewClient(dialWith(t, s.Addr, certOf(workCert))).Create(ctx, "mtls", "greet", nil, nil)
	wantReason(t, err, codes.PermissionDenied, coordinator.ReasonPermissionDenied)
	// A valid certificate whose name maps to no principal.
	stranger := ca.Client(t, "stranger", "nobody.acme")
	_, err = worker.NewClient(dialWith(t, s.Addr, certOf(stranger))).ListQueues(ctx)
	wantReason(t, err, codes.Unauthenticated, coordinator.ReasonUnauthenticated)
	// No certificate, and a certificate of another CA: the handshake fails.
	_, err = worker.NewClient(dialWith(t, s.Addr, worker.DialConfig{CAFile: ca.CertFile})).ListQueues(ctx)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("no client certificate: %v, want UNAVAILABLE (handshake refused)", err)
	}
	foreign := testcert.NewCA(t, "foreign").Client(t, "foreign", "producer.acme")
	_, err = worker.NewClient(dialWith(t, s.Addr, certOf(foreign))).ListQueues(ctx)
	if status.Code(err) != codes.Unavailable {
		t.Errorf("a client certificate of another CA: %v, want UNAVAILABLE", err)
	}
	// Revoking the principal of a certificate shuts it out.
	ps, err := s.Store.ListPrincipals(ctx, "acme", false)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if p.CertSubject == "CN=producer.acme" {
			if _, err := s.Store.RevokePrincipal(ctx, store.RevokePrincipalParams{Tenant: "acme", ID: p.ID, Actor: "test"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 5*time.Second, "a revoked certificate principal is refused", func() bool {
		_, err := producer.List(ctx, &leaseholdv1.ListJobsRequest{})
		return status.Code(err) == codes.Unauthenticated
	})
}

// keyCreate runs `leasehold key create` offline against a SQLite file
// and returns the key (the last line of stdout) and stderr.
func keyCreate(t *testing.T, sqlitePath string, args ...string) (key, stderr string) {
	t.Helper()
	cmd := exec.Command(testserver.Binary(t), append([]string{"key", "create", "--sqlite-path", sqlitePath}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("leasehold key create: %v\n%s%s", err, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	last := lines[len(lines)-1]
	key = strings.TrimSpace(strings.TrimPrefix(last, "Key:"))
	if !strings.HasPrefix(key, coordinator.APIKeyPrefix) {
		t.Fatalf("no key in the output:\n%s", out.String())
	}
	return key, errb.String()
}

// TestTLSProcessWithGrpcurlAndTheCLI: the real binary serving TLS with API
// keys, bootstrapped with an offline key; grpcurl with -cacert lists the
// services (no key needed for reflection) and creates a job with the key;
// the CLI does the same with --tls-ca-file and LEASEHOLD_API_KEY; the key
// appears in no log.
func TestTLSProcessWithGrpcurlAndTheCLI(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "process")
	srv := ca.Server(t, "server")
	db := filepath.Join(t.TempDir(), "leasehold.db")
	key, keyStderr := keyCreate(t, db, "--role", "admin", "--tenant", "acme", "--name", "bootstrap")
	if strings.Contains(keyStderr, key) {
		t.Error("key create wrote the key to stderr")
	}
	tlsCfg := ca.ClientTLS(t, nil)
	p := testserver.StartProcessDial(t, []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg))}, nil,
		"--sqlite-path", db, "--auth", "api-key", "--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile, "--log-level", "debug")

	var bin string
	for _, d := range filepath.SplitList(grpcurlPath(t)) {
		if _, err := os.Stat(filepath.Join(d, "grpcurl")); err == nil {
			bin = filepath.Join(d, "grpcurl")
			break
		}
	}
	grpcurl := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"-cacert", ca.CertFile}, args...)...).CombinedOutput()
		return string(out), err
	}
	out, err := grpcurl(p.Addr, "list")
	if err != nil || !strings.Contains(out, "leasehold.v1.JobService") {
		t.Fatalf("grpcurl -cacert list: %v\n%s", err, out)
	}
	out, err = grpcurl("-d", `{"job": {"queue": "emails", "kind": "send-welcome", "payload": "aGVsbG8="}}`,
		p.Addr, "leasehold.v1.JobService/CreateJob")
	if err == nil || !strings.Contains(out, "Unauthenticated") {
		t.Errorf("grpcurl without a key: %v\n%s", err, out)
	}
	out, err = grpcurl("-H", "authorization: Bearer "+key, "-d", `{"job": {"queue": "emails", "kind": "send-welcome", "payload": "aGVsbG8="}}`,
		p.Addr, "leasehold.v1.JobService/CreateJob")
	if err != nil || !strings.Contains(out, "JOB_STATE_QUEUED") {
		t.Fatalf("grpcurl -cacert with the key: %v\n%s", err, out)
	}
	if out, err := exec.Command(bin, "-plaintext", p.Addr, "list").CombinedOutput(); err == nil {
		t.Errorf("grpcurl -plaintext reached a TLS coordinator:\n%s", out)
	}

	cli := func(env []string, args ...string) (string, error) {
		cmd := exec.Command(testserver.Binary(t), append([]string{"--addr", p.Addr}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err = cli([]string{"LEASEHOLD_API_KEY=" + key}, "--tls-ca-file", ca.CertFile, "job", "list", "--queue", "emails")
	if err != nil || !strings.Contains(out, "send-welcome") {
		t.Errorf("leasehold --tls-ca-file job list: %v\n%s", err, out)
	}
	out, err = cli([]string{"LEASEHOLD_API_KEY=" + key, "LEASEHOLD_TLS_CA_FILE=" + ca.CertFile}, "audit", "list")
	if err != nil || !strings.Contains(out, "api_key_created") || !strings.Contains(out, "offline") {
		t.Errorf("leasehold audit list (TLS from the environment): %v\n%s", err, out)
	}
	out, err = cli(nil, "--tls-ca-file", ca.CertFile, "job", "list")
	if err == nil || !strings.Contains(out, "UNAUTHENTICATED") {
		t.Errorf("the CLI without LEASEHOLD_API_KEY: %v\n%s", err, out)
	}

	p.Signal(os.Interrupt)
	if code, err := p.Wait(); code != 0 || err != nil {
		t.Errorf("serve exited %d, %v", code, err)
	}
	logs := p.Output()
	if !strings.Contains(logs, "CreateJob") {
		t.Fatalf("the serve log did not capture the calls:\n%s", logs)
	}
	if strings.Contains(logs, key) || strings.Contains(logs, key[len(coordinator.APIKeyPrefix):]) {
		t.Errorf("the serve log contains the API key:\n%s", logs)
	}
}

// runServe runs `leasehold serve args...` in a temporary directory until
// it exits (it must, within 30s) and returns its exit code and output.
func runServe(t *testing.T, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, testserver.Binary(t), append([]string{"serve"}, args...)...)
	cmd.Dir = t.TempDir()
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("serve: %v\n%s", err, out)
	}
	return cmd.ProcessState.ExitCode(), string(out)
}

func freePort(t *testing.T) int {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().(*net.TCPAddr).Port
}

// TestServeRefusesToListenBeyondLoopbackWithoutAuth: the real binary exits
// 2 when asked to serve --auth none on every interface, serves (warning at
// start) with --insecure-allow-unauthenticated, and serves with --auth
// api-key; the loopback default needs nothing.
func TestServeRefusesToListenBeyondLoopbackWithoutAuth(t *testing.T) {
	t.Parallel()
	code, out := runServe(t, "--listen", "0.0.0.0:0")
	if code != 2 || !strings.Contains(out, "refusing to listen") || !strings.Contains(out, "--insecure-allow-unauthenticated") {
		t.Errorf("serve --listen 0.0.0.0:0 exited %d:\n%s", code, out)
	}
	code, out = runServe(t, "--listen", "[::]:0", "--auth", "none")
	if code != 2 || !strings.Contains(out, "refusing to listen") {
		t.Errorf("serve --listen [::]:0 exited %d:\n%s", code, out)
	}

	insecure := testserver.StartProcess(t, "--listen", fmt.Sprintf("0.0.0.0:%d", freePort(t)), "--insecure-allow-unauthenticated")
	if !strings.Contains(insecure.Output(), "INSECURE") {
		t.Errorf("no warning when serving unauthenticated beyond loopback:\n%s", insecure.Output())
	}
	keyed := testserver.StartProcess(t, "--listen", fmt.Sprintf("0.0.0.0:%d", freePort(t)), "--auth", "api-key")
	if strings.Contains(keyed.Output(), "INSECURE") || !strings.Contains(keyed.Output(), "clear text") {
		t.Errorf("--auth api-key without TLS beyond loopback: want the clear-text warning only:\n%s", keyed.Output())
	}
	loop := testserver.StartProcess(t)
	if strings.Contains(loop.Output(), "INSECURE") || strings.Contains(loop.Output(), "WARN") {
		t.Errorf("the loopback default warns:\n%s", loop.Output())
	}
}
