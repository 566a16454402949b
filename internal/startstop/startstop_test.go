package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// waitLimit bounds every wait; reaching it is a failure.
const waitLimit = 30 * time.Second

// service runs until its context ends, recording what it saw.
type service struct {
	BaseStartStop
	runs   atomic.Int32
	ended  atomic.Bool  // set by the goroutine just before it returns
	cause  atomic.Value // context.Cause when it returned
	signal bool         // call started() (false: rely on stopped())
}

var _ Service = (*service)(nil)

func (s *service) Start(ctx context.Context) {
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
	if !shouldStart {
		return
	}
	go func() {
		if s.signal {
			started()
		}
		defer stopped()
		s.runs.Add(1)
		s.ended.Store(false)
		<-ctx.Done()
		s.cause.Store(context.Cause(ctx))
		s.ended.Store(true)
	}()
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitLimit):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestStartReturnsAtOnceAndStopWaitsForTheGoroutine(t *testing.T) {
	t.Parallel()
	s := &service{signal: true}
	s.Start(t.Context())
	wait(t, s.Started(), "Started")
	if closed(s.Stopped()) {
		t.Fatal("Stopped is closed while the service runs")
	}
	s.Stop()
	if !s.ended.Load() {
		t.Fatal("Stop returned before the service's goroutine did")
	}
	if !closed(s.Stopped()) {
		t.Fatal("Stopped is open after Stop")
	}
	if c, _ := s.cause.Load().(error); !errors.Is(c, ErrStopped) {
		t.Fatalf("the service's context ended with cause %v, want ErrStopped", c)
	}
}

func TestStopIsSafeBeforeStartAndTwice(t *testing.T) {
	t.Parallel()
	s := &service{signal: true}
	s.Stop() // before Start: returns at once
	if closed(s.Stopped()) {
		t.Fatal("Stop before Start closed Stopped")
	}
	s.Start(t.Context())
	s.Stop()
	s.Stop()
	if s.runs.Load() != 1 {
		t.Fatalf("%d runs, want 1", s.runs.Load())
	}
}

func TestConcurrentStartsRunOnceAndConcurrentStopsAllWait(t *testing.T) {
	t.Parallel()
	s := &service{signal: true}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() { s.Start(t.Context()) })
	}
	wg.Wait()
	wait(t, s.Started(), "Started")
	for range 8 {
		wg.Go(func() {
			s.Stop()
			if !s.ended.Load() {
				t.Error("a concurrent Stop returned before the service ended")
			}
		})
	}
	wg.Wait()
	if s.runs.Load() != 1 {
		t.Fatalf("%d runs, want 1", s.runs.Load())
	}
}

func TestAServiceThatEndsOnItsOwnIsStopped(t *testing.T) {
	t.Parallel()
	s := &service{} // never calls started()
	ctx, cancel := context.WithCancel(t.Context())
	started := s.Started() // asked for before Start: the first run's channel
	s.Start(ctx)
	cancel()
	wait(t, s.Stopped(), "Stopped after the parent context ended")
	if !closed(started) {
		t.Fatal("Started stayed open although the run is over")
	}
	if c, _ := s.cause.Load().(error); !errors.Is(c, context.Canceled) {
		t.Fatalf("cause %v, want the parent's context.Canceled", c)
	}
	s.Stop() // nothing runs: returns at once
}

func TestAStoppedServiceStartsAgainWithNewChannels(t *testing.T) {
	t.Parallel()
	s := &service{signal: true}
	s.Start(t.Context())
	first := s.Stopped()
	s.Stop()
	s.Start(t.Context())
	wait(t, s.Started(), "the second run's Started")
	second := s.Stopped()
	if second == first || closed(second) {
		t.Fatal("the second run reuses the first run's Stopped channel")
	}
	s.Stop()
	if !closed(second) || s.runs.Load() != 2 {
		t.Fatalf("after the second Stop: stopped=%v runs=%d", closed(second), s.runs.Load())
	}
}

// TestStopRacingStart hammers Start and Stop from many goroutines: under
// -race this checks the locking, and goleak (TestMain) that no run
// outlives the test.
func TestStopRacingStart(t *testing.T) {
	t.Parallel()
	s := &service{signal: true}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for range 50 {
				if i%2 == 0 {
					s.Start(t.Context())
				} else {
					s.Stop()
				}
			}
		})
	}
	wg.Wait()
	s.Stop()
	if !closed(s.Stopped()) && s.runs.Load() > 0 {
		t.Fatal("a run is still going after the final Stop")
	}
}
