//go:build long

package console_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/console"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
)

// TestLongConsolePageTimes measures each console page's time (request in
// to last byte out, timed by the client over loopback, so an upper bound)
// with LEASEHOLD_CONSOLE_BENCH_JOBS live (queued) and as many finished
// (succeeded) jobs in one queue, 200,000 each by default, on PostgreSQL.
// It logs p50 and p95 of 40 requests per page (bench/RESULTS.md).
func TestLongConsolePageTimes(t *testing.T) {
	n := 200_000
	if v := os.Getenv("LEASEHOLD_CONSOLE_BENCH_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	srv := testserver.Start(t, testserver.Options{Postgres: true})
	ctx := t.Context()
	seed(ctx, t, srv.DatabaseURL, n)

	conn, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	jobs := leaseholdv1.NewJobServiceClient(conn)
	made, err := jobs.CreateJob(ctx, &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: "emails", Kind: "send", Payload: []byte(`{"to":"a@example.com"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	h, err := console.Handler(console.Config{Conn: conn, Auth: console.AuthNone, SessionKey: srv.Coordinator.ConsoleSessionKey()})
	if err != nil {
		t.Fatal(err)
	}
	web := httptest.NewServer(h)
	defer web.Close()
	pages := []string{"", "live/overview", "jobs", "jobs?queue=emails&state=queued", "jobs?queue=emails&state=succeeded",
		"jobs/" + made.GetJob().GetId(), "dead", "queues", "breakers", "workers", "schedules", "keys", "audit"}
	t.Logf("%d live + %d finished jobs; 40 requests per page", n, n)
	t.Logf("| page | p50 | p95 | max |")
	for _, p := range pages {
		var took []time.Duration
		for range 40 {
			start := time.Now()
			resp, err := http.Get(web.URL + "/ui/" + p)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/ui/%s: %s", p, resp.Status)
			}
			took = append(took, time.Since(start))
		}
		slices.Sort(took)
		t.Logf("| /ui/%s | %v | %v | %v |", p, ms(took[len(took)/2]), ms(took[len(took)*95/100]), ms(took[len(took)-1]))
	}

	// The overview's polled part every 100 ms for 30 s: long enough for
	// the coordinator to count again in the background (at most every
	// max(1 s, 10x a count's time)) while pages are served. Each distinct
	// "Counts as of" is one count.
	var took []time.Duration
	counts := map[string]bool{}
	asOf := regexp.MustCompile(`Counts as of ([^(]+)`)
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		start := time.Now()
		resp, err := http.Get(web.URL + "/ui/live/overview")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("/ui/live/overview: %s, %v", resp.Status, err)
		}
		took = append(took, time.Since(start))
		if m := asOf.FindSubmatch(body); m != nil {
			counts[string(m[1])] = true
		}
	}
	slices.Sort(took)
	t.Logf("sustained: /ui/live/overview every 100 ms for 30 s: %d requests, %d distinct counts, p50 %v, p95 %v, max %v",
		len(took), len(counts), ms(took[len(took)/2]), ms(took[len(took)*95/100]), ms(took[len(took)-1]))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

// seed inserts n queued and n succeeded jobs into queue emails of the
// default tenant, straight into the coordinator's schema.
func seed(ctx context.Context, t *testing.T, url string, n int) {
	t.Helper()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	start := time.Now()
	now := time.Now().UTC()
	for _, state := range []string{"queued", "succeeded"} {
		if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, priority,
			created_at, available_at, finished_at, attempts)
		SELECT 'default', gen_random_uuid()::text, 'emails', 'send', $1, 5, g % 7,
		       $2::timestamptz - g * interval '1 millisecond', $2::timestamptz - g * interval '1 millisecond',
		       CASE WHEN $1 = 'succeeded' THEN $2::timestamptz - g * interval '1 millisecond' END,
		       CASE WHEN $1 = 'queued' THEN 0 ELSE 1 END
		FROM generate_series(1, $3::int) g`, state, now, n); err != nil {
			t.Fatalf("insert %d %s jobs: %v", n, state, err)
		}
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs`); err != nil {
		t.Fatal(err)
	}
	t.Logf("seeded %d + %d jobs in %v", n, n, time.Since(start).Round(time.Millisecond))
}
