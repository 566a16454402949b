package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// The abuse suite: one misbehaving client at a time against a real
// `leasehold serve` process on loopback, each bounded in count and time
// (about a minute together). Each asserts that a probe GetJob on its own
// connection stays fast (p99 under probeP99Max) and that the coordinator's
// resident set (VmRSS of /proc/PID/status, sampled throughout) stays under
// a stated bound, and logs the figures it measured.
//
// The tests are not parallel: they measure one process's memory and CPU,
// and run before the package's parallel tests start.

// probeP99Max is the generous bound on the probe's p99 latency: a GetJob
// is a primary-key read, normally well under 10ms; a coordinator that
// lets one client starve the others takes seconds.
const probeP99Max = 500 * time.Millisecond

// rssKB reads a field (VmRSS, VmHWM) of /proc/pid/status, in kB.
func rssKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/status: %v", pid, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				t.Fatalf("parse %s %q: %v", field, v, err)
			}
			return kb
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// cpuTicks is utime + stime of /proc/pid/stat, in clock ticks (1/100 s on
// Linux: USER_HZ).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatalf("read /proc/%d/stat: %v", pid, err)
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64) // field 14
	stime, _ := strconv.ParseInt(fields[12], 10, 64) // field 15
	return utime + stime
}

const userHZ = 100

