package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/internal/txcount"
)

// The pre-authentication part of the abuse suite: attacks that need no
// valid credential, sent by another process (the test binary started with
// attackHelperEnv) at a `leasehold serve --auth api-key` process on
// PostgreSQL, while a probe with a valid key calls GetJob on its own
// connection. Each asserts the coordinator's peak resident set (VmHWM of
// /proc/PID/status: the kernel's own high-water mark, so no peak is missed
// between samples) and that the probe was served without an error or a
// timeout; the probe's p99 is logged, not asserted (a shared 2-core
// machine).

// attackHelperEnv names the attack the test binary runs instead of its
// tests (TestMain); attackAddrEnv is the coordinator's address.
const (
	attackHelperEnv = "LEASEHOLD_E2E_ATTACK"
	attackAddrEnv   = "LEASEHOLD_E2E_ATTACK_ADDR"
)

// attackResult is what the attack helper prints, as JSON.
type attackResult struct {
	// Codes counts the calls answered, by gRPC status code name.
	Codes map[string]int
	// Refused counts the calls the server ended without an answer: a
	// GOAWAY, a RST_STREAM or a closed connection.
	Refused int
	// Ended lists how the refused calls ended (at most a few distinct).
	Ended  []string
	TookMS int64
}

func (r *attackResult) add(code string, refusal string) {
	if refusal != "" {
		r.Refused++
		if len(r.Ended) < 5 && !containsString(r.Ended, refusal) {
			r.Ended = append(r.Ended, refusal)
		}
		return
	}
	r.Codes[code]++
}

func containsString(ss []string, s string) bool {
	for _, v := range ss {
		if v == s {
			return true
		}
	}
	return false
}

// The attacks.
const (
	// attackHeaders: hugeHeaderCalls concurrent GetJob calls, each on a
	// connection of its own, with no key and one header of
	// hugeHeaderBytes, written frame by frame with x/net/http2 so that
	// the server's advertised SETTINGS_MAX_HEADER_LIST_SIZE is ignored,
	// as an attacker would.
	attackHeaders = "headers"
	// attackHealthWatch: healthWatches grpc.health.v1 Watch streams with no
	// key over healthWatchConns connections, all held until every one has
	// been tried.
	attackHealthWatch = "health-watch"
	// attackWrongKeys: wrongKeyCalls GetJob calls, each with a different
	// well-formed random API key, over wrongKeyConns connections.
	attackWrongKeys = "wrong-keys"
	// attackStreamOpens: streamOpens Connect streams of one principal (the
	// key in attackKeyEnv), each with its own worker id, over
	// streamOpenConns connections, all at once.
	attackStreamOpens = "stream-opens"
)

// attackKeyEnv passes the attacker a valid key, for the attacks of a
// principal.
const attackKeyEnv = "LEASEHOLD_E2E_ATTACK_KEY"

const (
	healthWatches, healthWatchConns = 5000, 10
	wrongKeyCalls, wrongKeyConns    = 20_000, 10
	streamOpens, streamOpenConns    = 2000, 10
	// healthWatchesPerConn is coordinator.HealthWatchersPerConnectionMaxDefault.
	healthWatchesPerConn = 8
	hugeHeaderCalls      = 24
	hugeHeaderBytes      = 15 << 20
)

