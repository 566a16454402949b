package worker

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/credentials"

	"github.com/leasehold/leasehold/internal/testkit/testcert"
)

// authInfo is a connection's AuthInfo at a given security level.
type authInfo struct{ level credentials.SecurityLevel }

func (a authInfo) AuthType() string { return "test" }
func (a authInfo) GetCommonAuthInfo() credentials.CommonAuthInfo {
	return credentials.CommonAuthInfo{SecurityLevel: a.level}
}

// TestAPIKeyStaysOffPlaintextBeyondLoopback: the key goes over TLS to any
// host, in clear text only to loopback, and never in clear text elsewhere.
func TestAPIKeyStaysOffPlaintextBeyondLoopback(t *testing.T) {
	t.Parallel()
	creds := APIKey("lh_secret")
	if creds.RequireTransportSecurity() {
		t.Fatal("RequireTransportSecurity would forbid the plaintext loopback default")
	}
	for _, c := range []struct {
		level credentials.SecurityLevel
		uri   string
		send  bool
	}{
		{credentials.PrivacyAndIntegrity, "https://coordinator.example:7400/leasehold.v1.JobService", true},
		{credentials.NoSecurity, "https://127.0.0.1:7400/leasehold.v1.JobService", true},
		{credentials.NoSecurity, "https://127.0.0.53:7400/leasehold.v1.JobService", true},
		{credentials.NoSecurity, "https://[::1]:7400/leasehold.v1.JobService", true},
		{credentials.NoSecurity, "https://localhost:7400/leasehold.v1.JobService", true},
		{credentials.NoSecurity, "https://coordinator.example:7400/leasehold.v1.JobService", false},
		{credentials.NoSecurity, "https://10.0.0.5:7400/leasehold.v1.JobService", false},
		{credentials.NoSecurity, "https://0.0.0.0:7400/leasehold.v1.JobService", false},
		{credentials.IntegrityOnly, "https://10.0.0.5:7400/leasehold.v1.JobService", false},
	} {
		ctx := credentials.NewContextWithRequestInfo(context.Background(), credentials.RequestInfo{AuthInfo: authInfo{c.level}})
		md, err := creds.GetRequestMetadata(ctx, c.uri)
		if c.send {
			if err != nil || md["authorization"] != "Bearer lh_secret" {
				t.Errorf("%v to %s: %v, %v; want the key sent", c.level, c.uri, md, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "refusing to send an API key") {
			t.Errorf("%v to %s: %v, %v; want a refusal", c.level, c.uri, md, err)
		}
	}
}

func TestDialConfig(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		EnvTLSCAFile: "/ca.pem", EnvTLSCertFile: "/c.pem", EnvTLSKeyFile: "/k.pem",
		EnvTLSServerName: "coord", EnvAPIKey: "lh_k",
	}
	cfg := DialConfigFromEnv(func(k string) string { return env[k] })
	if !cfg.UsesTLS() || cfg.CAFile != "/ca.pem" || cfg.CertFile != "/c.pem" || cfg.KeyFile != "/k.pem" || cfg.ServerName != "coord" || cfg.APIKey != "lh_k" {
		t.Errorf("from the environment: %+v", cfg)
	}
	if c := DialConfigFromEnv(func(k string) string { return map[string]string{EnvTLS: "true"}[k] }); !c.UsesTLS() {
		t.Error("LEASEHOLD_TLS=true does not turn TLS on")
	}
	if (DialConfig{}).UsesTLS() {
		t.Error("the zero config uses TLS")
	}
	if tc, err := (DialConfig{}).TLSConfig(); tc != nil || err != nil {
		t.Errorf("the zero config's TLS: %v, %v", tc, err)
	}

	ca := testcert.NewCA(t, "dial")
	client := ca.Client(t, "client", "w1")
	tc, err := TLSConfig(ca.CertFile, client.CertFile, client.KeyFile, "coord")
	if err != nil || tc.RootCAs == nil || len(tc.Certificates) != 1 || tc.ServerName != "coord" || tc.MinVersion != tls.VersionTLS12 {
		t.Errorf("TLSConfig: %+v, %v", tc, err)
	}
	if _, err := TLSConfig("", client.CertFile, "", ""); err == nil {
		t.Error("a certificate without its key was accepted")
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	if err := os.WriteFile(empty, []byte("not pem"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := TLSConfig(empty, "", "", ""); err == nil {
		t.Error("a CA file without certificates was accepted")
	}
	if _, err := DialOptions(DialConfig{CAFile: filepath.Join(t.TempDir(), "missing.pem")}); err == nil {
		t.Error("a missing CA file was accepted")
	}
}
