package relay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/leasehold/leasehold/coordinator"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/outbox"
	"github.com/leasehold/leasehold/outbox/relay"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// env is a coordinator on PostgreSQL and an outbox in its own schema of
// the same database.
type env struct {
	srv    *testserver.Server
	pool   *pgxpool.Pool // the outbox's database
	coord  *pgxpool.Pool // the coordinator's schema
	client leaseholdv1.JobServiceClient
	schema string
	ob     *outbox.Outbox
}

func setup(t testing.TB, configure func(*coordinator.Config)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := testserver.Start(t, testserver.Options{Postgres: true, Configure: configure})
	pool, err := pgxpool.New(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	coord, err := pgxpool.New(ctx, srv.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coord.Close)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "lh_outbox_" + hex.EncodeToString(b)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := outbox.Install(ctx, conn.Conn(), outbox.Options{Schema: schema}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	})
	cc, err := grpc.NewClient(srv.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}
	return &env{srv: srv, pool: pool, coord: coord, client: leaseholdv1.NewJobServiceClient(cc), schema: schema, ob: ob}
}

func (e *env) relay(t testing.TB, cfg relay.Config) *relay.Relay {
	t.Helper()
	cfg.Source, cfg.Client, cfg.Schema = e.pool, e.client, e.schema
	if cfg.Logger == nil {
		cfg.Logger = testlog.Logger(t)
	}
	r, err := relay.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// enqueue commits n jobs in one transaction, payloads prefix0..prefixN-1.
func (e *env) enqueue(ctx context.Context, t *testing.T, queue, prefix string, n int) {
	t.Helper()
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		for i := range n {
			if _, err := e.ob.Enqueue(ctx, tx, outbox.Job{Queue: queue, Kind: "k", Payload: fmt.Appendf(nil, "%s%d", prefix, i)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (e *env) count(ctx context.Context, t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := e.coord.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func (e *env) depth(ctx context.Context, t testing.TB) int {
	t.Helper()
	var n int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.outbox`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func waitFor(ctx context.Context, t testing.TB, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestSeveralRelaysCreateEachRowOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, 2*time.Minute)
	const n = 3000
	e.enqueue(ctx, t, "side-by-side", "", n)
	for range 3 {
		r := e.relay(t, relay.Config{Workers: 2, BatchSize: 400})
		r.Start(ctx)
		t.Cleanup(r.Stop)
	}
	waitFor(ctx, t, "an empty outbox", func() bool { return e.depth(ctx, t) == 0 })
	if got := e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'side-by-side'`); got != n {
		t.Fatalf("jobs = %d, want %d", got, n)
	}
	if dup := e.count(ctx, t, `SELECT count(*) FROM (SELECT payload FROM jobs GROUP BY payload HAVING count(*) > 1) d`); dup != 0 {
		t.Fatalf("%d payloads have more than one job", dup)
	}
}

// With polling an hour apart, only NOTIFY can wake the relay in time.
func TestNotifyWakesTheRelay(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, time.Minute)
	r := e.relay(t, relay.Config{Workers: 1, PollInterval: time.Hour})
	r.Start(ctx)
	t.Cleanup(r.Stop)
	waitFor(ctx, t, "the first round", func() bool { return r.Healthy() == nil })
	e.enqueue(ctx, t, "notified", "", 1)
	waitFor(ctx, t, "the job", func() bool {
		return e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'notified'`) == 1
	})
}

// A row the coordinator refuses for good goes to outbox_dead with the
// error; the rest of its batch becomes jobs. Two kinds of refusal: one
// that names its request (a payload over the coordinator's configured
// limit) and one that does not (an idempotency conflict), which the
// relay finds by splitting the batch.
func TestRefusedRowsAreIsolatedAndMovedToTheDeadTable(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *coordinator.Config) { c.PayloadMaxBytes = 1000 })
	ctx := ctxT(t, 2*time.Minute)
	if _, err := e.client.CreateJob(ctx, &leaseholdv1.CreateJobRequest{RequestId: "taken",
		Job: &leaseholdv1.JobSpec{Queue: "other", Kind: "k"}}); err != nil {
		t.Fatal(err)
	}
	err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
		for i := range 100 {
			job := outbox.Job{Queue: "refusals", Kind: "k", Payload: fmt.Appendf(nil, "%d", i)}
			switch i {
			case 17, 60:
				job.Payload = make([]byte, 2000) // over the coordinator's limit, within the outbox's
				job.RequestID = fmt.Sprint("big-", i)
			case 33:
				job.RequestID = "taken" // the same key for a different job
			}
			if _, err := e.ob.Enqueue(ctx, tx, job); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r := e.relay(t, relay.Config{Workers: 1})
	res, err := r.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res != (relay.Result{Claimed: 100, Relayed: 97, Dead: 3}) {
		t.Fatalf("result = %+v", res)
	}
	if got := e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'refusals'`); got != 97 {
		t.Fatalf("jobs = %d, want 97", got)
	}
	if d := e.depth(ctx, t); d != 0 {
		t.Fatalf("outbox depth = %d, want 0", d)
	}
	rows, err := e.pool.Query(ctx, `SELECT request_id, error_code FROM `+e.schema+`.outbox_dead ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	type dead struct{ RequestID, Code string }
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[dead])
	if err != nil {
		t.Fatal(err)
	}
	want := []dead{{"big-17", "InvalidArgument"}, {"taken", "AlreadyExists"}, {"big-60", "InvalidArgument"}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dead rows = %v, want %v", got, want)
	}
	s, err := r.Stats(ctx)
	if err != nil || s.Dead != 3 || s.Depth != 0 {
		t.Fatalf("stats = %+v, %v", s, err)
	}
}

// Rows stay while the coordinator is down, and are created once it is
// back: a failed call deletes nothing.
func TestRowsWaitWhileTheCoordinatorIsDown(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, 2*time.Minute)
	e.enqueue(ctx, t, "outage", "", 10)
	e.srv.Stop()
	r := e.relay(t, relay.Config{Workers: 1, CallTimeout: time.Second})
	if _, err := r.RunOnce(ctx); err == nil {
		t.Fatal("a round with the coordinator down succeeded")
	}
	if d := e.depth(ctx, t); d != 10 {
		t.Fatalf("outbox depth = %d after a failed round, want 10", d)
	}
	srv := testserver.Start(t, testserver.Options{DatabaseURL: e.srv.DatabaseURL, Addr: e.srv.Addr})
	_ = srv
	waitFor(ctx, t, "a successful round", func() bool {
		res, err := r.RunOnce(ctx)
		return err == nil && res.Relayed == 10
	})
	if got := e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'outage'`); got != 10 {
		t.Fatalf("jobs = %d, want 10", got)
	}
}

func TestStaleRowsAreCounted(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, time.Minute)
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.schema+`.outbox (queue, kind, created_at) VALUES
		('q', 'k', now() - interval '90 minutes'), ('q', 'k', now() - interval '10 minutes'), ('q', 'k', now())`); err != nil {
		t.Fatal(err)
	}
	r := e.relay(t, relay.Config{IdempotencyWindow: 2 * time.Hour})
	s, err := r.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Depth != 3 || s.Stale != 1 || s.Oldest < 89*time.Minute || s.Oldest > 2*time.Hour {
		t.Fatalf("stats = %+v, want depth 3, 1 stale, oldest about 90m", s)
	}
}

// The coordinator echoes each job, payload included, so the answer to a
// row with a large payload is larger than gRPC's default 4 MiB receive
// limit; the relay must accept it, or the row would be retried for ever.
func TestLargePayloadsAreRelayed(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *coordinator.Config) { c.PayloadMaxBytes = 6 << 20 })
	ctx := ctxT(t, 2*time.Minute)
	if _, err := e.pool.Exec(ctx, `ALTER TABLE `+e.schema+`.outbox DROP CONSTRAINT outbox_payload_check`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.schema+`.outbox (queue, kind, payload) VALUES ('large', 'k', $1)`, make([]byte, 5<<20)); err != nil {
		t.Fatal(err)
	}
	r := e.relay(t, relay.Config{})
	res, err := r.RunOnce(ctx)
	if err != nil || res.Relayed != 1 {
		t.Fatalf("round: %+v, %v", res, err)
	}
}

// countingClient passes calls on to the real coordinator and records the
// size of each BatchCreateJobs request.
type countingClient struct {
	leaseholdv1.JobServiceClient
	mu    sync.Mutex
	sizes []int // guarded by mu
}

func (c *countingClient) BatchCreateJobs(ctx context.Context, req *leaseholdv1.BatchCreateJobsRequest, opts ...grpc.CallOption) (*leaseholdv1.BatchCreateJobsResponse, error) {
	c.mu.Lock()
	c.sizes = append(c.sizes, proto.Size(req))
	c.mu.Unlock()
	return c.JobServiceClient.BatchCreateJobs(ctx, req, opts...)
}

// A claim is sent in calls of at most CallBytesMax encoded bytes.
func TestCallsAreBoundedInBytes(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, time.Minute)
	if _, err := e.pool.Exec(ctx, `INSERT INTO `+e.schema+`.outbox (queue, kind, payload)
		SELECT 'bytes', 'k', convert_to(repeat('x', 500) || g, 'UTF8') FROM generate_series(1, 40) g`); err != nil {
		t.Fatal(err)
	}
	cc := &countingClient{JobServiceClient: e.client}
	r, err := relay.New(relay.Config{Source: e.pool, Client: cc, Schema: e.schema, CallBytesMax: 4096, Logger: testlog.Logger(t)})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.RunOnce(ctx)
	if err != nil || res.Relayed != 40 {
		t.Fatalf("round: %+v, %v", res, err)
	}
	if len(cc.sizes) < 40*500/4096 {
		t.Fatalf("%d calls for 40 rows of 500+ bytes within 4096 bytes each", len(cc.sizes))
	}
	for _, s := range cc.sizes {
		if s > 4096 {
			t.Fatalf("a call of %d bytes; sizes %v", s, cc.sizes)
		}
	}
	if got := e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'bytes'`); got != 40 {
		t.Fatalf("jobs = %d, want 40", got)
	}
}

// Stop lets the round in flight finish: its jobs are created and its rows
// deleted, so the next relay has nothing to replay.
func TestStopFinishesTheRoundInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, time.Minute)
	e.enqueue(ctx, t, "stopping", "", 20)
	lock, err := e.coord.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Released however the test ends, before the coordinator stops.
	t.Cleanup(func() { _ = lock.Rollback(context.WithoutCancel(ctx)) })
	if _, err := lock.Exec(ctx, `LOCK TABLE jobs IN EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	r := e.relay(t, relay.Config{Workers: 1})
	r.Start(ctx)
	waitFor(ctx, t, "the rows claimed", func() bool { // the call waits on the lock
		var free int
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+e.schema+`.outbox FOR UPDATE SKIP LOCKED) f`).Scan(&free)
		})
		if err != nil {
			t.Fatal(err)
		}
		return free == 0
	})
	stopped := make(chan struct{})
	go func() { r.Stop(); close(stopped) }()
	select {
	case <-stopped:
		t.Fatal("Stop returned while a round was in flight")
	case <-time.After(200 * time.Millisecond):
	}
	if err := lock.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	<-stopped
	if d := e.depth(ctx, t); d != 0 {
		t.Fatalf("outbox depth after Stop = %d, want 0", d)
	}
	if got := e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'stopping'`); got != 20 {
		t.Fatalf("jobs = %d, want 20", got)
	}
}

// TestUniqueKeysAreRelayed: rows with a unique key become unique jobs; a
// second row with the key of a live job answers that job (it is delivered,
// not refused): two rows, one job, an empty outbox and no dead rows.
func TestUniqueKeysAreRelayed(t *testing.T) {
	t.Parallel()
	e := setup(t, nil)
	ctx := ctxT(t, time.Minute)
	for i := range 2 {
		err := pgx.BeginFunc(ctx, e.pool, func(tx pgx.Tx) error {
			_, err := e.ob.Enqueue(ctx, tx, outbox.Job{Queue: "uniq", Kind: "k", Payload: fmt.Appendf(nil, "p%d", i), UniqueKey: "order-42"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	r := e.relay(t, relay.Config{})
	r.Start(ctx)
	t.Cleanup(r.Stop)
	waitFor(ctx, t, "an empty outbox", func() bool { return e.depth(ctx, t) == 0 })
	if got := e.count(ctx, t, `SELECT count(*) FROM jobs WHERE queue = 'uniq' AND unique_key = 'order-42'`); got != 1 {
		t.Fatalf("jobs with the key = %d, want 1", got)
	}
	var dead int
	if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM `+e.schema+`.outbox_dead`).Scan(&dead); err != nil || dead != 0 {
		t.Fatalf("dead rows = %d (%v), want 0", dead, err)
	}
}