// runAttackHelper runs one attack at addr and prints its attackResult; it
// returns the exit code.
func runAttackHelper(attack, addr string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res := attackResult{Codes: map[string]int{}}
	start := time.Now()
	switch attack {
	case attackHeaders:
		var mu sync.Mutex
		var wg sync.WaitGroup
		for range hugeHeaderCalls {
			wg.Go(func() {
				code, refusal := hugeHeaderCall(ctx, addr, hugeHeaderBytes)
				mu.Lock()
				res.add(code, refusal)
				mu.Unlock()
			})
		}
		wg.Wait()
	case attackHealthWatch:
		res = healthWatchAttack(ctx, addr)
	case attackWrongKeys:
		res = wrongKeyAttack(ctx, addr)
	case attackStreamOpens:
		res = streamOpenAttack(ctx, addr, os.Getenv(attackKeyEnv))
	default:
		fmt.Fprintf(os.Stderr, "unknown attack %q\n", attack)
		return 2
	}
	res.TookMS = time.Since(start).Milliseconds()
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// hugeHeaderCall sends one GetJob with a header of padBytes over a raw
// HTTP/2 connection and returns the grpc-status the server answered, or
// how it refused the call.
func hugeHeaderCall(ctx context.Context, addr string, padBytes int) (code, refusal string) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", "dial: " + err.Error()
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()

	var wmu sync.Mutex // guards the framer's writes: the reader acks settings and pings
	fr := http2.NewFramer(nc, nc)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	fr.MaxHeaderListSize = 1 << 20
	// The preface first, before the reader may ack the server's settings.
	if _, err := io.WriteString(nc, http2.ClientPreface); err != nil {
		return "", "write: " + err.Error()
	}
	if err := fr.WriteSettings(); err != nil {
		return "", "write: " + err.Error()
	}
	answer := make(chan [2]string, 1)
	go func() {
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				ended := "connection reset"
				if errors.Is(err, io.EOF) {
					ended = "connection closed"
				}
				answer <- [2]string{"", ended}
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					wmu.Lock()
					_ = fr.WriteSettingsAck()
					wmu.Unlock()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					wmu.Lock()
					_ = fr.WritePing(true, f.Data)
					wmu.Unlock()
				}
			case *http2.GoAwayFrame:
				answer <- [2]string{"", "GOAWAY " + f.ErrCode.String()}
				return
			case *http2.RSTStreamFrame:
				answer <- [2]string{"", "RST_STREAM " + f.ErrCode.String()}
				return
			case *http2.MetaHeadersFrame:
				if s := f.PseudoValue("status"); s != "" && s != "200" {
					answer <- [2]string{"", "HTTP " + s}
					return
				}
				for _, hf := range f.RegularFields() {
					if hf.Name == "grpc-status" {
						answer <- [2]string{"status " + hf.Value, ""}
						return
					}
				}
			}
		}
	}()

	var block bytes.Buffer
	enc := hpack.NewEncoder(&block)
	for _, hf := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: "/leasehold.v1.JobService/GetJob"},
		{Name: ":authority", Value: addr},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "te", Value: "trailers"},
		// 'X' has an 8-bit Huffman code, so the encoder sends it as is:
		// the server receives (and would have to hold) every byte.
		{Name: "x-pad", Value: strings.Repeat("X", padBytes)},
	} {
		if err := enc.WriteField(hf); err != nil {
			return "", "encode: " + err.Error()
		}
	}
	write := func(f func() error) error {
		wmu.Lock()
		defer wmu.Unlock()
		return f()
	}
	// One write for the whole header block: nothing (a settings ack) may
	// come between a HEADERS frame and its CONTINUATIONs.
	err = write(func() error {
		const frag = 16 << 10 // the default SETTINGS_MAX_FRAME_SIZE
		b := block.Bytes()
		first := b[:min(frag, len(b))]
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: first, EndHeaders: len(b) <= frag}); err != nil {
			return err
		}
		for rest := b[len(first):]; len(rest) > 0; {
			n := min(frag, len(rest))
			chunk := rest[:n]
			rest = rest[n:]
			if err := fr.WriteContinuation(1, len(rest) == 0, chunk); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		// An empty GetJobRequest: the 5-byte gRPC message prefix.
		err = write(func() error { return fr.WriteData(1, true, make([]byte, 5)) })
	}
	select {
	case a := <-answer:
		return a[0], a[1]
	case <-time.After(30 * time.Second):
		if err != nil {
			return "", "write: " + err.Error()
		}
		return "", "no answer in 30s"
	case <-ctx.Done():
		return "", "timed out"
	}
}

// healthWatchAttack opens healthWatches Watch streams and holds every one
// the server accepted (answered its first status) until all were tried.
func healthWatchAttack(ctx context.Context, addr string) attackResult {
	res := attackResult{Codes: map[string]int{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the held watches
	var hcs []healthpb.HealthClient
	for range healthWatchConns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			res.add("", "dial: "+err.Error())
			return res
		}
		defer conn.Close()
		hcs = append(hcs, healthpb.NewHealthClient(conn))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 200)
	for i := range healthWatches {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w, err := hcs[i%healthWatchConns].Watch(ctx, &healthpb.HealthCheckRequest{})
			if err == nil {
				_, err = w.Recv()
			}
			code, reason := errorInfo(err)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.Codes["accepted"]++
			case reason != "":
				res.Codes[code.String()+" "+reason]++
			default:
				res.Codes[code.String()]++
			}
		})
	}
	wg.Wait()
	return res
}

