package e2e

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// BenchmarkBulkReplay is issue 25's target: replay 100,000 dead jobs
// (≤ 60 s) while unary workers drain another queue (≥ 80 % of the
// throughput they reach alone) and a producer creates jobs at 100 calls/s
// (CreateJob p99 ≤ 2× its value without the operation). One coordinator
// process on PostgreSQL, paced at its defaults (--operation-rate 2000,
// --operation-chunk 1000) unless LEASEHOLD_BENCH_OPERATION_RATE and
// LEASEHOLD_BENCH_OPERATION_CHUNK say otherwise.
//
// Run it with: go test -run '^$' -bench BulkReplay -benchtime 1x ./e2e/
//
// Each iteration: a fresh schema with 100,000 dead jobs and 300,000
// queued drain jobs (inserted with SQL, so that setting up is not what is
// measured); a phase of drainFor with the drain and the producer alone;
// then the replay with the same load until the operation is done. The
// figures are reported as metrics: replay_s, drain_alone_jobs/s,
// drain_during_jobs/s, drain_ratio, create_p99_alone_ms,
// create_p99_during_ms, p99_ratio.
func BenchmarkBulkReplay(b *testing.B) {
	const (
		deadJobs  = 100_000
		drainJobs = 300_000
		drainFor  = 15 * time.Second
		workers   = 8
	)
	rate := envOr("LEASEHOLD_BENCH_OPERATION_RATE", "2000")
	chunk := envOr("LEASEHOLD_BENCH_OPERATION_CHUNK", "1000")
	for b.Loop() {
		url := pgtest.Schema(b)
		// The call-rate defences are off: the load is the benchmark's own,
		// and a refused call would measure the limiter, not the store.
		p := testserver.StartProcess(b, "--database-url", url, "--operation-rate", rate, "--operation-chunk", chunk,
			"--operation-poll-interval", "100ms", "--unary-rate", "-1", "--connection-call-rate", "-1", "--address-call-rate", "-1")
		conn := p.Dial(b)
		c := newClients(conn)
		ops := leaseholdv1.NewOperationServiceClient(conn)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		seed(ctx, b, url, deadJobs, drainJobs)

		alone := measureLoad(ctx, b, c, workers, func(ctx context.Context) { sleepCtx(ctx, drainFor) })
		var took time.Duration
		during := measureLoad(ctx, b, c, workers, func(ctx context.Context) {
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
		cancel()
		b.ReportMetric(took.Seconds(), "replay_s")
		b.ReportMetric(alone.rate, "drain_alone_jobs/s")
		b.ReportMetric(during.rate, "drain_during_jobs/s")
		b.ReportMetric(during.rate/alone.rate, "drain_ratio")
		b.ReportMetric(ms(alone.p99), "create_p99_alone_ms")
		b.ReportMetric(ms(during.p99), "create_p99_during_ms")
		b.ReportMetric(float64(during.p99)/float64(alone.p99), "p99_ratio")
		b.Logf("replay %.1fs; drain %.0f → %.0f jobs/s (%.2f); CreateJob p99 %.2f → %.2f ms (%.2fx); %d/%d creates",
			took.Seconds(), alone.rate, during.rate, during.rate/alone.rate, ms(alone.p99), ms(during.p99),
			float64(during.p99)/float64(alone.p99), alone.creates, during.creates)
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
func seed(ctx context.Context, b *testing.B, url string, dead, queued int) {
	b.Helper()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close(ctx)
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
}

// load is what measureLoad saw.
type load struct {
	rate    float64 // drained jobs per second
	p99     time.Duration
	creates int
}

// measureLoad runs workers unary workers draining queue drain and a
// producer calling CreateJob 100 times a second while phase runs, and
// returns the drain's throughput and CreateJob's p99 over the phase.
func measureLoad(ctx context.Context, b *testing.B, c clients, workers int, phase func(context.Context)) load {
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
	start, before := time.Now(), drained.Load()
	phase(ctx)
	elapsed, n := time.Since(start), drained.Load()-before
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	var p99 time.Duration
	if len(lat) > 0 {
		p99 = lat[min(len(lat)-1, len(lat)*99/100)]
	}
	return load{rate: float64(n) / elapsed.Seconds(), p99: p99, creates: len(lat)}
}
