// Package nodeoutbox_test runs the Node.js outbox example (enqueue.js) as
// a real process against a real coordinator and relay, and checks the jobs
// from the coordinator's side. Without Node.js it fails when CI=true and is
// skipped otherwise, like the Node worker example.
package nodeoutbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/internal/testkit/testlog"
	"github.com/leasehold/leasehold/internal/testkit/testserver"
	"github.com/leasehold/leasehold/outbox"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestNodeEnqueuesWithTheApplicationsTransaction(t *testing.T) {
	t.Parallel()
	node := requireNode(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ensureDeps(ctx, t)

	coordURL := pgtest.Schema(t)
	coord := testserver.StartProcess(t, "--database-url", coordURL)
	appURL := pgtest.Schema(t) // the application's own tables live here
	nodeURL := nodeSearchPath(t, appURL)
	pool, err := pgxpool.New(ctx, pgtest.BaseURL())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	schema := installOutbox(ctx, t, pool)
	startRelay(t, coord.Addr, schema)

	run := func(env ...string) map[string]any {
		t.Helper()
		cmd := exec.CommandContext(ctx, node, "enqueue.js", "alice@example.com")
		cmd.Env = append(os.Environ(), append([]string{"DATABASE_URL=" + nodeURL, "LEASEHOLD_OUTBOX_SCHEMA=" + schema}, env...)...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node enqueue.js: %v\n%s", err, out)
		}
		var res map[string]any
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("node enqueue.js printed %q: %v", out, err)
		}
		return res
	}
	committed := run()
	rolledBack := run("ROLLBACK=1")
	if committed["request_id"] == rolledBack["request_id"] {
		t.Fatalf("both runs used %v", committed["request_id"])
	}

	coordPool, err := pgxpool.New(ctx, coordURL)
	if err != nil {
		t.Fatal(err)
	}
	defer coordPool.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+schema+`.outbox`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d outbox rows still waiting after 2m", waiting)
		}
		time.Sleep(50 * time.Millisecond) //nolint:forbidigo // polling another process's progress
	}
	var payloads []string
	rows, err := coordPool.Query(ctx, `SELECT convert_from(payload, 'UTF8') FROM jobs WHERE queue = 'emails' AND kind = 'order-confirmation'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		payloads = append(payloads, p)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var orders int
	appPool, err := pgxpool.New(ctx, appURL)
	if err != nil {
		t.Fatal(err)
	}
	defer appPool.Close()
	if err := appPool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil {
		t.Fatal(err)
	}
	want := `{"order_id":"` + committed["order_id"].(string) + `","to":"alice@example.com"}`
	if len(payloads) != 1 || payloads[0] != want || orders != 1 {
		t.Fatalf("jobs %q, orders %d; want one job %s and one order", payloads, orders, want)
	}
}

// nodeSearchPath moves pgtest's search_path parameter, which node-postgres
// does not know, into the startup options it does send.
func nodeSearchPath(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("options", "-c search_path="+q.Get("search_path"))
	q.Del("search_path")
	u.RawQuery = q.Encode()
	return u.String()
}

func installOutbox(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
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
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = pool.Exec(ctx, `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
	})
	return schema
}

// startRelay runs `leasehold relay` until the test ends.
func startRelay(t *testing.T, addr, schema string) {
	t.Helper()
	out := &testlog.Buffer{}
	cmd := exec.Command(testserver.Binary(t), "relay", "--addr", addr, "--source-database-url", pgtest.BaseURL(),
		"--schema", schema, "--http-listen", "")
	cmd.Stdout, cmd.Stderr = out, out
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASEHOLD_") && !strings.HasPrefix(kv, "OTEL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("relay output:\n%s", out.String())
		}
	})
}

func requireNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err == nil {
		return node
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("node is not on PATH, and CI=true: CI must run the Node.js examples: %v", err)
	}
	t.Skip("node is not on PATH: the Node.js example test runs wherever Node is present (and always in CI)")
	return ""
}

// ensureDeps runs npm ci when node_modules lacks pg.
func ensureDeps(ctx context.Context, t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join("node_modules", "pg", "package.json")); err == nil {
		return
	}
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci: %v\n%s", err, out)
	}
}