// wrongKeyAttack sends wrongKeyCalls GetJobs, each with a fresh random
// key of the right shape, 1,000 at a time.
func wrongKeyAttack(ctx context.Context, addr string) attackResult {
	res := attackResult{Codes: map[string]int{}}
	var jcs []leaseholdv1.JobServiceClient
	for range wrongKeyConns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			res.add("", "dial: "+err.Error())
			return res
		}
		defer conn.Close()
		jcs = append(jcs, leaseholdv1.NewJobServiceClient(conn))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	// Many at once: the coordinator answers an unknown key after its next
	// directory reload, up to half a second later.
	sem := make(chan struct{}, 1000)
	for i := range wrongKeyCalls {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var secret [32]byte
			_, _ = rand.Read(secret[:])
			key := coordinator.APIKeyPrefix + base64.RawURLEncoding.EncodeToString(secret[:])
			_, err := jcs[i%wrongKeyConns].GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: "01J00000000000000000000000"},
				grpc.PerRPCCredentials(bearerKey(key)))
			code, reason := errorInfo(err)
			mu.Lock()
			defer mu.Unlock()
			if reason != "" {
				res.Codes[code.String()+" "+reason]++
			} else {
				res.Codes[code.String()]++
			}
		})
	}
	wg.Wait()
	return res
}

// streamOpenAttack opens streamOpens Connect streams with a Hello each and
// holds those welcomed until every one was tried.
func streamOpenAttack(ctx context.Context, addr, key string) attackResult {
	res := attackResult{Codes: map[string]int{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the held streams
	var wcs []leaseholdv1.WorkerServiceClient
	for range streamOpenConns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithPerRPCCredentials(bearerKey(key)))
		if err != nil {
			res.add("", "dial: "+err.Error())
			return res
		}
		defer conn.Close()
		wcs = append(wcs, leaseholdv1.NewWorkerServiceClient(conn))
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range streamOpens {
		wg.Go(func() {
			s, err := wcs[i%streamOpenConns].Connect(ctx)
			if err != nil {
				mu.Lock()
				res.Codes["open: "+status.Code(err).String()]++
				mu.Unlock()
				return
			}
			err = s.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
				WorkerId: fmt.Sprintf("opener-%d", i), Queues: []string{"opens"}, Capacity: 1,
			}}})
			if err == nil || errors.Is(err, io.EOF) {
				// Welcome, or (after a Send that found the stream
				// ended: io.EOF) the status it ended with.
				_, err = s.Recv()
			}
			code, reason := errorInfo(err)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				res.Codes["welcomed"]++
			case reason != "":
				res.Codes[code.String()+" "+reason]++
			default:
				res.Codes[code.String()]++
			}
		})
	}
	wg.Wait()
	return res
}

// runAttacker runs the attack helper against addr and returns its result.
func runAttacker(t *testing.T, attack, addr string, env ...string) attackResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^$")
	cmd.Env = append(append(os.Environ(), attackHelperEnv+"="+attack, attackAddrEnv+"="+addr), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("attack helper %s: %v", attack, err)
	}
	var res attackResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("attack helper output %q: %v", out, err)
	}
	return res
}

// bearerKey sends an API key on every call; plaintext is fine on
// loopback.
type bearerKey string

func (k bearerKey) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(k)}, nil
}

func (bearerKey) RequireTransportSecurity() bool { return false }

// preauthServer is a `leasehold serve --auth api-key` process on
// PostgreSQL behind a transaction counter, with an admin key and a probe
// job.
type preauthServer struct {
	p       *testserver.Process
	tx      *txcount.Proxy
	dbURL   string
	key     string
	withKey grpc.DialOption
	c       clients
	probeID string
}

func preauthServe(t *testing.T, args ...string) *preauthServer {
	t.Helper()
	return preauthServeWith(t, nil, args...)
}

