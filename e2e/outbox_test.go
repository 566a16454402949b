package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/outbox"
)

// relayProcess is a `leasehold relay` process.
type relayProcess struct {
	cmd    *exec.Cmd
	out    *testlog.Buffer
	exited chan struct{}
}

// startRelay runs `leasehold relay` against the coordinator at addr and
// the outbox in schema of the test database. It is stopped (SIGTERM, then
// SIGKILL) when the test ends, if still running.
func startRelay(t *testing.T, addr, schema string, args ...string) *relayProcess {
	t.Helper()
	p := &relayProcess{out: &testlog.Buffer{}, exited: make(chan struct{})}
	p.cmd = exec.Command(testserver.Binary(t), append([]string{"relay", "--addr", addr,
		"--source-database-url", pgtest.BaseURL(), "--schema", schema, "--http-listen", "127.0.0.1:0",
		"--poll-interval", "200ms"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "OTEL_") {
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				t.Errorf("relay did not exit 30s after SIGTERM")
				p.kill()
			}
		}
		if t.Failed() {
			t.Logf("relay output:\n%s", p.out.String())
		}
	})
	return p
}

func (p *relayProcess) kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// outboxSchema installs an outbox in a fresh schema of the test database.
func outboxSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
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
	return schema
}

// outboxChaos is one run of the outbox failure test.
type outboxChaos struct {
	// enqueues is how many rows commit (rolled-back ones come on top).
	enqueues int
	// txRows is the rows per transaction; every rollbackEvery-th
	// transaction rolls back.
	txRows, rollbackEvery int
	// kills is how many rounds of kills run while rows flow; each round
	// SIGKILLs one relay and, every other round, the coordinator.
	kills int
	// killEvery is the time between kill rounds.
	killEvery time.Duration
	// relays is how many relay processes run side by side.
	relays int
}

