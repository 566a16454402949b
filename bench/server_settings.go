package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// serverSettings describes the PostgreSQL server a comparison ran on — the
// settings that move its figures most (autovacuum, durability, memory,
// JIT) — so that a table in bench/RESULTS.md says what it was measured on.
func serverSettings(ctx context.Context, databaseURL string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return "", fmt.Errorf("read the server's settings: %w", err)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	var version, autovacuum, fsync, syncCommit, sharedBuffers, jit string
	err = conn.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('autovacuum'),
		current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('shared_buffers'), current_setting('jit')`).
		Scan(&version, &autovacuum, &fsync, &syncCommit, &sharedBuffers, &jit)
	if err != nil {
		return "", fmt.Errorf("read the server's settings: %w", err)
	}
	return fmt.Sprintf("PostgreSQL %s: autovacuum %s, fsync %s, synchronous_commit %s, shared_buffers %s, jit %s (Leasehold's sessions run with jit off)",
		version, autovacuum, fsync, syncCommit, sharedBuffers, jit), nil
}

// loadAverage is the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