// preauthServeWith is preauthServe with parameters added to the
// coordinator's database URL (pool_max_conns: its pool's size).
func preauthServeWith(t *testing.T, urlParams map[string]string, args ...string) *preauthServer {
	t.Helper()
	db := pgtest.Schema(t)
	tx, err := txcount.Start(db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Close) // after the process has stopped (cleanups run last first)
	u, err := url.Parse(tx.URL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	for k, v := range urlParams {
		q.Set(k, v)
	}
	u.RawQuery = q.Encode()
	p := testserver.StartProcess(t, append([]string{"--database-url", u.String(), "--auth", "api-key"}, args...)...)
	s := &preauthServer{p: p, tx: tx, dbURL: db}
	s.key = keyCreateDB(t, db, "--role", "admin", "--name", "probe")
	s.withKey = grpc.WithPerRPCCredentials(bearerKey(s.key))
	conn, err := grpc.NewClient(p.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()), s.withKey)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s.c = newClients(conn)
	job, err := s.c.jobs.CreateJob(ctxT(t), &leaseholdv1.CreateJobRequest{Job: spec("probe", "")})
	if err != nil {
		t.Fatal(err)
	}
	s.probeID = job.GetJob().GetId()
	return s
}

// keyCreateDB creates a key offline in a PostgreSQL database and returns
// it.
func keyCreateDB(t *testing.T, databaseURL string, args ...string) string {
	t.Helper()
	cmd := exec.Command(testserver.Binary(t), append([]string{"key", "create", "--database-url", databaseURL}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("leasehold key create: %v\n%s%s", err, out.String(), errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	key := strings.TrimSpace(strings.TrimPrefix(lines[len(lines)-1], "Key:"))
	if key == "" {
		t.Fatalf("no key in the output:\n%s", out.String())
	}
	return key
}

// hwmMB is the process's peak resident set so far, in MB.
func hwmMB(t *testing.T, pid int) float64 { return float64(rssKB(t, pid, "VmHWM")) / 1024 }

// 24 calls with no key, each with a 15 MiB header, from another process
// that ignores the header limit the server advertises: the coordinator
// refuses each before reading it (MaxHeaderListBytes), so its peak RSS
// stays under 300 MB, and the probe is served throughout.
func TestAbuseHugeHeadersBeforeAuth(t *testing.T) {
	const rssMaxMB = 300
	s := preauthServe(t)
	pid := s.p.Cmd.Process.Pid
	before := hwmMB(t, pid)
	probe := startProbe(t, s.p.Addr, s.probeID, s.withKey)
	probe.p99Max = 0 // reported, not asserted
	res := runAttacker(t, attackHeaders, s.p.Addr)
	p50, p99, n := probe.Stop(t)
	peak := hwmMB(t, pid)
	t.Logf("huge headers: %d calls with no key and a %d MiB header each (another process, raw HTTP/2) in %dms: answered %v, refused %d (%v); "+
		"coordinator VmHWM %.1f MB before, %.1f MB after (bound %d MB); probe GetJob p50 %v p99 %v over %d calls",
		hugeHeaderCalls, hugeHeaderBytes>>20, res.TookMS, res.Codes, res.Refused, res.Ended, before, peak, rssMaxMB, p50, p99, n)
	if peak > rssMaxMB {
		t.Errorf("coordinator peak RSS (VmHWM) %.1f MB; want at most %d MB", peak, rssMaxMB)
	}
	if res.Codes["status 0"] > 0 {
		t.Errorf("%d calls with no key were answered OK", res.Codes["status 0"])
	}
	if got := res.Refused + sumCodes(res.Codes); got != hugeHeaderCalls {
		t.Errorf("%d of %d calls accounted for", got, hugeHeaderCalls)
	}
	// The coordinator still serves a new client.
	if _, err := s.c.jobs.GetJob(ctxT(t), &leaseholdv1.GetJobRequest{JobId: s.probeID}); err != nil {
		t.Errorf("GetJob after the attack: %v", err)
	}
}

func sumCodes(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// 5,000 grpc.health.v1 Watch streams with no key over 10 connections,
// from another process: at most the caps are accepted (8 per connection
// here), the rest are refused RESOURCE_EXHAUSTED WATCH_LIMIT with a
// RetryInfo; the coordinator's peak RSS stays under 300 MB and the probe
// is served throughout.
func TestAbuseHealthWatchesBeforeAuth(t *testing.T) {
	const rssMaxMB = 300
	s := preauthServe(t)
	pid := s.p.Cmd.Process.Pid
	before := hwmMB(t, pid)
	probe := startProbe(t, s.p.Addr, s.probeID, s.withKey)
	probe.p99Max = 0 // reported, not asserted
	res := runAttacker(t, attackHealthWatch, s.p.Addr)
	p50, p99, n := probe.Stop(t)
	peak := hwmMB(t, pid)
	t.Logf("health watches: %d Watch streams with no key over %d connections (another process) in %dms: %v; "+
		"coordinator VmHWM %.1f MB before, %.1f MB after (bound %d MB); probe GetJob p50 %v p99 %v over %d calls",
		healthWatches, healthWatchConns, res.TookMS, res.Codes, before, peak, rssMaxMB, p50, p99, n)
	if most := healthWatchConns * healthWatchesPerConn; res.Codes["accepted"] > most {
		t.Errorf("%d health watches accepted; want at most %d (%d per connection)", res.Codes["accepted"], most, healthWatchesPerConn)
	}
	if refused := res.Codes["ResourceExhausted WATCH_LIMIT"]; res.Codes["accepted"]+refused != healthWatches {
		t.Errorf("health watches ended %v; want each accepted or refused WATCH_LIMIT", res.Codes)
	}
	if peak > rssMaxMB {
		t.Errorf("coordinator peak RSS (VmHWM) %.1f MB; want at most %d MB", peak, rssMaxMB)
	}
}

// 20,000 calls from another process, each with a different well-formed
// random API key: each is refused (UNAUTHENTICATED, or RATE_LIMITED
// before authentication) at the cost of at most 100 store transactions
// all told, counted on the wire (the coordinator authenticates from its
// principal directory in memory); the failures reach the log as summary
// lines, not a line each, and to the audit log as AUTHENTICATION_FAILURES
// events, one per --auth-failure-audit-interval at most, that count every
// refusal and name no key. A key created meanwhile through another process
// works within the auth cache bound (2.5s).
func TestAbuseWrongKeysCostNoStoreQueries(t *testing.T) {
	const txMax, newKeyMax, auditEvery = 100, 2500 * time.Millisecond, 2 * time.Second
	s := preauthServe(t, "--overload-log-interval", "1s", "--auth-failure-audit-interval", auditEvery.String())
	// Let start-up and the fixture's writes settle, then measure what the
	// coordinator spends idle (its scheduler, readiness probe and
	// principal directory refresh run on timers), so that a slow attack on
	// a loaded machine is not charged for the timers' transactions.
	time.Sleep(time.Second)
	idleFor := 3 * time.Second
	idle0 := s.tx.Transactions()
	time.Sleep(idleFor)
	idleRate := float64(s.tx.Transactions()-idle0) / idleFor.Seconds()
	tx0, t0 := s.tx.Transactions(), time.Now()
	res := runAttacker(t, attackWrongKeys, s.p.Addr)
	raw := s.tx.Transactions() - tx0
	background := int64(idleRate * time.Since(t0).Seconds())
	txs := max(raw-background, 0)
	// The summary comes at the end of its 1s interval.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if strings.Contains(s.p.Output(), "authentication failures in the last interval") {
			break
		}
	}
	out := s.p.Output()
	perCall := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "Unauthenticated") && !strings.Contains(line, "level=DEBUG") {
			perCall++
		}
	}
	summaries := strings.Count(out, "authentication failures in the last interval")

	// The audit log's summaries count every refused authentication.
	refused := int64(res.Codes["Unauthenticated UNAUTHENTICATED"])
	var audited, auditEvents int64
	var auditData string
	for deadline := time.Now().Add(3 * auditEvery); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		audited, auditEvents, auditData = authFailuresAudited(t, s.c.admin)
		if audited >= refused {
			break
		}
	}
	if audited != refused {
		t.Errorf("AUTHENTICATION_FAILURES audit events count %d failures; want the %d refused", audited, refused)
	}
	if strings.Contains(auditData, coordinator.APIKeyPrefix) {
		t.Errorf("audit data %s holds a key", auditData)
	}
	if most := int64(time.Since(t0)/auditEvery) + 1; auditEvents > most {
		t.Errorf("%d AUTHENTICATION_FAILURES audit events; want at most one per %v (%d)", auditEvents, auditEvery, most)
	}

	// A key created by another process (offline, in the database) while
	// this coordinator holds its directory.
	newKey := keyCreateDB(t, s.dbURL, "--role", "reader", "--name", "late")
	created := time.Now()
	late := leaseholdv1.NewJobServiceClient(s.p.Dial(t))
	var lateErr error
	for time.Since(created) < 2*newKeyMax {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, lateErr = late.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: s.probeID}, grpc.PerRPCCredentials(bearerKey(newKey)))
		cancel()
		if lateErr == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	lateTook := time.Since(created)

	t.Logf("wrong keys: %d GetJob calls with distinct random keys over %d connections (another process) in %dms: %v; "+
		"%d store transactions meanwhile beyond the idle %.1f/s (%d all told; bound %d); %d per-call log lines above Debug, %d summary lines; "+
		"%d audit events counting %d failures (newest %s); a key created elsewhere worked after %v (bound %v)",
		wrongKeyCalls, wrongKeyConns, res.TookMS, res.Codes, txs, idleRate, raw, txMax, perCall, summaries,
		auditEvents, audited, auditData, lateTook.Round(time.Millisecond), newKeyMax)
	if n := res.Codes["Unauthenticated UNAUTHENTICATED"] + res.Codes["ResourceExhausted RATE_LIMITED"]; n != wrongKeyCalls {
		t.Errorf("answers %v; want every call UNAUTHENTICATED or RATE_LIMITED", res.Codes)
	}
	if txs > txMax {
		t.Errorf("%d store transactions for %d wrong keys; want at most %d", txs, wrongKeyCalls, txMax)
	}
	if summaries == 0 {
		t.Error("no summary of the authentication failures in the log")
	}
	if perCall > 10 {
		t.Errorf("%d log lines above Debug for refused authentications; want a summary per interval instead", perCall)
	}
	if lateErr != nil || lateTook > newKeyMax {
		t.Errorf("a key created elsewhere: %v after %v; want it to work within %v", lateErr, lateTook, newKeyMax)
	}
}

