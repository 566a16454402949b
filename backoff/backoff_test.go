package backoff_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/backoff"
)

func TestExponentialDoublesUpToMaxWithJitter(t *testing.T) {
	t.Parallel()
	b := backoff.Exponential{Min: 100 * time.Millisecond, Max: time.Second}
	wantCeil := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, ceil := range wantCeil {
		ceil *= time.Millisecond
		d := b.Next()
		if d < ceil/2 || d > ceil {
			t.Fatalf("attempt %d: delay %s outside [%s, %s]", i, d, ceil/2, ceil)
		}
	}
	if got := b.Attempts(); got != len(wantCeil) {
		t.Fatalf("Attempts() = %d, want %d", got, len(wantCeil))
	}
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Fatalf("after reset: delay %s, want at most 100ms", d)
	}
}

func TestJitterStaysWithinHalfToWhole(t *testing.T) {
	t.Parallel()
	for _, d := range []time.Duration{0, 1, 2, 3, time.Millisecond, time.Hour} {
		for range 100 {
			if j := backoff.Jitter(d); j < d/2 || j > d {
				t.Fatalf("Jitter(%s) = %s, outside [%s, %s]", d, j, d/2, d)
			}
		}
	}
}

func TestSleepReturnsTheCauseWhenCancelled(t *testing.T) {
	t.Parallel()
	cause := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, cause) {
		t.Fatalf("Sleep on a cancelled context = %v, want %v", err, cause)
	}
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}
}
