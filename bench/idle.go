package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/bench/measure"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// Idle mode: what N idle worker streams cost the coordinator.
//
//  1. Start the coordinator; once it serves, read its RSS: the baseline.
//  2. Open N Connect streams, each on its own grpc.ClientConn (so each is
//     its own TCP connection, as separate worker processes have), each
//     sending Hello (capacity 1) and a CreditGrant of 1, on an empty
//     queue. They are opened from the bench process: what is measured is
//     the coordinator, and a stream costs it the same whichever process
//     holds the other end.
//  3. Wait until the coordinator's leasehold_worker_streams gauge says N,
//     then --settle. The gauge is read only before the window: a scrape
//     also refreshes the queue gauges with a store query.
//  4. Over --window: the coordinator's CPU time (/proc/PID/stat) and, on
//     PostgreSQL, its commits: the transactions it ended, counted on the
//     wire by a txcount.Proxy its connections go through, and beside them
//     the server's count (measure.Monitor, the bench's own reads
//     subtracted), which also has the empty transactions PostgreSQL runs
//     by itself in idle backends when the rest of the server changes
//     catalogs or sends notifications. At the end, its RSS again.
//  5. Kill the coordinator with SIGKILL: its backends exit, which flushes
//     their commit counts, and no shutdown work lands in the window.
const (
	// idleBaselineSettle lets the coordinator finish starting (first
	// dispatch rounds, first metrics collection) before the baseline RSS.
	idleBaselineSettle = time.Second
	// idleOpenParallel is how many streams are being opened at once.
	idleOpenParallel = 32
	// idleConnectBase and idleConnectPerStream bound the wait for all
	// streams to be connected.
	idleConnectBase      = 30 * time.Second
	idleConnectPerStream = 20 * time.Millisecond
	// idleGaugePoll is how often the streams gauge is read meanwhile.
	idleGaugePoll = 100 * time.Millisecond
	// idleClientBuffer is the bench side's transport buffers per
	// connection: smaller than grpc-go's 32 KiB defaults, so 2,000
	// connections stay cheap for the bench. It changes nothing on the
	// coordinator's side.
	idleClientBuffer = 4 << 10
	// openFilesSpare is room for everything but the streams' sockets.
	openFilesSpare = 256
	// streamsGauge is the coordinator's open-streams gauge on /metrics.
	streamsGauge = "leasehold_worker_streams"
	// scrapeLimit bounds one /metrics request.
	scrapeLimit = 10 * time.Second
)

func (r *runner) idle(ctx context.Context) error {
	f := r.flags.idle
	if err := ensureOpenFiles(f.streams); err != nil {
		return err
	}
	httpAddr, err := r.coord.httpAddr()
	if err != nil {
		return err
	}
	pid := r.coord.cmd.Process.Pid
	if n, err := scrapeStreams(ctx, httpAddr); err != nil {
		return err
	} else if n != 0 {
		return fmt.Errorf("the fresh coordinator reports %d worker streams, want 0", n)
	}
	if err := sleepCtx(ctx, idleBaselineSettle); err != nil {
		return err
	}
	base, err := readProcUsage(pid)
	if err != nil {
		return fmt.Errorf("read the coordinator's usage: %w", err)
	}

	connectStart := time.Now()
	streams := openIdleStreams(ctx, r.coord.addr, f.streams)
	defer streams.close()
	if err := r.waitStreams(ctx, httpAddr, streams, f.streams); err != nil {
		return err
	}
	connectElapsed := time.Since(connectStart)
	if err := r.idleWait(ctx, streams, f.settle); err != nil {
		return err
	}

	w, err := r.idleWindow(ctx, pid, streams)
	if err != nil {
		return err
	}
	elapsed, u0, u1, wire, commits := w.elapsed, w.u0, w.u1, w.wire, w.commits

	res := measure.NewResult("leasehold", r.flags.engine, modeIdle)
	res.SetInt("streams", int64(f.streams))
	res.SetFloat("window_s", elapsed.Seconds(), 3)
	res.SetFloat("settle_s", f.settle.Seconds(), 3)
	res.SetFloat("connect_s", connectElapsed.Seconds(), 3)
	cpuPct := float64(u1.cpuTicks-u0.cpuTicks) / userHZ / elapsed.Seconds() * 100
	perStream := float64(u1.rssKiB-base.rssKiB) / float64(f.streams)
	lines := []string{
		fmt.Sprintf("leasehold %s idle: coordinator on %s, %d idle Connect streams (one connection each, capacity 1, one credit) on an empty queue",
			r.flags.engine, r.where(), f.streams),
		fmt.Sprintf("  connected in %.3fs, then %s quiet; measured over %.3fs", connectElapsed.Seconds(), f.settle, elapsed.Seconds()),
	}
	if r.monitor != nil {
		cps := float64(wire) / elapsed.Seconds()
		res.SetInt("commits", wire)
		res.SetFloat("commits_per_s", cps, 2)
		scps := float64(commits) / elapsed.Seconds()
		res.SetInt("server_commits", commits)
		res.SetFloat("server_commits_per_s", scps, 2)
		lines = append(lines,
			fmt.Sprintf("  commits   %8.2f /s   (%d transactions the coordinator ended in the window, counted on the wire; target < 5/s at 2,000 streams)", cps, wire),
			fmt.Sprintf("            %8.2f /s   on the server's count (%d in pg_stat_database, the bench's own reads excluded, PostgreSQL's housekeeping in the coordinator's backends included)", scps, commits))
	} else {
		lines = append(lines, "  commits   not counted on SQLite")
	}
	res.SetFloat("cpu_pct", cpuPct, 2)
	res.SetInt("rss_base_kib", base.rssKiB)
	res.SetInt("rss_streams_kib", u1.rssKiB)
	res.SetFloat("rss_per_stream_kib", perStream, 1)
	lines = append(lines,
		fmt.Sprintf("  cpu       %8.2f %% of one core  (%d ticks of 1/%d s; target < 3%% at 2,000 streams)", cpuPct, u1.cpuTicks-u0.cpuTicks, userHZ),
		fmt.Sprintf("  memory    %8.1f KiB per stream  (RSS %d KiB without streams, %d KiB with them; target ≤ 30 KiB)", perStream, base.rssKiB, u1.rssKiB),
	)
	for _, l := range lines {
		fmt.Fprintln(r.stdout, l)
	}
	fmt.Fprintln(r.stdout, res.String())
	return nil
}

