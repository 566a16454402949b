package main

import (
	"net"
	"strings"
	"testing"
)

func TestServeSecurityFlagChecks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		f    securityFlags
		want string // "" = valid
	}{
		{securityFlags{auth: "none"}, ""},
		{securityFlags{auth: "api-key"}, ""},
		{securityFlags{auth: "api-key", certFile: "c", keyFile: "k"}, ""},
		{securityFlags{auth: "api-key", certFile: "c", keyFile: "k", clientCAFile: "ca"}, ""},
		{securityFlags{auth: "mtls", certFile: "c", keyFile: "k", clientCAFile: "ca"}, ""},
		{securityFlags{auth: "basic"}, "--auth"},
		{securityFlags{auth: "none", certFile: "c"}, "go together"},
		{securityFlags{auth: "none", clientCAFile: "ca"}, "needs TLS"},
		{securityFlags{auth: "mtls", certFile: "c", keyFile: "k"}, "--auth mtls needs"},
		{securityFlags{auth: "mtls"}, "--auth mtls needs"},
	} {
		err := c.f.check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.f, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want an error about %q", c.f, err, c.want)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:7400": true, "127.1.2.3:1": true, "[::1]:7400": true,
		"0.0.0.0:7400": false, "[::]:7400": false, "10.1.2.3:7400": false,
	} {
		a, err := net.ResolveTCPAddr("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if got := isLoopback(a); got != want {
			t.Errorf("isLoopback(%s) = %v, want %v", addr, got, want)
		}
	}
}
