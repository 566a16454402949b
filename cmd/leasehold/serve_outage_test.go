package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
)

// cutProxy forwards TCP connections to a PostgreSQL server until cut,
// which closes its listener and every connection (the database vanishes
// from the network), and restore, which listens on the same address again.
type cutProxy struct {
	t      *testing.T
	addr   string
	target string

	mu    sync.Mutex // guards lis and conns
	lis   net.Listener
	conns []net.Conn
	wg    sync.WaitGroup
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	p := &cutProxy{t: t, target: target}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = lis.Addr().String()
	p.serve(lis)
	t.Cleanup(func() { p.cut(); p.wg.Wait() })
	return p
}

func (p *cutProxy) serve(lis net.Listener) {
	p.mu.Lock()
	p.lis = lis
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			if p.lis != lis {
				// Cut while this connection was being dialled: it must
				// not outlive the cut (it did, and a readiness probe
				// found the store "reachable" in the middle of an outage).
				p.mu.Unlock()
				_, _ = c.Close(), up.Close()
				return
			}
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			p.wg.Go(func() { _, _ = io.Copy(up, c); _ = up.Close() })
			p.wg.Go(func() { _, _ = io.Copy(c, up); _ = c.Close() })
		}
	})
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lis != nil {
		_ = p.lis.Close()
		p.lis = nil
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

func (p *cutProxy) restore() {
	p.t.Helper()
	var lis net.Listener
	var err error
	for range 50 { // the port was just closed: it may take a moment to bind again
		if lis, err = net.Listen("tcp", p.addr); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		p.t.Fatalf("listen again on %s: %v", p.addr, err)
	}
	p.serve(lis)
}

// A database outage on an idle coordinator: one Warn when it starts, one
// Info when it ends, and nothing else at Warn (it was a Warn per reaper
// pass, per readiness probe and per notification listener); the JSON log
// writes durations as strings.
func TestServeLogsADatabaseOutageOnce(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.MigratedSchema(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startCutProxy(t, u.Host)
	u.Host = proxy.addr
	r := startServe(t, map[string]string{}, "--listen", "127.0.0.1:0", "--log-format", "json", "--no-migrate",
		"--database-url", u.String(), "--shutdown-grace", "2s")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	proxy.cut()
	waitFor(t, ctx, r.stderr, "store unreachable; readiness is NOT_SERVING")
	time.Sleep(12 * time.Second) // twelve reaper passes, two readiness probes
	proxy.restore()
	waitFor(t, ctx, r.stderr, "store reachable again")
	if code := r.stop(t); code != exitOK {
		t.Fatalf("exit %d", code)
	}

	var warns, backs []map[string]any
	for line := range strings.Lines(r.stderr.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		switch {
		case m["level"] == "WARN":
			warns = append(warns, m)
		case m["msg"] == "store reachable again; readiness is SERVING":
			backs = append(backs, m)
		}
		for k, v := range m {
			if _, isNumber := v.(float64); isNumber && (k == "grace" || k == "down_for" || k == "retry_in") {
				t.Errorf("duration %s=%v is a number of nanoseconds; want a string:\n%s", k, v, line)
			}
		}
	}
	if len(warns) != 1 || warns[0]["msg"] != "store unreachable; readiness is NOT_SERVING until it answers" {
		t.Errorf("%d Warn lines during a 12 s outage, want the one that starts it:\n%s", len(warns), r.stderr.String())
	}
	if len(backs) != 1 {
		t.Fatalf("%d lines say the store is back, want 1", len(backs))
	}
	if d, err := time.ParseDuration(backs[0]["down_for"].(string)); err != nil || d < 5*time.Second {
		t.Errorf("down_for = %v (%v), want a duration string of the outage", backs[0]["down_for"], err)
	}
	if !strings.Contains(r.stderr.String(), `"grace":"2s"`) {
		t.Errorf(`the shutdown line lacks "grace":"2s":%s`, r.stderr.String())
	}
}
