package coordinator

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/certreload"
	"github.com/leasehold/leasehold/internal/testkit/testcert"
	"github.com/leasehold/leasehold/store"
)

// certProof is the delegation proof a console sends at t for der.
func certProof(key, der []byte, t time.Time) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ConsoleCertProofMessage(t.Unix(), der)))
	return fmt.Sprintf("%d:%s", t.Unix(), hex.EncodeToString(m.Sum(nil)))
}

// mtlsEnv is a coordinator with --auth mtls whose listener, as serve's
// with the console on, lets loopback connections omit a client
// certificate.
type mtlsEnv struct {
	*authEnv
	ca *testcert.CA
}

func newMTLSEnv(t *testing.T) *mtlsEnv {
	t.Helper()
	ca := testcert.NewCA(t, "clients")
	srv := ca.Server(t, "server")
	r, err := certreload.New(certreload.Config{
		CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile,
		ClientAuth: tls.RequireAndVerifyClientCert, LoopbackMayOmitCert: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := newAuthEnv(t, func(cfg *Config) {
		cfg.Auth, cfg.TLS = AuthMTLS, r.ServerConfig()
	})
	return &mtlsEnv{authEnv: e, ca: ca}
}

// certPrincipal makes the principal of certificates with common name cn.
func (e *mtlsEnv) certPrincipal(cn string, role store.Role) {
	e.t.Helper()
	if _, err := e.st.CreatePrincipal(context.Background(), store.CreatePrincipalParams{
		Tenant: tenantA, Name: cn, Role: role, CertSubject: store.CertSubjectFor(cn), Actor: "test",
	}); err != nil {
		e.t.Fatal(err)
	}
	e.c.identity.auth.dir.invalidate()
}

// dial connects over TLS, presenting client when not nil.
func (e *mtlsEnv) dial(client *testcert.Pair) (leaseholdv1.WorkerServiceClient, leaseholdv1.AdminServiceClient) {
	e.t.Helper()
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(e.ca.ClientTLS(e.t, client))))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return leaseholdv1.NewWorkerServiceClient(conn), leaseholdv1.NewAdminServiceClient(conn)
}

// forward is ctx carrying der as the forwarded certificate with proof
// (none when empty).
func forward(ctx context.Context, der []byte, proof string) context.Context {
	ctx = metadata.AppendToOutgoingContext(ctx, ConsoleCertHeader, base64.StdEncoding.EncodeToString(der))
	if proof != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, ConsoleCertProofHeader, proof)
	}
	return ctx
}