// rssSampler records the peak VmRSS of a process, sampled every 20ms.
type rssSampler struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(t *testing.T, pid int) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.peak.Store(rssKB(t, pid, "VmRSS"))
	go func() {
		defer close(s.done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				if err != nil {
					return
				}
				for _, line := range strings.Split(string(b), "\n") {
					if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
						kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
						if kb > s.peak.Load() {
							s.peak.Store(kb)
						}
					}
				}
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak in MB.
func (s *rssSampler) Stop() float64 {
	close(s.stop)
	<-s.done
	return float64(s.peak.Load()) / 1024
}

// prober calls GetJob on its own connection every 10ms until stopped and
// keeps the latencies.
type prober struct {
	mu    sync.Mutex // guards lat and errs
	lat   []time.Duration
	errs  []error
	stop  chan struct{}
	done  chan struct{}
	calls int
	// p99Max is the p99 Stop asserts; zero: reported only.
	p99Max time.Duration
}

func startProbe(t *testing.T, addr, jobID string, opts ...grpc.DialOption) *prober {
	t.Helper()
	conn, err := grpc.NewClient(addr, append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	jobs := leaseholdv1.NewJobServiceClient(conn)
	// Connect before the abuse starts: the probe is a client already there.
	if _, err := jobs.GetJob(ctxT(t), &leaseholdv1.GetJobRequest{JobId: jobID}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	p := &prober{stop: make(chan struct{}), done: make(chan struct{}), p99Max: probeP99Max}
	go func() {
		defer close(p.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-tick.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			_, err := jobs.GetJob(ctx, &leaseholdv1.GetJobRequest{JobId: jobID})
			d := time.Since(start)
			cancel()
			p.mu.Lock()
			p.calls++
			if err != nil {
				p.errs = append(p.errs, err)
			} else {
				p.lat = append(p.lat, d)
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// Stop ends probing and checks it: at least a few calls, none failed, p99
// under probeP99Max. It returns the p50 and p99.
func (p *prober) Stop(t *testing.T) (p50, p99 time.Duration, n int) {
	t.Helper()
	close(p.stop)
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.errs) > 0 {
		t.Errorf("%d of %d probe GetJobs failed; first: %v", len(p.errs), p.calls, p.errs[0])
	}
	if len(p.lat) < 5 {
		t.Fatalf("only %d probe GetJobs answered", len(p.lat))
	}
	slices.Sort(p.lat)
	p50, p99 = p.lat[len(p.lat)/2], p.lat[len(p.lat)*99/100]
	if p.p99Max > 0 && p99 > p.p99Max {
		t.Errorf("probe GetJob p99 %v (p50 %v, %d calls); want under %v", p99, p50, len(p.lat), p.p99Max)
	}
	return p50, p99, len(p.lat)
}

// abuseServe starts `leasehold serve` on PostgreSQL with args, and a probe
// job.
func abuseServe(t *testing.T, args ...string) (*testserver.Process, clients, string) {
	t.Helper()
	p := testserver.StartProcess(t, append([]string{"--database-url", pgtest.Schema(t)}, args...)...)
	c := newClients(p.Dial(t))
	probe, err := c.jobs.CreateJob(ctxT(t), &leaseholdv1.CreateJobRequest{Job: spec("probe", "")})
	if err != nil {
		t.Fatal(err)
	}
	return p, c, probe.GetJob().GetId()
}

// With 300 jobs of 1 MB, three concurrent ListJobs of page_size 500 in the
// default view keep the coordinator under 200 MB: BASIC pages carry no
// payloads. FULL pages stop at the page budget, so a client with grpc-go's
// default 4 MiB receive limit pages through the same jobs.
func TestAbuseListAmplification(t *testing.T) {
	const jobs, payload, rssMaxMB = 300, 1_000_000, 200
	p, c, probeID := abuseServe(t)
	pid := p.Cmd.Process.Pid
	// Not ctxT's minute: 300 MB of payloads are written with fsync on, and
	// a loaded CI machine took longer than that for the writes and the
	// lists together.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, jobs)
	sem := make(chan struct{}, 8)
	for i := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			body := make([]byte, payload)
			body[0] = byte(i)
			if _, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "big", Kind: "k", Payload: body}}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create a 1 MB job: %v", err)
	}
	before := float64(rssKB(t, pid, "VmRSS")) / 1024

	rss := sampleRSS(t, pid)
	probe := startProbe(t, p.Addr, probeID)
	start := time.Now()
	listed := make([]int, 3)
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			page, err := c.jobs.ListJobs(ctx, &leaseholdv1.ListJobsRequest{Queue: "big", PageSize: 500})
			if err != nil {
				t.Errorf("ListJobs of 500: %v", err)
				return
			}
			listed[i] = len(page.GetJobs())
		}()
	}
	wg.Wait()
	basicTook := time.Since(start)
	// One FULL pass over the first 40 jobs, pages of at most the budget.
	full, fullPages := 0, 0
	req := &leaseholdv1.ListJobsRequest{Queue: "big", PageSize: 500, View: leaseholdv1.JobView_JOB_VIEW_FULL}
	for full < 40 {
		page, err := c.jobs.ListJobs(ctx, req)
		if err != nil {
			t.Fatalf("FULL page %d with the default 4 MiB receive limit: %v", fullPages, err)
		}
		full += len(page.GetJobs())
		fullPages++
		req.PageToken = page.GetNextPageToken()
	}
	p50, p99, n := probe.Stop(t)
	peak := rss.Stop()
	t.Logf("list amplification: %d jobs of %d bytes; RSS %.1f MB before the lists, peak %.1f MB during (bound %d MB); "+
		"3 concurrent BASIC ListJobs of 500 listed %v jobs in %v; FULL: %d jobs in %d pages; probe GetJob p50 %v p99 %v over %d calls",
		jobs, payload, before, peak, rssMaxMB, listed, basicTook.Round(time.Millisecond), full, fullPages, p50, p99, n)
	for _, got := range listed {
		if got != jobs {
			t.Errorf("a BASIC ListJobs of 500 listed %d jobs; want all %d on one page", got, jobs)
		}
	}
	if peak > rssMaxMB {
		t.Errorf("coordinator RSS peaked at %.1f MB during the lists; want under %d MB", peak, rssMaxMB)
	}
}

// 5,000 idle watchers (distinct jobs, ten connections) cost under 5% of a
// core: each sleeps until its job changes, nothing polls. One job's change
// still reaches its watcher at once.
func TestAbuseIdleWatchers(t *testing.T) {
	const watchers, conns, window, cpuMax, rssMaxMB = 5000, 10, 5 * time.Second, 0.05, 300
	p, c, probeID := abuseServe(t)
	pid := p.Cmd.Process.Pid
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	ids := make([]string, 0, watchers)
	for len(ids) < watchers {
		reqs := make([]*leaseholdv1.CreateJobRequest, 1000)
		for i := range reqs {
			reqs[i] = &leaseholdv1.CreateJobRequest{Job: spec("watched", "")}
		}
		resp, err := c.jobs.BatchCreateJobs(ctx, &leaseholdv1.BatchCreateJobsRequest{Requests: reqs})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resp.GetResponses() {
			ids = append(ids, r.GetJob().GetId())
		}
	}
	rss := sampleRSS(t, pid)
	clientsOf := make([]clients, conns)
	for i := range clientsOf {
		clientsOf[i] = newClients(p.Dial(t))
	}
	start := time.Now()
	setupTicks := cpuTicks(t, pid)
	streams := make([]leaseholdv1.JobService_WatchJobClient, watchers)
	var wg sync.WaitGroup
	errs := make(chan error, watchers)
	sem := make(chan struct{}, 200)
	for i, id := range ids {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			ws, err := clientsOf[i%conns].jobs.WatchJob(ctx, &leaseholdv1.WatchJobRequest{JobId: id})
			if err == nil {
				_, err = ws.Recv() // QUEUED: the watch is set up
			}
			if err != nil {
				errs <- err
				return
			}
			streams[i] = ws
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("set up a watch: %v", err)
	}
	setup := time.Since(start)
	// The same reading while the watches were set up: the measurement
	// sees work when there is some.
	setupCPU := float64(cpuTicks(t, pid)-setupTicks) / userHZ / setup.Seconds()

	// The idle cost first, with nothing else calling (the probe's own
	// calls would be most of it), then the probe with the watchers held.
	ticks := cpuTicks(t, pid)
	idleStart := time.Now()
	time.Sleep(window) // measuring the idle cost is the point: nothing to wait for
	cpu := float64(cpuTicks(t, pid)-ticks) / userHZ / time.Since(idleStart).Seconds()
	probe := startProbe(t, p.Addr, probeID)
	time.Sleep(time.Second) // a second of probes against the 5,000 watchers
	p50, p99, n := probe.Stop(t)

	// A change of one watched job reaches its watcher.
	woken := time.Now()
	if _, err := c.jobs.CancelJob(ctx, &leaseholdv1.CancelJobRequest{JobId: ids[watchers/2]}); err != nil {
		t.Fatal(err)
	}
	ev, err := streams[watchers/2].Recv()
	if err != nil || ev.GetEvent().GetType() != leaseholdv1.EventType_EVENT_TYPE_CANCELLED {
		t.Fatalf("the cancelled job's watcher got %v, %v; want CANCELLED", ev, err)
	}
	wake := time.Since(woken)
	peak := rss.Stop()
	t.Logf("idle watchers: %d watches on %d connections set up in %v (CPU %.0f%% of a core meanwhile); CPU %.2f%% of a core over %v idle (bound %.0f%%); "+
		"RSS peak %.1f MB (bound %d MB); a change reached its watcher in %v; probe GetJob p50 %v p99 %v over %d calls",
		watchers, conns, setup.Round(time.Millisecond), setupCPU*100, cpu*100, window, cpuMax*100, peak, rssMaxMB, wake.Round(time.Millisecond), p50, p99, n)
	if cpu >= cpuMax {
		t.Errorf("%d idle watchers cost %.2f%% of a core; want under %.0f%%", watchers, cpu*100, cpuMax*100)
	}
	if peak > rssMaxMB {
		t.Errorf("RSS peaked at %.1f MB; want under %d MB", peak, rssMaxMB)
	}
}

// floodHelperEnv, set to a coordinator's address, makes the test binary
// the flood client (TestMain).
const floodHelperEnv = "LEASEHOLD_E2E_FLOOD_ADDR"

// floodCalls and floodConns are the flood: 10,000 concurrent CreateJob
// over 10 connections.
const floodCalls, floodConns = 10_000, 10

// floodResult is what the flood helper prints, as JSON.
type floodResult struct {
	Created, RateLimited, Overloaded int
	Other                            map[string]int
	TookMS, P50MS, P99MS, MaxMS      int64
}

// runFloodHelper sends the flood at addr and prints a floodResult; it
// returns the exit code.
func runFloodHelper(addr string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var jobsClients []leaseholdv1.JobServiceClient
	for range floodConns {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer conn.Close()
		jobsClients = append(jobsClients, leaseholdv1.NewJobServiceClient(conn))
	}
	var created, rateLimited, overloaded atomic.Int64
	var mu sync.Mutex
	other := map[string]int{}
	lat := make([]time.Duration, floodCalls)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range floodCalls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			_, err := jobsClients[i%floodConns].CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("flood", "")})
			lat[i] = time.Since(t0)
			switch code, reason := errorInfo(err); {
			case err == nil:
				created.Add(1)
			case reason == "RATE_LIMITED" && hasRetryInfo(err):
				rateLimited.Add(1)
			case reason == "OVERLOADED" && hasRetryInfo(err):
				overloaded.Add(1)
			default:
				mu.Lock()
				other[code.String()]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	slices.Sort(lat)
	res := floodResult{
		Created: int(created.Load()), RateLimited: int(rateLimited.Load()), Overloaded: int(overloaded.Load()), Other: other,
		TookMS: took.Milliseconds(), P50MS: lat[floodCalls/2].Milliseconds(), P99MS: lat[floodCalls*99/100].Milliseconds(),
		MaxMS: lat[floodCalls-1].Milliseconds(),
	}
	if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
		return 1
	}
	return 0
}