// idleSample is what the idle mode measures over its window.
type idleSample struct {
	elapsed time.Duration
	u0, u1  procUsage // the coordinator's usage at the window's ends
	wire    int64     // transactions the coordinator ended, counted on the wire
	commits int64     // the server's count (pg_stat_database), the bench's own reads excluded
}

// idleWindow measures the coordinator over the window while the streams
// stay idle, then stops the coordinator and the streams.
func (r *runner) idleWindow(ctx context.Context, pid int, streams *idleStreams) (idleSample, error) {
	var w idleSample
	if r.monitor != nil {
		if err := r.monitor.BeginWindow(ctx); err != nil {
			return w, err
		}
	}
	var wire0 int64
	if r.wire != nil {
		wire0 = r.wire.Transactions()
	}
	begin := time.Now()
	var err error
	if w.u0, err = readProcUsage(pid); err != nil {
		return w, fmt.Errorf("read the coordinator's usage: %w", err)
	}
	if err := r.idleWait(ctx, streams, r.flags.idle.window); err != nil {
		return w, err
	}
	if w.u1, err = readProcUsage(pid); err != nil {
		return w, fmt.Errorf("read the coordinator's usage: %w", err)
	}
	end := time.Now()
	if r.wire != nil {
		w.wire = r.wire.Transactions() - wire0
	}
	r.coord.kill()
	streams.close()
	w.elapsed = end.Sub(begin)
	if r.monitor != nil {
		win, err := r.monitor.EndWindow(ctx, r.appName)
		if err != nil {
			return w, err
		}
		w.commits = win.Commits
	}
	return w, nil
}

// waitStreams waits until every stream was welcomed and the coordinator's
// gauge counts them all.
func (r *runner) waitStreams(ctx context.Context, httpAddr string, s *idleStreams, n int) error {
	limit := idleConnectBase + time.Duration(n)*idleConnectPerStream
	ctx, cancel := context.WithTimeoutCause(ctx, limit, fmt.Errorf("the %d streams were not all connected within %s", n, limit))
	defer cancel()
	tick := time.NewTicker(idleGaugePoll)
	defer tick.Stop()
	for {
		if s.welcomed.Load() == int64(n) {
			got, err := scrapeStreams(ctx, httpAddr)
			if err != nil {
				return err
			}
			if got == int64(n) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d streams welcomed: %w", s.welcomed.Load(), context.Cause(ctx))
		case <-r.coord.exited:
			return fmt.Errorf("the coordinator exited (%w); its log: %s", r.coord.waitErr, r.coord.logPath)
		case <-s.failed:
			return s.err()
		case <-tick.C:
		}
	}
}

// idleWait waits d while the coordinator and every stream stay up.
func (r *runner) idleWait(ctx context.Context, s *idleStreams, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-r.coord.exited:
		return fmt.Errorf("the coordinator exited (%w); its log: %s", r.coord.waitErr, r.coord.logPath)
	case <-s.failed:
		return s.err()
	case <-t.C:
		return nil
	}
}

