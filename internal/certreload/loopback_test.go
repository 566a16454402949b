package certreload_test

import (
	"crypto/tls"
	"net"
	"testing"

	"github.com/leasehold/leasehold/internal/certreload"
	"github.com/leasehold/leasehold/internal/testkit/testcert"
)

// peerConn is a connection from remote, for ClientHelloInfo.Conn.
type peerConn struct {
	net.Conn
	remote net.Addr
}

func (c peerConn) RemoteAddr() net.Addr { return c.remote }

// TestLoopbackMayOmitCert: with LoopbackMayOmitCert a handshake from a
// loopback address may omit the client certificate (one given is still
// verified); from any other address, or without the option, one is
// required.
func TestLoopbackMayOmitCert(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "clients")
	srv := ca.Server(t, "server")
	policy := func(omit bool, ip string) tls.ClientAuthType {
		t.Helper()
		r, err := certreload.New(certreload.Config{
			CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile,
			ClientAuth: tls.RequireAndVerifyClientCert, LoopbackMayOmitCert: omit,
		})
		if err != nil {
			t.Fatal(err)
		}
		base := r.ServerConfig()
		if base.ClientAuth != tls.RequireAndVerifyClientCert {
			t.Fatalf("the base config's ClientAuth = %v", base.ClientAuth)
		}
		c, err := base.GetConfigForClient(&tls.ClientHelloInfo{Conn: peerConn{remote: &net.TCPAddr{IP: net.ParseIP(ip), Port: 4000}}})
		if err != nil {
			t.Fatal(err)
		}
		if c.ClientCAs == nil {
			t.Fatal("no client CAs")
		}
		return c.ClientAuth
	}
	for _, tc := range []struct {
		omit bool
		ip   string
		want tls.ClientAuthType
	}{
		{true, "127.0.0.1", tls.VerifyClientCertIfGiven},
		{true, "::1", tls.VerifyClientCertIfGiven},
		{true, "192.0.2.7", tls.RequireAndVerifyClientCert},
		{true, "10.0.0.1", tls.RequireAndVerifyClientCert},
		{false, "127.0.0.1", tls.RequireAndVerifyClientCert},
	} {
		if got := policy(tc.omit, tc.ip); got != tc.want {
			t.Errorf("LoopbackMayOmitCert %v, peer %s: ClientAuth %v, want %v", tc.omit, tc.ip, got, tc.want)
		}
	}
}
