package coordinator

import (
	"context"
	"time"

	"github.com/leasehold/leasehold/internal/startstop"
)

// startEvery is the loop of the reporters that log counters each interval
// in which they changed: it starts s's goroutine, which calls runOnce
// every interval until Stop or ctx ends, handing each call the reading the
// previous one returned (the zero T first). A zero or negative interval
// starts nothing.
func startEvery[T any](ctx context.Context, s *startstop.BaseStartStop, interval time.Duration, runOnce func(context.Context, T) T) {
	if interval <= 0 {
		return
	}
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
	if !shouldStart {
		return
	}
	go func() {
		started()
		defer stopped()
		t := time.NewTicker(interval)
		defer t.Stop()
		var last T
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				last = runOnce(ctx, last)
			}
		}
	}()
}
