package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasehold/leasehold/coordinator/bulk"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// BenchmarkBulkReplay is issue 25's target: replay 100,000 dead jobs
// (≤ 60 s) while unary workers drain another queue (≥ 80 % of the
// throughput they reach alone) and a producer creates jobs at 100 calls/s
// (CreateJob p99 ≤ 2× its value without the operation). One coordinator
// process on PostgreSQL, paced at its defaults (--operation-rate 2000,
// --operation-chunk 250) unless LEASEHOLD_BENCH_OPERATION_RATE and
// LEASEHOLD_BENCH_OPERATION_CHUNK say otherwise.
//
// Run it with: go test -run '^$' -bench BulkReplay -benchtime 1x ./e2e/
//
// Each iteration: a fresh schema with 100,000 dead jobs and 700,000
// queued drain jobs (inserted with SQL, so that setting up is not what is
// measured); then the same load in three windows: aloneFor without the
// operation, the replay until the operation is done, aloneFor without it
// again. "Alone" is both quiet windows together (as long as the replay,
// about 6,000 calls, one before and one after so that a drift of the
// machine's load weighs on both sides), "during" the replay's window.
// The figures are reported as metrics: replay_s, the drain's jobs/s and
// ratio, CreateJob's p50/p95/p99 alone and during with the p99 ratio, and
// the WAL written per second in each and per replayed job.
func BenchmarkBulkReplay(b *testing.B) {
	const (
		deadJobs  = 100_000
		drainJobs = 700_000
		aloneFor  = 30 * time.Second
		workers   = 8
	)
	rate := envOr("LEASEHOLD_BENCH_OPERATION_RATE", strconv.Itoa(bulk.RateDefault))
	chunk := envOr("LEASEHOLD_BENCH_OPERATION_CHUNK", strconv.Itoa(bulk.ChunkDefault))
	for b.Loop() {
		// Named, so that pg_stat_activity tells its sessions from others'.
		url := pgtest.Schema(b) + "&application_name=leasehold_bench_replay"
		// The call-rate defences are off: the load is the benchmark's own,
		// and a refused call would measure the limiter, not the store. The
		// unary deadline is long enough for a loaded machine's start of the
		// operation (its match of 100,000 jobs).
		p := testserver.StartProcess(b, "--database-url", url, "--operation-rate", rate, "--operation-chunk", chunk,
			"--operation-poll-interval", "100ms", "--unary-rate", "-1", "--connection-call-rate", "-1", "--address-call-rate", "-1",
			"--unary-timeout", "2m")
		conn := p.Dial(b)
		c := newClients(conn)
		ops := leaseholdv1.NewOperationServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		pg := seed(ctx, b, url, deadJobs, drainJobs)

		quiet := func(ctx context.Context) { sleepCtx(ctx, aloneFor) }
		before := measureLoad(ctx, b, c, pg, workers, quiet)
		var took time.Duration
		during := measureLoad(ctx, b, c, pg, workers, func(ctx context.Context) {
			start := time.Now()
			resp, err := ops.ReplayDeadJobs(ctx, &leaseholdv1.ReplayDeadJobsRequest{Filter: "queue = poisoned", Reason: "bench"})
			if err != nil {
				b.Error(err)
				return
			}
			if got := resp.GetOperation().GetCounts().GetMatched(); got != deadJobs {
				b.Errorf("matched %d, want %d", got, deadJobs)
			}
			for {
				w, err := ops.WaitOperation(ctx, &leaseholdv1.WaitOperationRequest{Name: resp.GetOperation().GetName(), Timeout: durationpb.New(time.Second)})
				if err != nil {
					b.Error(err)
					return
				}
				if w.GetOperation().GetDone() {
					if w.GetOperation().GetCounts().GetActed() != deadJobs {
						b.Errorf("operation ended %v", w.GetOperation())
					}
					break
				}
			}
			took = time.Since(start)
		})
		after := measureLoad(ctx, b, c, pg, workers, quiet)
		cancel()
		pg.Close(context.Background())
		alone := before.merge(after)
		walPerJob := (float64(during.wal) - alone.walRate()*during.elapsed.Seconds()) / deadJobs
		b.ReportMetric(took.Seconds(), "replay_s")
		b.ReportMetric(alone.rate(), "drain_alone_jobs/s")
		b.ReportMetric(during.rate(), "drain_during_jobs/s")
		b.ReportMetric(during.rate()/alone.rate(), "drain_ratio")
		for _, q := range []struct {
			name string
			pct  int
		}{{"p50", 50}, {"p95", 95}, {"p99", 99}} {
			b.ReportMetric(ms(alone.pct(q.pct)), "create_"+q.name+"_alone_ms")
			b.ReportMetric(ms(during.pct(q.pct)), "create_"+q.name+"_during_ms")
		}
		b.ReportMetric(float64(during.pct(99))/float64(alone.pct(99)), "p99_ratio")
		b.ReportMetric(alone.walRate(), "wal_alone_B/s")
		b.ReportMetric(during.walRate(), "wal_during_B/s")
		b.ReportMetric(walPerJob, "wal_B/replayed_job")
		b.Logf("replay %.1fs; drain %.0f → %.0f jobs/s (%.2f); CreateJob p50/p95/p99 %.2f/%.2f/%.2f → %.2f/%.2f/%.2f ms (p99 %.2fx); "+
			"%d creates in %.1fs alone (%.1fs before, %.1fs after), %d in %.1fs during; WAL %.0f → %.0f kB/s, %.0f B per replayed job",
			took.Seconds(), alone.rate(), during.rate(), during.rate()/alone.rate(),
			ms(alone.pct(50)), ms(alone.pct(95)), ms(alone.pct(99)), ms(during.pct(50)), ms(during.pct(95)), ms(during.pct(99)),
			float64(during.pct(99))/float64(alone.pct(99)), len(alone.lat), alone.elapsed.Seconds(), before.elapsed.Seconds(),
			after.elapsed.Seconds(), len(during.lat), during.elapsed.Seconds(), alone.walRate()/1000, during.walRate()/1000, walPerJob)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// seed inserts the dead jobs of queue poisoned and the queued jobs of
// queue drain straight into the schema, in the tenant of --auth none.
// It returns its connection, which measureLoad reads the WAL position
// with.
func seed(ctx context.Context, b *testing.B, url string, dead, queued int) *pgx.Conn {
	b.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf(`INSERT INTO jobs (tenant, id, queue, kind, payload, priority, state, attempts, max_attempts,
			created_at, available_at, finished_at, last_error_code, last_error_message, last_error_retryable)
		SELECT 'default', gen_random_uuid()::text, 'poisoned', 'bench.poisoned', '\x7b7d', 0, 'dead', 1, 1,
			now() - interval '1 hour', now() - interval '1 hour', now() - interval '30 minutes', 'UPSTREAM_DOWN', 'upstream unavailable', true
		FROM generate_series(1, %d)`, dead),
		fmt.Sprintf(`INSERT INTO jobs (tenant, id, queue, kind, payload, priority, state, max_attempts, created_at, available_at)
		SELECT 'default', gen_random_uuid()::text, 'drain', 'bench.drain', '\x7b7d', 0, 'queued', 3, now(), now()
		FROM generate_series(1, %d)`, queued),
		`ANALYZE jobs`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	return conn
}

// load is what measureLoad saw.
type load struct {
	drained int64
	elapsed time.Duration
	lat     []time.Duration // CreateJob latencies, sorted
	wal     int64           // bytes of WAL written
}

func (l load) rate() float64    { return float64(l.drained) / l.elapsed.Seconds() }
func (l load) walRate() float64 { return float64(l.wal) / l.elapsed.Seconds() }

// pct is the p-th percentile of the latencies (nearest rank).
func (l load) pct(p int) time.Duration {
	if len(l.lat) == 0 {
		return 0
	}
	return l.lat[min(len(l.lat)-1, (len(l.lat)*p+99)/100-1)]
}

// merge is l and m measured as one window.
func (l load) merge(m load) load {
	lat := slices.Concat(l.lat, m.lat)
	slices.Sort(lat)
	return load{drained: l.drained + m.drained, elapsed: l.elapsed + m.elapsed, lat: lat, wal: l.wal + m.wal}
}

// walLSN is the server's current WAL position in bytes.
func walLSN(ctx context.Context, b *testing.B, pg *pgx.Conn) int64 {
	b.Helper()
	var n int64
	if err := pg.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	return n
}

// measureLoad runs workers unary workers draining queue drain and a
// producer calling CreateJob 100 times a second while phase runs, and
// returns the drain's throughput, CreateJob's latencies and the WAL
// written over the phase.
func measureLoad(ctx context.Context, b *testing.B, c clients, pg *pgx.Conn, workers int, phase func(context.Context)) load {
	b.Helper()
	ctx, cancel := context.WithCancel(ctx)
	var (
		drained atomic.Int64
		wg      sync.WaitGroup
		mu      sync.Mutex // guards lat
		lat     []time.Duration
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				claim, err := c.workers.Claim(ctx, &leaseholdv1.ClaimRequest{WorkerId: fmt.Sprintf("drain-%d", w), Queues: []string{"drain"},
					MaxJobs: 20, LeaseDuration: durationpb.New(time.Minute), Wait: durationpb.New(time.Second)})
				if err != nil {
					return
				}
				var inner sync.WaitGroup
				for _, lj := range claim.GetJobs() {
					inner.Add(1)
					go func() {
						defer inner.Done()
						if _, err := c.workers.Complete(ctx, &leaseholdv1.CompleteRequest{Token: lj.GetToken()}); err == nil {
							drained.Add(1)
						}
					}()
				}
				inner.Wait()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(10 * time.Millisecond) // 100 calls/s
		defer tick.Stop()
		var calls sync.WaitGroup
		defer calls.Wait()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			calls.Add(1)
			go func() {
				defer calls.Done()
				start := time.Now()
				_, err := c.jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: spec("live", "{}")})
				if err != nil {
					return
				}
				mu.Lock()
				lat = append(lat, time.Since(start))
				mu.Unlock()
			}()
		}
	}()
	start, before, wal := time.Now(), drained.Load(), walLSN(ctx, b, pg)
	phase(ctx)
	elapsed, n, wal := time.Since(start), drained.Load()-before, walLSN(ctx, b, pg)-wal
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	return load{drained: n, elapsed: elapsed, lat: lat, wal: wal}
}