// authFailuresAudited sums the failures of the AUTHENTICATION_FAILURES
// audit events and returns them with the number of events and the newest
// one's data.
func authFailuresAudited(t *testing.T, admin leaseholdv1.AdminServiceClient) (failures, events int64, newest string) {
	t.Helper()
	page, err := admin.ListAuditEvents(ctxT(t), &leaseholdv1.ListAuditEventsRequest{PageSize: 500})
	if err != nil {
		t.Fatalf("ListAuditEvents: %v", err)
	}
	for _, ev := range page.GetEvents() {
		if ev.GetAction() != leaseholdv1.AuditAction_AUDIT_ACTION_AUTHENTICATION_FAILURES {
			continue
		}
		var data struct{ Failures int64 }
		if err := json.Unmarshal([]byte(ev.GetDataJson()), &data); err != nil {
			t.Fatalf("audit data %q: %v", ev.GetDataJson(), err)
		}
		if events == 0 {
			newest = ev.GetDataJson()
		}
		failures += data.Failures
		events++
	}
	return failures, events, newest
}

// 2,000 Connect streams of one principal opened at once, each with its
// own worker id, from another process over streamOpenConns connections,
// against a coordinator whose store pool holds 4 connections
// (pool_max_conns=4) and whose stream-open limits (per principal, per
// connection, per address) are off, so that every Hello reaches the
// worker-id check. Checking a worker id reads the store in the write lane
// and binds nothing (the first lease binds), so a GetJob probe every
// 50ms answers each time within openBurstProbeMax and readiness (watched
// through grpc.health.v1) stays SERVING. Before, each Hello bound its id
// with a store transaction outside the write lane: the 2,000 binds took
// the 4 connections from everyone else (the probe waited seconds).
func TestAbuseStreamOpenBurstLeavesTheStoreToOthers(t *testing.T) {
	const rssMaxMB = 300
	s := preauthServeWith(t, map[string]string{"pool_max_conns": "4"},
		"--stream-open-rate", "-1", "--connection-stream-open-rate", "-1", "--address-stream-open-rate", "-1")
	pid := s.p.Cmd.Process.Pid
	workerKey := keyCreateDB(t, s.dbURL, "--role", "worker", "--name", "opener")
	ready := watchReadiness(t, s.p.Addr)
	probe := startSlowProbe(t, s.p.Addr, s.probeID, s.withKey)
	res := runAttacker(t, attackStreamOpens, s.p.Addr, attackKeyEnv+"="+workerKey)
	// The binds of the burst may outlast the attacker's answers: keep
	// probing a little after.
	time.Sleep(time.Second)
	lat, errs := probe.stop()
	notServing := ready.stop()
	peak := hwmMB(t, pid)
	slices.Sort(lat)
	if len(lat) < 5 {
		t.Fatalf("only %d probe GetJobs answered (%d failed)", len(lat), len(errs))
	}
	worst, p50 := lat[len(lat)-1], lat[len(lat)/2]
	t.Logf("stream opens: %d Connect streams with a Hello each (distinct worker ids) of one principal over %d connections (another process), store pool of 4, stream-open limits off, in %dms: %v; "+
		"probe GetJob every %v: %d answered, %d failed, p50 %v, max %v (bound %v); readiness left SERVING %d times (%v); coordinator VmHWM %.1f MB",
		streamOpens, streamOpenConns, res.TookMS, res.Codes, openBurstProbeEvery, len(lat), len(errs), p50, worst, openBurstProbeMax,
		len(notServing), notServing, peak)
	if res.Codes["welcomed"] == 0 {
		t.Errorf("no stream was welcomed: %v", res.Codes)
	}
	for code, k := range res.Codes {
		switch code {
		case "welcomed", "Unavailable OVERLOADED":
		default:
			t.Errorf("%d stream opens ended %s; want welcomed or OVERLOADED with a RetryInfo", k, code)
		}
	}
	if len(errs) > 0 {
		t.Errorf("%d probe GetJobs failed; first: %v", len(errs), errs[0])
	}
	if worst > openBurstProbeMax {
		t.Errorf("the slowest probe GetJob took %v; want every one under %v", worst, openBurstProbeMax)
	}
	if len(notServing) > 0 {
		t.Errorf("readiness left SERVING during the burst: %v", notServing)
	}
	if peak > rssMaxMB {
		t.Errorf("coordinator peak RSS (VmHWM) %.1f MB; want at most %d MB", peak, rssMaxMB)
	}
}