// run enqueues from the application's side (half through outbox.Enqueue,
// half with plain SQL), some transactions rolled back, while relays and
// the coordinator are SIGKILLed and restarted; then it waits for the
// outbox to drain and checks the jobs: every committed row is exactly one
// job, no rolled-back row is a job.
func (c outboxChaos) run(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	t.Cleanup(cancel)
	coordURL := pgtest.Schema(t)
	coord := testserver.StartProcess(t, "--database-url", coordURL)
	addr := coord.Addr
	pool, err := pgxpool.New(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	coordPool, err := pgxpool.New(ctx, coordURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coordPool.Close)
	schema := outboxSchema(t, pool)
	ob, err := outbox.New(schema)
	if err != nil {
		t.Fatal(err)
	}

	relays := make([]*relayProcess, c.relays)
	for i := range relays {
		relays[i] = startRelay(t, addr, schema, "--batch-size", "500")
	}

	// The producer: transactions of txRows rows, paced so that rows flow
	// for the whole kill schedule.
	var (
		committed  atomic.Int64
		rolledBack atomic.Int64
		produced   = make(chan error, 1)
		producing  atomic.Bool
	)
	producing.Store(true)
	go func() {
		defer producing.Store(false)
		produced <- func() error {
			for txn := 0; committed.Load() < int64(c.enqueues); txn++ {
				rollback := txn%c.rollbackEvery == c.rollbackEvery-1
				prefix := "ok"
				if rollback {
					prefix = "rb"
				}
				tx, err := pool.Begin(ctx)
				if err != nil {
					return err
				}
				n := min(c.txRows, c.enqueues-int(committed.Load()))
				if txn%2 == 0 {
					for i := range n {
						if _, err := ob.Enqueue(ctx, tx, outbox.Job{Queue: "outbox-chaos", Kind: "k",
							Payload: fmt.Appendf(nil, "%s-%d-%d", prefix, txn, i)}); err != nil {
							_ = tx.Rollback(ctx)
							return err
						}
					}
				} else {
					// Plain SQL, as any language would enqueue.
					if _, err := tx.Exec(ctx, `INSERT INTO `+schema+`.outbox (queue, kind, payload)
						SELECT 'outbox-chaos', 'k', convert_to($1 || '-' || g, 'UTF8') FROM generate_series(0, $2 - 1) g`,
						fmt.Sprintf("%s-%d", prefix, txn), n); err != nil {
						_ = tx.Rollback(ctx)
						return err
					}
				}
				if rollback {
					if err := tx.Rollback(ctx); err != nil {
						return err
					}
					rolledBack.Add(int64(n))
				} else {
					if err := tx.Commit(ctx); err != nil {
						return err
					}
					committed.Add(int64(n))
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(5 * time.Millisecond):
				}
			}
			return nil
		}()
	}()

	jobs := func(pattern string) int {
		var n int
		if err := coordPool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE convert_from(payload, 'UTF8') LIKE $1`, pattern).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	depth := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.outbox`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// The kills: each round waits until jobs are being created (so the
	// relays are mid-batch), then SIGKILLs a relay and, every other
	// round, the coordinator, and starts them again.
	killedMidFlow, rounds := 0, 0
	for round := range c.kills {
		if !producing.Load() {
			break // rows no longer flow: a kill now would test nothing new
		}
		before := jobs("ok-%")
		waitUntil(t, func() bool { return jobs("ok-%") > before || !producing.Load() })
		if depth() > 0 {
			killedMidFlow++
		}
		i := round % len(relays)
		relays[i].kill()
		if round%2 == 1 {
			coord.Kill()
			_, _ = coord.Wait()
			coord = testserver.StartProcess(t, "--listen", addr, "--database-url", coordURL)
		}
		relays[i] = startRelay(t, addr, schema, "--batch-size", "500")
		rounds++
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(c.killEvery):
		}
	}
	if err := <-produced; err != nil {
		t.Fatalf("producer: %v", err)
	}
	waitUntil(t, func() bool { return depth() == 0 })

	var dead int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.outbox_dead`).Scan(&dead); err != nil {
		t.Fatal(err)
	}
	var dups int
	if err := coordPool.QueryRow(ctx, `SELECT count(*) FROM (SELECT payload FROM jobs GROUP BY payload HAVING count(*) > 1) d`).Scan(&dups); err != nil {
		t.Fatal(err)
	}
	ok, rb := jobs("ok-%"), jobs("rb-%")
	t.Logf("committed %d rows, rolled back %d; %d kill rounds (%d while rows waited); jobs %d, duplicates %d, rolled-back jobs %d, dead rows %d",
		committed.Load(), rolledBack.Load(), rounds, killedMidFlow, ok, dups, rb, dead)
	if int64(ok) != committed.Load() || dups != 0 || rb != 0 || dead != 0 {
		t.Fatalf("want %d jobs, 0 duplicates, 0 jobs of rolled-back rows, 0 dead rows", committed.Load())
	}
	if killedMidFlow == 0 {
		t.Fatal("no kill happened while rows were waiting: the test did not test anything")
	}
}

// Over 10,000 enqueues with relays and the coordinator SIGKILLed and
// restarted while rows flow: every committed row is exactly one job, and
// no rolled-back transaction's row is a job.
func TestOutboxSurvivesKilledRelaysAndCoordinator(t *testing.T) {
	t.Parallel()
	outboxChaos{enqueues: 10_500, txRows: 25, rollbackEvery: 7, kills: 4, killEvery: 500 * time.Millisecond, relays: 2}.run(t)
}

// The two kills at the worst moments, made certain rather than likely.
// (1) The relay dies after the coordinator committed its jobs and before
// its own DELETE commits: a test trigger makes the DELETE wait on an
// advisory lock the test holds until the relay is killed. The next relay
// sends the same rows again and gets the same jobs back. (2) The
// coordinator dies inside the call: its jobs table is locked, so the
// create waits there while the relay holds its claimed rows. Either way
// each row becomes exactly one job.
func TestOutboxKillsInTheMiddleOfABatch(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	coordURL := pgtest.Schema(t)
	coord := testserver.StartProcess(t, "--database-url", coordURL)
	pool, err := pgxpool.New(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	coordPool, err := pgxpool.New(ctx, coordURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(coordPool.Close)
	schema := outboxSchema(t, pool)
	enqueue := func(prefix string, n int) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO `+schema+`.outbox (queue, kind, payload)
			SELECT 'mid-batch', 'k', convert_to($1 || '-' || g, 'UTF8') FROM generate_series(1, $2) g`, prefix, n); err != nil {
			t.Fatal(err)
		}
	}
	// lockJobs blocks every insert into the coordinator's jobs table until
	// the returned function is called.
	lockJobs := func() func() {
		t.Helper()
		tx, err := coordPool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE jobs IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		return func() { _ = tx.Rollback(ctx) }
	}
	// claimedByARelay is true once every waiting row is locked by a relay.
	claimedByARelay := func() bool {
		var waiting, free int
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT (SELECT count(*) FROM `+schema+`.outbox),
				(SELECT count(*) FROM (SELECT 1 FROM `+schema+`.outbox FOR UPDATE SKIP LOCKED) f)`).Scan(&waiting, &free)
		})
		if err != nil {
			t.Fatal(err)
		}
		return waiting > 0 && free == 0
	}
	check := func(want int) {
		t.Helper()
		waitUntil(t, func() bool {
			var n int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.outbox`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n == 0
		})
		var jobs, distinct int
		if err := coordPool.QueryRow(ctx, `SELECT count(*), count(DISTINCT payload) FROM jobs WHERE queue = 'mid-batch'`).Scan(&jobs, &distinct); err != nil {
			t.Fatal(err)
		}
		if jobs != want || distinct != want {
			t.Fatalf("jobs = %d (%d distinct payloads), want %d", jobs, distinct, want)
		}
	}

	// (1) The relay dies between the coordinator's commit and its own.
	if _, err := pool.Exec(ctx, `CREATE FUNCTION `+schema+`.hold_delete() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN PERFORM pg_advisory_xact_lock(hashtext('`+schema+`')); RETURN NULL; END $$;
		CREATE TRIGGER hold_delete BEFORE DELETE ON `+schema+`.outbox FOR EACH STATEMENT EXECUTE FUNCTION `+schema+`.hold_delete()`); err != nil {
		t.Fatal(err)
	}
	held, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext($1))`, schema); err != nil {
		t.Fatal(err)
	}
	enqueue("a", 300)
	relay := startRelay(t, coord.Addr, schema, "--workers", "1")
	waitUntil(t, func() bool { // the jobs exist, and the relay's DELETE waits
		var jobs, waiting int
		if err := coordPool.QueryRow(ctx, `SELECT count(*) FROM jobs WHERE queue = 'mid-batch'`).Scan(&jobs); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' AND query LIKE 'DELETE FROM `+schema+`.outbox%'`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		return jobs == 300 && waiting == 1
	})
	relay.kill()
	_ = held.Rollback(ctx) // the dead relay's DELETE goes on, then its transaction aborts
	if _, err := pool.Exec(ctx, `DROP TRIGGER hold_delete ON `+schema+`.outbox`); err != nil {
		t.Fatal(err)
	}
	relay = startRelay(t, coord.Addr, schema, "--workers", "1")
	check(300)

	// (2) The coordinator dies inside the call.
	unlock := lockJobs()
	enqueue("b", 300)
	waitUntil(t, claimedByARelay)
	coord.Kill()
	_, _ = coord.Wait()
	unlock()
	testserver.StartProcess(t, "--listen", coord.Addr, "--database-url", coordURL)
	check(600)
	_ = relay
}

// waitUntil waits until cond holds, checking every 100ms, and fails after
// two minutes: generous, since restarted relays back off for up to 5s and
// the machine may be loaded.
func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not reached within 2m")
		}
		<-tick.C
	}
}
