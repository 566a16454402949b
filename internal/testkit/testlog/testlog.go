// Package testlog is the one test logger of the repository: a log/slog
// handler that writes to the test's own output (testing.TB.Output), and a
// locked buffer for tests that assert on what was logged or written.
//
// Services under test log from their own goroutines, and some of those
// goroutines outlive the test by a moment (a stream's last line, a store
// closing in a cleanup). Writing to a finished test panics, so the handler
// stops writing when the test's cleanups run and drops what comes later.
// (River: rivershared/slogtest.)
package testlog

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// Logger returns a text logger at Debug level that writes to tb.Output()
// until tb's cleanups run, and drops records after that.
func Logger(tb testing.TB) *slog.Logger {
	tb.Helper()
	return slog.New(NewHandler(tb, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// NewHandler returns a text handler with opts (nil: Info level) writing
// to tb.Output() until tb's cleanups run; later records are dropped.
//
// It registers a cleanup, so the handler stays open through the cleanups
// registered after it (a server stopped in t.Cleanup still logs its
// shutdown) and closes before those registered earlier.
func NewHandler(tb testing.TB, opts *slog.HandlerOptions) slog.Handler {
	tb.Helper()
	return slog.NewTextHandler(newTestWriter(tb), opts)
}

// newTestWriter returns a writer to tb.Output() that drops what is
// written once tb's cleanups run (see NewHandler).
func newTestWriter(tb testing.TB) *testWriter {
	tb.Helper()
	w := &testWriter{out: tb.Output()}
	tb.Cleanup(w.close)
	return w
}

// testWriter forwards to a test's output until closed. Holding mu while
// writing orders every write before close: none can reach the test after
// its cleanups ran.
type testWriter struct {
	mu     sync.Mutex // guards out and closed
	out    io.Writer
	closed bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		_, _ = w.out.Write(p)
	}
	return len(p), nil
}

func (w *testWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
}

// Buffer is a bytes.Buffer that is safe for concurrent writers (handler
// goroutines, os/exec's copiers) and readers (the test), and lets a reader
// wait for the next write. The zero value is ready to use.
type Buffer struct {
	mu      sync.Mutex // guards b and changed
	b       bytes.Buffer
	changed chan struct{} // closed by the next Write; nil until asked for
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Snapshot returns everything written so far and a channel closed by the
// next Write: the barrier for a test that waits for some output.
func (b *Buffer) Snapshot() (string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.b.String(), b.changed
}

// WaitFor blocks until the contents contain s or ctx is done; then the
// error carries ctx's error and what was written.
func (b *Buffer) WaitFor(ctx context.Context, s string) error {
	for {
		out, changed := b.Snapshot()
		if strings.Contains(out, s) {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q: %w; have:\n%s", s, context.Cause(ctx), b.String())
		}
	}
}

// Logger returns a text logger at level writing into b.
func (b *Buffer) Logger(level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: level}))
}