// TestConsoleDelegation, over real TLS with real certificates and --auth
// mtls: a call forwarding a certificate with a fresh proof under the
// console session key runs as that certificate's principal (with its
// role, audited as it), from a loopback connection that presents no
// certificate of its own. Without a proof, with a stale one, one for
// another certificate or under another key, a sign-in proof in its place,
// or a certificate of another CA, it is UNAUTHENTICATED, also when the
// connection itself presents a valid certificate; and a connection
// without a certificate and without a forwarded one is UNAUTHENTICATED
// too: letting loopback omit the certificate grants nothing by itself.
func TestConsoleDelegation(t *testing.T) {
	t.Parallel()
	e := newMTLSEnv(t)
	key := e.c.ConsoleSessionKey()
	e.certPrincipal("ops.acme", store.RoleOperator)
	e.certPrincipal("reader.acme", store.RoleReader)
	ops := e.ca.Client(t, "ops", "ops.acme")
	reader := e.ca.Client(t, "reader", "reader.acme")
	other := testcert.NewCA(t, "elsewhere").Client(t, "ops-elsewhere", "ops.acme")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	anonWorkers, anonAdmin := e.dial(nil)
	readerWorkers, _ := e.dial(&reader)

	// The direct mTLS path is unchanged.
	v, err := readerWorkers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{})
	if err != nil || v.GetCaller().GetIdentity() != "cert:CN=reader.acme" {
		t.Fatalf("direct reader certificate: caller %v, %v", v.GetCaller(), err)
	}
	if _, err := anonWorkers.GetVersion(ctx, &leaseholdv1.GetVersionRequest{}); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("loopback without any certificate: %v, want UNAUTHENTICATED", err)
	}

	// Delegated: the forwarded certificate is the caller.
	now := time.Now()
	v, err = anonWorkers.GetVersion(forward(ctx, ops.Cert.Raw, certProof(key, ops.Cert.Raw, now)), &leaseholdv1.GetVersionRequest{})
	if err != nil || v.GetCaller().GetIdentity() != "cert:CN=ops.acme" || v.GetCaller().GetRole() != leaseholdv1.Role_ROLE_OPERATOR {
		t.Fatalf("delegated operator: caller %v, %v", v.GetCaller(), err)
	}
	if _, err := anonAdmin.PauseQueue(forward(ctx, ops.Cert.Raw, certProof(key, ops.Cert.Raw, now)), &leaseholdv1.PauseQueueRequest{Queue: "emails"}); err != nil {
		t.Fatalf("delegated operator pauses a queue: %v", err)
	}
	_, err = anonAdmin.PauseQueue(forward(ctx, reader.Cert.Raw, certProof(key, reader.Cert.Raw, now)), &leaseholdv1.PauseQueueRequest{Queue: "emails"})
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("delegated reader pauses a queue: %v, want PERMISSION_DENIED", err)
	}
	events, err := anonAdmin.ListAuditEvents(forward(ctx, ops.Cert.Raw, certProof(key, ops.Cert.Raw, now)), &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var paused bool
	for _, ev := range events.GetEvents() {
		if ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_QUEUE_PAUSED && ev.GetTarget() == "emails" {
			paused = true
			if ev.GetActor() != "cert:CN=ops.acme" {
				t.Errorf("the pause is audited as %q, want the certificate's principal", ev.GetActor())
			}
		}
	}
	if !paused {
		t.Errorf("no QUEUE_PAUSED event in %v", events.GetEvents())
	}

	wrongKey := make([]byte, len(key))
	signInProof := consoleProof(key, now)
	for name, call := range map[string]context.Context{
		"no proof":                    forward(ctx, ops.Cert.Raw, ""),
		"a proof 2 min old":           forward(ctx, ops.Cert.Raw, certProof(key, ops.Cert.Raw, now.Add(-2*time.Minute))),
		"a proof 2 min ahead":         forward(ctx, ops.Cert.Raw, certProof(key, ops.Cert.Raw, now.Add(2*time.Minute))),
		"a proof for another cert":    forward(ctx, ops.Cert.Raw, certProof(key, reader.Cert.Raw, now)),
		"a proof under another key":   forward(ctx, ops.Cert.Raw, certProof(wrongKey, ops.Cert.Raw, now)),
		"a sign-in proof instead":     forward(ctx, ops.Cert.Raw, signInProof),
		"a certificate of another CA": forward(ctx, other.Cert.Raw, certProof(key, other.Cert.Raw, now)),
		"a garbled certificate":       forward(ctx, []byte("not a certificate"), certProof(key, []byte("not a certificate"), now)),
		"only a proof":                metadata.AppendToOutgoingContext(ctx, ConsoleCertProofHeader, certProof(key, ops.Cert.Raw, now)),
	} {
		if _, err := anonWorkers.GetVersion(call, &leaseholdv1.GetVersionRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s, no certificate of its own: %v, want UNAUTHENTICATED", name, err)
		}
		// An outside caller with a valid certificate of its own cannot
		// forward another's either.
		if _, err := readerWorkers.GetVersion(call, &leaseholdv1.GetVersionRequest{}); status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s, with the reader's certificate: %v, want UNAUTHENTICATED", name, err)
		}
	}
}