// 10,000 concurrent CreateJob over 10 connections, sent by another
// process: every call is answered quickly, created or refused with a
// RetryInfo (RATE_LIMITED, OVERLOADED), never left to time out; the probe
// stays fast; the refusals are one Warn summary in the log, not one line
// each.
func TestAbuseCreateFlood(t *testing.T) {
	const rssMaxMB = 300
	p, _, probeID := abuseServe(t, "--overload-log-interval", "1s")
	pid := p.Cmd.Process.Pid
	rss := sampleRSS(t, pid)
	probe := startProbe(t, p.Addr, probeID)
	cmd := exec.CommandContext(ctxT(t), os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), floodHelperEnv+"="+p.Addr)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("flood helper: %v", err)
	}
	p50, p99, n := probe.Stop(t)
	peak := rss.Stop()
	var res floodResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("flood helper output %q: %v", out, err)
	}
	t.Logf("create flood: %d concurrent CreateJob over %d connections (another process) in %dms: %d created, %d RATE_LIMITED, %d OVERLOADED, other %v; "+
		"call p50 %dms p99 %dms max %dms; RSS peak %.1f MB (bound %d MB); probe GetJob p50 %v p99 %v over %d calls",
		floodCalls, floodConns, res.TookMS, res.Created, res.RateLimited, res.Overloaded, res.Other,
		res.P50MS, res.P99MS, res.MaxMS, peak, rssMaxMB, p50, p99, n)
	if len(res.Other) > 0 {
		t.Errorf("calls answered other than created or refused with RetryInfo: %v", res.Other)
	}
	if res.Created == 0 {
		t.Error("the flood created nothing")
	}
	if peak > rssMaxMB {
		t.Errorf("RSS peaked at %.1f MB; want under %d MB", peak, rssMaxMB)
	}
	if res.RateLimited+res.Overloaded > 0 {
		waitFor(t, func() bool { return strings.Contains(p.Output(), "overload: calls refused") })
		out := p.Output()
		// One line per 1s interval that refused calls: the flood's seconds,
		// and the interval it ends in (a loaded machine stretches it).
		if lines, most := strings.Count(out, "overload: calls refused"), int(res.TookMS/1000)+2; lines > most {
			t.Errorf("%d overload summary lines for one %dms flood; want one per interval, at most %d", lines, res.TookMS, most)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "level=WARN") && strings.Contains(line, "CreateJob") {
				t.Fatalf("a refused call was logged at Warn by itself: %s", line)
			}
		}
	}
}

