package testlog

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recordingTB is a testing.TB whose output and cleanups the test can see.
type recordingTB struct {
	testing.TB
	out      Buffer
	cleanups []func()
}

func (r *recordingTB) Output() io.Writer { return &r.out }
func (r *recordingTB) Cleanup(f func())  { r.cleanups = append(r.cleanups, f) }
func (r *recordingTB) Helper()           {}

func (r *recordingTB) runCleanups() {
	for i := len(r.cleanups) - 1; i >= 0; i-- {
		r.cleanups[i]()
	}
}

func TestLoggerWritesUntilTheCleanupsRunThenDrops(t *testing.T) {
	t.Parallel()
	tb := &recordingTB{TB: t}
	log := Logger(tb)
	log.Debug("while the test runs", slog.Int("n", 1))
	if out := tb.out.String(); !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, `msg="while the test runs" n=1`) {
		t.Fatalf("output = %q", out)
	}
	tb.runCleanups()
	log.Info("after the test")
	if out := tb.out.String(); strings.Contains(out, "after the test") {
		t.Fatalf("a record written after the cleanups reached the test: %q", out)
	}
}

// TestLoggerNeverPanicsAfterTheTestEnded logs from a goroutine that
// outlives its subtest, as a service stopping late does; with t.Log or a
// bare t.Output() that panics once the whole test has ended.
func TestLoggerNeverPanicsAfterTheTestEnded(t *testing.T) {
	t.Parallel()
	var log *slog.Logger
	t.Run("the logger's test", func(t *testing.T) {
		log = Logger(t)
		log.Info("inside")
	})
	log.Info("after the subtest ended") // dropped, not a panic
}

func TestBufferWaitsForConcurrentWrites(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 50 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
			}
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := b.WaitFor(ctx, "w7-49\n"); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if n := strings.Count(b.String(), "\n"); n != 400 {
		t.Fatalf("%d lines, want 400", n)
	}

	out, changed := b.Snapshot()
	select {
	case <-changed:
		t.Fatal("changed is closed before a write")
	default:
	}
	if _, err := b.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	<-changed
	if b.String() != out+"more" {
		t.Fatal("the write after the snapshot is not appended")
	}
}

func TestBufferWaitForTellsWhatItHad(t *testing.T) {
	t.Parallel()
	var b Buffer
	b.Logger(slog.LevelInfo).Info("hello")
	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errors.New("gave up"))
	err := b.WaitFor(ctx, "never written")
	if err == nil || !strings.Contains(err.Error(), `"never written"`) || !strings.Contains(err.Error(), "msg=hello") {
		t.Fatalf("WaitFor = %v", err)
	}
	if !strings.Contains(err.Error(), "gave up") {
		t.Fatalf("WaitFor does not carry the context's cause: %v", err)
	}
	if !strings.HasPrefix(b.String(), "time=") {
		t.Fatalf("Buffer.Logger does not write text records: %q", b.String())
	}
}