// scrapeStreams reads the coordinator's open-streams gauge.
func scrapeStreams(ctx context.Context, httpAddr string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, scrapeLimit)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scrape the coordinator's metrics: %w", err)
	}
	defer func() { _ = resp.Body.Close() }() // a read error is reported below
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("scrape the coordinator's metrics: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, streamsGauge)
		if !ok || rest == "" || (rest[0] != ' ' && rest[0] != '{') {
			continue
		}
		fields := strings.Fields(rest)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		return int64(v), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read the coordinator's metrics: %w", err)
	}
	return 0, fmt.Errorf("the coordinator's metrics have no %s", streamsGauge)
}

// idleStreams are the N idle streams and their connections. A stream that
// ends, or is pushed anything but its Welcome, fails the run (via failed)
// unless close has begun.
type idleStreams struct {
	cancel   context.CancelFunc
	wg       sync.WaitGroup // the opener and one receiver per stream
	welcomed atomic.Int64
	closing  atomic.Bool
	failed   chan struct{} // closed on the first failure

	mu    sync.Mutex // guards conns and first
	conns []*grpc.ClientConn
	first error
}

// openIdleStreams starts opening n streams to addr, idleOpenParallel at a
// time, and returns at once; progress is in welcomed, failures in failed.
func openIdleStreams(ctx context.Context, addr string, n int) *idleStreams {
	ctx, cancel := context.WithCancel(ctx)
	s := &idleStreams{cancel: cancel, failed: make(chan struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		sem := make(chan struct{}, idleOpenParallel)
		for i := range n {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			s.wg.Add(1)
			go func() {
				defer s.wg.Done()
				st, err := s.open(ctx, addr, i)
				<-sem
				if err != nil {
					s.fail(fmt.Errorf("open stream %d: %w", i, err))
					return
				}
				s.receive(i, st)
			}()
		}
	}()
	return s
}

func (s *idleStreams) open(ctx context.Context, addr string, i int) (grpc.BidiStreamingClient[leaseholdv1.ConnectRequest, leaseholdv1.ConnectResponse], error) {
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithReadBufferSize(idleClientBuffer),
		grpc.WithWriteBufferSize(idleClientBuffer))
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.closing.Load() {
		// close has taken the list already.
		s.mu.Unlock()
		_ = conn.Close()
		return nil, errors.New("closing")
	}
	s.conns = append(s.conns, conn)
	s.mu.Unlock()
	if err := waitReady(ctx, conn); err != nil {
		return nil, err
	}
	st, err := leaseholdv1.NewWorkerServiceClient(conn).Connect(ctx)
	if err != nil {
		return nil, err
	}
	hello := &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Hello{Hello: &leaseholdv1.Hello{
		WorkerId: "bench-idle-" + strconv.Itoa(i+1),
		Queues:   []string{measure.QueueName},
		Capacity: 1,
		SdkName:  "leasehold-bench",
	}}}
	credit := &leaseholdv1.ConnectRequest{Msg: &leaseholdv1.ConnectRequest_Credit{Credit: &leaseholdv1.CreditGrant{Credits: 1}}}
	if err := st.Send(hello); err != nil {
		return nil, fmt.Errorf("send Hello: %w", err)
	}
	if err := st.Send(credit); err != nil {
		return nil, fmt.Errorf("send CreditGrant: %w", err)
	}
	return st, nil
}

// receive reads stream i until it ends. Only this goroutine receives and,
// after open, nothing sends.
func (s *idleStreams) receive(i int, st grpc.BidiStreamingClient[leaseholdv1.ConnectRequest, leaseholdv1.ConnectResponse]) {
	for {
		msg, err := st.Recv()
		if err != nil {
			s.fail(fmt.Errorf("stream %d ended: %w", i, err))
			return
		}
		switch m := msg.GetMsg().(type) {
		case *leaseholdv1.ConnectResponse_Welcome:
			s.welcomed.Add(1)
		case *leaseholdv1.ConnectResponse_Lease:
			s.fail(fmt.Errorf("stream %d was pushed job %s, but the queue should be empty", i, m.Lease.GetJob().GetId()))
		default:
			s.fail(fmt.Errorf("stream %d got an unexpected %T", i, m))
		}
	}
}

func (s *idleStreams) fail(err error) {
	if s.closing.Load() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.first == nil {
		s.first = err
		close(s.failed)
	}
}

func (s *idleStreams) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.first
}

// close ends every stream and connection and waits for their goroutines;
// safe twice.
func (s *idleStreams) close() {
	s.cancel()
	s.mu.Lock()
	s.closing.Store(true)
	conns := s.conns
	s.conns = nil
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close() // it fails only for a connection closed already
	}
	s.wg.Wait()
}