func hasRetryInfo(err error) bool {
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
			return true
		}
	}
	return false
}

// 5,000 TCP connections that never send the HTTP/2 preface: the probe,
// connected before them, stays fast; the coordinator closes every one
// after the handshake timeout; and a new client is served afterwards.
func TestAbusePreHandshakeConnections(t *testing.T) {
	const sockets, timeout, rssMaxMB = 5000, 2 * time.Second, 200
	p, _, probeID := abuseServe(t, "--connection-timeout", timeout.String())
	pid := p.Cmd.Process.Pid
	rss := sampleRSS(t, pid)
	probe := startProbe(t, p.Addr, probeID)
	start := time.Now()
	var closed atomic.Int64
	var wg sync.WaitGroup
	conns := make([]net.Conn, 0, sockets)
	for range sockets {
		nc, err := net.DialTimeout("tcp", p.Addr, 10*time.Second)
		if err != nil {
			t.Fatalf("open silent socket %d: %v", len(conns), err)
		}
		conns = append(conns, nc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = nc.SetReadDeadline(time.Now().Add(timeout + 20*time.Second))
			if _, err := io.Copy(io.Discard, nc); err == nil { // nil: EOF, the server closed it
				closed.Add(1)
			}
		}()
	}
	opened := time.Since(start)
	wg.Wait()
	allClosed := time.Since(start)
	for _, nc := range conns {
		nc.Close()
	}
	p50, p99, n := probe.Stop(t)
	// A client arriving after the flood is served.
	late := newClients(p.Dial(t))
	if _, err := late.jobs.GetJob(ctxT(t), &leaseholdv1.GetJobRequest{JobId: probeID}); err != nil {
		t.Fatalf("a new client after the silent sockets: %v", err)
	}
	peak := rss.Stop()
	t.Logf("pre-handshake connections: %d silent sockets opened in %v, %d closed by the server within %v (handshake timeout %v); "+
		"RSS peak %.1f MB (bound %d MB); probe GetJob p50 %v p99 %v over %d calls",
		sockets, opened.Round(time.Millisecond), closed.Load(), allClosed.Round(time.Millisecond), timeout, peak, rssMaxMB, p50, p99, n)
	if closed.Load() != sockets {
		t.Errorf("the server closed %d of %d silent sockets", closed.Load(), sockets)
	}
	if peak > rssMaxMB {
		t.Errorf("RSS peaked at %.1f MB; want under %d MB", peak, rssMaxMB)
	}
}

