package main

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
)

func TestOutboxInstallAndUninstall(t *testing.T) {
	t.Parallel()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "lh_outbox_" + hex.EncodeToString(b)
	url := pgtest.BaseURL()
	t.Cleanup(func() {
		if conn, err := pgx.Connect(t.Context(), url); err == nil {
			_, _ = conn.Exec(t.Context(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`)
			_ = conn.Close(t.Context())
		}
	})
	for range 2 {
		r := runCLI(t, "outbox", "install", "--database-url", url, "--schema", schema)
		if r.code != 0 || !strings.Contains(r.stdout, "outbox installed in schema "+schema) {
			t.Fatalf("install: %+v", r)
		}
	}
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(t.Context())
	if _, err := conn.Exec(t.Context(), `INSERT INTO `+schema+`.outbox (queue, kind) VALUES ('q', 'k')`); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "outbox", "uninstall", "--database-url", url, "--schema", schema); r.code != 1 || !strings.Contains(r.stderr, "rows are waiting") {
		t.Fatalf("uninstall with a waiting row: %+v", r)
	}
	if r := runCLI(t, "outbox", "uninstall", "--database-url", url, "--schema", schema, "--force"); r.code != 0 {
		t.Fatalf("uninstall --force: %+v", r)
	}
	// A relay refuses an outbox older than its own (here: none at all).
	if r := runCLI(t, "relay", "--source-database-url", url, "--schema", schema); r.code != 1 || !strings.Contains(r.stderr, "run leasehold outbox install") {
		t.Fatalf("relay from a missing outbox: %+v", r)
	}
	if r := runCLI(t, "outbox", "install", "--schema", schema); r.code != 2 || !strings.Contains(r.stderr, "--database-url is required") {
		t.Fatalf("install without a URL: %+v", r)
	}
	if r := runCLI(t, "outbox", "sql", "--schema", "public"); r.code != 2 {
		t.Fatalf("sql into public: %+v", r)
	}
	if r := runCLI(t, "relay"); r.code != 2 || !strings.Contains(r.stderr, "--source-database-url is required") {
		t.Fatalf("relay without a URL: %+v", r)
	}
}

func TestRelayRefusesBadSettingsBeforeConnecting(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--workers", "65"}, {"--batch-size", "1001"}, {"--poll-interval", "1ms"}, {"--schema", "public"},
	} {
		r := runCLI(t, append([]string{"relay", "--source-database-url", "postgres://nowhere.invalid/x"}, args...)...)
		if r.code != 2 {
			t.Errorf("relay %v: exit %d, want 2 (usage):\n%s", args, r.code, r.stderr)
		}
	}
}
