package main

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/worker"
)

// sqlCount is one reading of the jobs table.
type sqlCount struct {
	at             time.Time
	queued, leased int64
}

// TestServeMetricsEqualTheDatabase runs the real binary on PostgreSQL
// while jobs flow through a queue (a producer creates them, a worker
// leases and completes them), scrapes /metrics over HTTP again and again,
// and reads the same counts with SQL all along: every scraped queue gauge
// lies within the SQL counts of the window from one second (the gauges'
// cache) before the scrape to its end, give or take one dispatch round.
// (The former 5 s cache failed this.) Once the queue has drained, its
// gauges read 0 rather than disappearing.
func TestServeMetricsEqualTheDatabase(t *testing.T) {
	t.Parallel()
	const queue, capacity = "flow", 4
	dbURL := pgtest.MigratedSchema(t)
	p := testserver.StartProcess(t, "--database-url", dbURL, "--no-migrate")
	if p.HTTPAddr == "" {
		t.Fatalf("no HTTP address in the log:\n%s", p.Output())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn := p.Dial(t)

	// The truth, read every 25 ms (by one goroutine: a pgx.Conn is not
	// safe for concurrent use).
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close(context.Background())
	var mu sync.Mutex
	var truth []sqlCount
	read := func() sqlCount {
		c := sqlCount{at: time.Now()}
		err := db.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'queued'), count(*) FILTER (WHERE state = 'leased')
			FROM jobs WHERE queue = $1`, queue).Scan(&c.queued, &c.leased)
		if err != nil && ctx.Err() == nil {
			t.Errorf("SQL count: %v", err)
		}
		return c
	}
	stopSQL := make(chan struct{})
	sqlDone := make(chan struct{})
	go func() {
		defer close(sqlDone)
		for {
			c := read()
			mu.Lock()
			truth = append(truth, c)
			mu.Unlock()
			select {
			case <-stopSQL:
				return
			case <-time.After(25 * time.Millisecond):
			}
		}
	}()

	// The flow: 30 jobs a second for 6 s, a worker that holds each for
	// 150 ms, 4 at a time (it falls behind, so the queue grows, then
	// drains).
	jobs := leaseholdv1.NewJobServiceClient(conn)
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		tick := time.NewTicker(time.Second / 30)
		defer tick.Stop()
		for end := time.Now().Add(6 * time.Second); time.Now().Before(end); <-tick.C {
			if _, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: queue, Kind: "k"}}); err != nil && ctx.Err() == nil {
				t.Errorf("CreateJob: %v", err)
				return
			}
		}
	}()
	w, err := worker.New(conn, worker.Config{Queues: []string{queue}, Capacity: capacity, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	w.Handle("k", func(ctx context.Context, _ *worker.Job) ([]byte, error) {
		select {
		case <-time.After(150 * time.Millisecond):
		case <-ctx.Done():
		}
		return nil, nil
	})
	wctx, stopWorker := context.WithCancel(ctx)
	workerDone := make(chan error, 1)
	go func() { workerDone <- w.Run(wctx) }()

	// Scrape every 200 ms while the jobs flow and until they are done.
	type scraped struct {
		from, to       time.Time
		queued, leased float64
	}
	var scrapes []scraped
	labels := func(state string) map[string]string {
		return map[string]string{"queue": queue, "state": state}
	}
	drained := false
	for !drained {
		s := scraped{from: time.Now()}
		fams := scrape(t, "http://"+p.HTTPAddr+"/metrics")
		s.to = time.Now()
		present := hasSample(fams, "leasehold_queue_jobs", labels("queued"))
		if present {
			s.queued = sample(t, fams, "leasehold_queue_jobs", labels("queued"))
			s.leased = sample(t, fams, "leasehold_queue_jobs", labels("leased"))
			scrapes = append(scrapes, s)
		}
		select {
		case <-produced:
			mu.Lock()
			c := truth[len(truth)-1]
			mu.Unlock()
			if c.queued == 0 && c.leased == 0 && !present {
				t.Fatalf("the drained queue %q is gone from /metrics; its gauges must read 0", queue)
			}
			drained = c.queued == 0 && c.leased == 0 && present && s.queued == 0 && s.leased == 0
		default:
		}
		if ctx.Err() != nil {
			t.Fatalf("the queue did not drain (last scrape: queued %v, leased %v): %v", s.queued, s.leased, ctx.Err())
		}
		time.Sleep(200 * time.Millisecond)
	}
	stopWorker()
	if err := <-workerDone; err != nil {
		t.Errorf("worker Run: %v", err)
	}
	close(stopSQL)
	<-sqlDone

	// Each scrape within [min, max] of the SQL counts of its window: from
	// the oldest reading the gauges' 1 s cache may hold to the scrape's end.
	window := func(from, to time.Time, get func(sqlCount) int64) (lo, hi int64, n int) {
		lo, hi = 1<<62, -1
		for _, c := range truth {
			if c.at.Before(from) || c.at.After(to) {
				continue
			}
			lo, hi, n = min(lo, get(c)), max(hi, get(c)), n+1
		}
		return lo, hi, n
	}
	bad, busiest := 0, int64(0)
	for _, s := range scrapes {
		for _, g := range []struct {
			name string
			v    float64
			get  func(sqlCount) int64
		}{
			{"queued", s.queued, func(c sqlCount) int64 { return c.queued }},
			{"leased", s.leased, func(c sqlCount) int64 { return c.leased }},
		} {
			lo, hi, n := window(s.from.Add(-time.Second-100*time.Millisecond), s.to.Add(250*time.Millisecond), g.get)
			busiest = max(busiest, hi)
			if n == 0 {
				t.Errorf("no SQL reading around the scrape at %s", s.from.Format(time.TimeOnly))
				continue
			}
			// Slack of one dispatch round (the worker's capacity, 4): a
			// value the database held between two readings, which a
			// loaded machine may space out.
			if g.v < float64(lo-capacity) || g.v > float64(hi+capacity) {
				bad++
				t.Errorf("scrape at %s: %s = %v; the database held %d to %d jobs %s in that window",
					s.from.Format("15:04:05.000"), g.name, g.v, lo, hi, g.name)
			}
		}
	}
	t.Logf("%d scrapes, %d SQL readings, %d gauge values outside the database's range; up to %d jobs queued at once",
		len(scrapes), len(truth), bad, busiest)
	if len(scrapes) < 10 || busiest < 5 {
		t.Fatalf("the test saw too little: %d scrapes, up to %d jobs", len(scrapes), busiest)
	}
}

// hasSample reports whether family name has a sample with labels want.
func hasSample(fams map[string]*dto.MetricFamily, name string, want map[string]string) bool {
next:
	for _, m := range fams[name].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		for k, v := range want {
			if labels[k] != v {
				continue next
			}
		}
		return true
	}
	return false
}