// A worker stream that declares lease_acks, grants credits for
// everything and never reads, against 100 jobs of 1 MB: it is pushed no
// more than its bound of unacknowledged leases (16 MiB here), and after
// the ack timeout (10s) the coordinator ends the stream
// (RESOURCE_EXHAUSTED, STREAM_NOT_ACKNOWLEDGING) and releases them: its
// memory stays bounded and the probe stays fast. (abuse_stream_test.go
// has 250 jobs, an old-style hoarder too, and an honest worker.)
func TestAbuseStreamThatNeverReads(t *testing.T) {
	const jobs, payload, rssMaxMB = 100, 1_000_000, 250
	p, c, probeID := abuseServe(t)
	pid := p.Cmd.Process.Pid
	// The fixture, 100 MB of payloads written with fsync on, gets a
	// deadline of its own: a loaded machine took longer than ctxT's
	// minute for it, and it is not what the test measures.
	fixture, cancelFixture := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancelFixture()
	for i := range jobs {
		body := make([]byte, payload)
		body[0] = byte(i)
		if _, err := c.jobs.CreateJob(fixture, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "hoard", Kind: "k", Payload: body}}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := ctxT(t) // the measured part's minute starts once the jobs exist
	rss := sampleRSS(t, pid)
	probe := startProbe(t, p.Addr, probeID)
	hoarder, err := newClients(p.Dial(t)).workers.Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	hello := &leaseholdv1.Hello{WorkerId: "hoarder", Queues: []string{"hoard"}, Capacity: 10_000, Features: []string{"lease_acks"}}
	if err := hoarder.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: hello}}); err != nil {
		t.Fatal(err)
	}
	if err := hoarder.Send(&leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 10_000}}}); err != nil {
		t.Fatal(err)
	}
	// Not reading is the point: give dispatch time to push everything.
	time.Sleep(3 * time.Second)
	p50, p99, n := probe.Stop(t)
	peak := rss.Stop()
	// Now read what the transport buffered: the stream has been ended.
	received := 0
	for {
		if _, err = hoarder.Recv(); err != nil {
			break
		}
		received++
	}
	code, reason := errorInfo(err)
	t.Logf("stream that never reads: %d jobs of %d bytes pushed to a stream that asked for 10,000; it was ended with %v %s "+
		"(%d messages were in flight to it); RSS peak %.1f MB (bound %d MB); probe GetJob p50 %v p99 %v over %d calls",
		jobs, payload, code, reason, received, peak, rssMaxMB, p50, p99, n)
	if code != codes.ResourceExhausted || reason != "STREAM_NOT_ACKNOWLEDGING" {
		t.Errorf("the stream that never reads ended with %v; want RESOURCE_EXHAUSTED STREAM_NOT_ACKNOWLEDGING", err)
	}
	if peak > rssMaxMB {
		t.Errorf("RSS peaked at %.1f MB; want under %d MB", peak, rssMaxMB)
	}
}
