package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/outbox/relay"
)

// BenchmarkRelayThroughput measures rows per second from outbox row to
// durable job: a backlog of rows is in the outbox before the clock
// starts, and the clock stops when the outbox is empty (every row's job
// committed, every row deleted). The outbox is on the coordinator's
// PostgreSQL server; the coordinator runs in-process on a real socket.
//
//	go test -run '^$' -bench BenchmarkRelayThroughput -benchtime 3x ./outbox/relay/
func BenchmarkRelayThroughput(b *testing.B) {
	const rows = 20_000
	for _, workers := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			e := setup(b, nil)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			var total time.Duration
			for b.Loop() {
				b.StopTimer()
				if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.schema+`.outbox (queue, kind, payload)
					SELECT 'bench', 'k', convert_to('payload-' || g, 'UTF8') FROM generate_series(1, $1) g`, rows); err != nil {
					b.Fatal(err)
				}
				r := e.relay(b, relay.Config{Workers: workers, Logger: slog.New(slog.DiscardHandler)})
				b.StartTimer()
				start := time.Now()
				r.Start(ctx)
				waitFor(ctx, b, "an empty outbox", func() bool { return e.depth(ctx, b) == 0 })
				total += time.Since(start)
				b.StopTimer()
				r.Stop()
				b.StartTimer()
			}
			b.ReportMetric(float64(rows*b.N)/total.Seconds(), "rows/s")
		})
	}
}

// BenchmarkEnqueueToJobLatency measures, with the relay idle (woken by
// NOTIFY), the time from the application's COMMIT returning to the job
// being committed in the coordinator's database (seen by a query polling
// every 200µs), one row at a time with 20ms of quiet between rows.
//
//	go test -run '^$' -bench BenchmarkEnqueueToJobLatency -benchtime 200x ./outbox/relay/
func BenchmarkEnqueueToJobLatency(b *testing.B) {
	e := setup(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r := e.relay(b, relay.Config{Workers: 1, Logger: slog.New(slog.DiscardHandler)})
	r.Start(ctx)
	defer r.Stop()
	waitFor(ctx, b, "the first round", func() bool { return r.Healthy() == nil })
	var lat []time.Duration
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		select {
		case <-ctx.Done():
			b.Fatal(ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		payload := fmt.Appendf(nil, "latency-%d", i)
		b.StartTimer()
		if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.schema+`.outbox (queue, kind, payload) VALUES ('latency', 'k', $1)`, payload); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for {
			var n int
			if err := e.coord.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE queue = 'latency' AND payload = $1`, payload).Scan(&n); err != nil {
				b.Fatal(err)
			}
			if n == 1 {
				break
			}
			time.Sleep(200 * time.Microsecond) //nolint:forbidigo // a poll's resolution, bounded by ctx through the query
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
