// Package startstop is the lifecycle of Leasehold's background services
// (the dispatcher, the lease reaper, the retention pruner, the activity
// reporter, the PostgreSQL listener):
// Start returns at once and runs the service on its own goroutine; Stop
// cancels it and blocks until it has returned, and is safe twice and
// before Start; Started and Stopped are channels to wait on. It follows
// River's rivershared/startstop.
//
// A service embeds BaseStartStop and writes its Start with StartInit:
//
//	func (s *Service) Start(ctx context.Context) {
//		ctx, shouldStart, started, stopped := s.StartInit(ctx)
//		if !shouldStart {
//			return // already running
//		}
//		go func() {
//			started()
//			defer stopped()
//			s.run(ctx) // returns when ctx is done
//		}()
//	}
//
// Stop cancels the context StartInit returned with the cause ErrStopped
// (read it with context.Cause). A service may also end on its own, when
// its parent context ends or it gives up; stopped() records that, and a
// later Stop returns at once. After it has stopped a service can be
// started again.
package startstop

import (
	"context"
	"errors"
	"sync"
)

// ErrStopped is the cancel cause of a service's context after Stop.
var ErrStopped = errors.New("service stopped")

// BaseStartStop implements the lifecycle; embed it in a service. The zero
// value is ready to use. It must not be copied after first use.
type BaseStartStop struct {
	mu      sync.Mutex // guards every field below
	running bool       // from StartInit until the run's stopped()
	cancel  context.CancelCauseFunc
	// started and stopped belong to the current run, or to the next one
	// when none has begun; a new run after a finished one gets new
	// channels. stopped is closed under mu, so that StartInit never sees
	// a run that has ended but not yet closed its channel.
	started chan struct{}
	stopped chan struct{}
}

// initLocked makes the channels of the next run when there are none yet
// or the last run has finished.
func (s *BaseStartStop) initLocked() {
	if s.stopped == nil || isClosed(s.stopped) {
		s.started = make(chan struct{})
		s.stopped = make(chan struct{})
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// StartInit begins a run unless one is in progress. It returns the
// run's context (ctx, cancelled by Stop with ErrStopped), whether the
// caller should start the service, and the two functions the service's
// goroutine calls: started once it is up (optional; stopped implies it),
// and stopped (deferred) when it returns. When shouldStart is false the
// other results are ctx and no-ops.
func (s *BaseStartStop) StartInit(ctx context.Context) (_ context.Context, shouldStart bool, started, stopped func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return ctx, false, func() {}, func() {}
	}
	s.initLocked()
	s.running = true
	ctx, cancel := context.WithCancelCause(ctx)
	s.cancel = cancel
	startedCh, stoppedCh := s.started, s.stopped
	signalStarted := sync.OnceFunc(func() { close(startedCh) })
	return ctx, true, signalStarted, func() {
		cancel(ErrStopped) // the run is over: release its context
		signalStarted()    // waiters on Started must not wait for ever
		s.mu.Lock()
		defer s.mu.Unlock()
		s.running = false
		s.cancel = nil
		close(stoppedCh)
	}
}

// Stop cancels the running service and waits until its goroutine has
// returned. It is safe to call twice, concurrently, and before Start (then
// it returns at once). It must not be called from the service's own
// goroutine, which it would wait for.
func (s *BaseStartStop) Stop() {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	cancel, stopped := s.cancel, s.stopped
	s.mu.Unlock()
	cancel(ErrStopped)
	<-stopped
}

// Started returns a channel closed once the current (or next) run has
// called started, or has stopped.
func (s *BaseStartStop) Started() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.initLocked()
	}
	return s.started
}

// Stopped returns a channel closed once the current run (or, before any,
// the next one) has stopped. After a run ended it returns that run's
// closed channel until the service is started again.
func (s *BaseStartStop) Stopped() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped == nil {
		s.initLocked()
	}
	return s.stopped
}

// Service is what every background service offers.
type Service interface {
	Start(ctx context.Context)
	Stop()
	Started() <-chan struct{}
	Stopped() <-chan struct{}
}
