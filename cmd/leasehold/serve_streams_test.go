package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/leasehold/leasehold/coordinator"
)

// The stream bounds come from flags, or from their environment variables
// (the flag wins), and reach the coordinator's Config.
func TestServeStreamBoundFlags(t *testing.T) {
	t.Parallel()
	env := map[string]string{"LEASEHOLD_STREAM_UNACKED_BYTES": "1048576", "LEASEHOLD_STREAM_ACK_TIMEOUT": "1m"}
	c := &cli{getenv: func(k string) string { return env[k] }}
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	var f limitFlags
	c.addLimitFlags(fs, &f)
	if err := fs.Parse([]string{"--stream-unacked-leases", "8", "--stream-ack-timeout", "3s", "--stream-batches=false"}); err != nil {
		t.Fatal(err)
	}
	if err := bindFlagEnv(c.getenv, fs); err != nil {
		t.Fatal(err)
	}
	var cfg coordinator.Config
	f.apply(&cfg)
	if cfg.StreamUnackedLeases != 8 || cfg.StreamUnackedBytes != 1<<20 || cfg.StreamAckTimeout != 3*time.Second || !cfg.StreamBatchesOff {
		t.Fatalf("config: %d leases, %d bytes, ack timeout %v, batches off %v; want 8, 1 MiB, 3s, true",
			cfg.StreamUnackedLeases, cfg.StreamUnackedBytes, cfg.StreamAckTimeout, cfg.StreamBatchesOff)
	}
}

func TestServeRejectsABadStreamBoundInTheEnvironment(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"stream-unacked-leases", "stream-unacked-bytes", "stream-ack-timeout"} {
		var stderr bytes.Buffer
		env := map[string]string{limitEnv(name): "not-a-number"}
		c := &cli{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: &stderr, getenv: func(k string) string { return env[k] }}
		if code := c.run(context.Background(), []string{"serve", "--sqlite-path", filepath.Join(t.TempDir(), "x.db")}); code != exitUsage ||
			!strings.Contains(stderr.String(), limitEnv(name)) {
			t.Errorf("%s=not-a-number: exit %d, stderr %q; want a usage error naming it", limitEnv(name), code, stderr.String())
		}
	}
}