// The stream-open burst's probe: a GetJob every openBurstProbeEvery, each
// of which must answer within openBurstProbeMax (a primary-key read;
// seconds mean the store's connections were taken). Measured on a shared
// 2-core machine: the slowest probe took 0.16-0.51s with Hello's check in
// the write lane, 2.0-2.6s with Hello binding outside it.
const (
	openBurstProbeEvery = 50 * time.Millisecond
	openBurstProbeMax   = time.Second
)

// slowProbe calls GetJob every openBurstProbeEvery on its own connection,
// each with a 15s deadline, and keeps every latency and error.
type slowProbe struct {
	mu   sync.Mutex // guards lat and errs
	lat  []time.Duration
	errs []error
	halt chan struct{}
	done chan struct{}
}

func startSlowProbe(t *testing.T, addr, jobID string, opts ...grpc.DialOption) *slowProbe {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	jobs := leaseholdv1.NewJobServiceClient(conn)
	if _, err := jobs.GetJob(ctxT(t), &leaseholdv1.GetJobRequest{JobId: jobID}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	p := &slowProbe{halt: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(openBurstProbeEvery)
		defer tick.Stop()
		for {
			select {
			case <-p.halt:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			start := time.Now()
			_, err := jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: jobID})
			d := time.Since(start)
			cancel()
			p.mu.Lock()
			if err != nil {
				p.errs = append(p.errs, fmt.Errorf("after %v: %w", d.Round(time.Millisecond), err))
			} else {
				p.lat = append(p.lat, d)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

func (p *slowProbe) stop() ([]time.Duration, []error) {
	close(p.halt)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lat, p.errs
}

// readinessWatch holds a grpc.health.v1 Watch of the coordinator's
// "readiness" service and notes every status other than SERVING.
type readinessWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex // guards seen
	seen   []string
}

func watchReadiness(t *testing.T, addr string) *readinessWatch {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithCancel(context.Background())
	w, err := healthpb.NewHealthClient(conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: coordinator.HealthReadiness})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	first, err := w.Recv()
	if err != nil || first.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		cancel()
		t.Fatalf("readiness before the burst: %v %v", first.GetStatus(), err)
	}
	r := &readinessWatch{cancel: cancel, done: make(chan struct{})}
	start := time.Now()
	go func() {
		defer close(r.done)
		for {
			m, err := w.Recv()
			if err != nil {
				if ctx.Err() == nil {
					r.mu.Lock()
					r.seen = append(r.seen, "watch ended: "+err.Error())
					r.mu.Unlock()
				}
				return
			}
			if m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				r.mu.Lock()
				r.seen = append(r.seen, fmt.Sprintf("%v at +%v", m.GetStatus(), time.Since(start).Round(time.Millisecond)))
				r.mu.Unlock()
			}
		}
	}()
	return r
}

func (r *readinessWatch) stop() []string {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen
}
