package groupcommit

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// recorder is a Flush that records its batches and can be held at a gate
// so that tests decide what queues behind a flush in flight.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
	// hold, when not nil, is waited on by the next flush, after it
	// signals held.
	hold chan struct{}
	held chan struct{}
	fail error
}

func (r *recorder) flush(_ context.Context, items []int) ([]int, error) {
	r.mu.Lock()
	r.batches = append(r.batches, slices.Clone(items))
	hold, held := r.hold, r.held
	r.hold, r.held = nil, nil
	r.mu.Unlock()
	if hold != nil {
		close(held)
		<-hold
	}
	r.mu.Lock()
	fail := r.fail
	r.mu.Unlock()
	if fail != nil {
		return nil, fail
	}
	out := make([]int, len(items))
	for i, v := range items {
		out[i] = v * 10
	}
	return out, nil
}

// holdNext makes the next flush wait until the returned release is called;
// started is closed once it waits.
func (r *recorder) holdNext() (started <-chan struct{}, release func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	hold, held := make(chan struct{}), make(chan struct{})
	r.hold, r.held = hold, held
	return held, func() { close(hold) }
}

func (r *recorder) sizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]int, len(r.batches))
	for i, b := range r.batches {
		out[i] = len(b)
	}
	return out
}

// queuedBarrier returns a Queued hook and a channel closed once n items
// wait.
func queuedBarrier(n int) (func(int), <-chan struct{}) {
	ch := make(chan struct{})
	var once sync.Once
	return func(q int) {
		if q >= n {
			once.Do(func() { close(ch) })
		}
	}, ch
}

func TestCallsQueuedBehindAFlushShareTheNextOne(t *testing.T) {
	r := &recorder{}
	hook, queued := queuedBarrier(30)
	c := New(Config[int, int]{Flush: r.flush, Queued: hook})
	defer c.Close()

	started, release := r.holdNext()
	first := make(chan []int, 1)
	go func() {
		res, err := c.Do(t.Context(), 1)
		if err != nil {
			t.Error(err)
		}
		first <- res
	}()
	<-started
	var wg sync.WaitGroup
	results := make([][]int, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := c.Do(t.Context(), 100+3*i, 101+3*i, 102+3*i)
			if err != nil {
				t.Error(err)
			}
			results[i] = res
		}()
	}
	<-queued
	select {
	case <-first:
		t.Fatal("the first call was answered before its flush returned")
	default:
	}
	release()
	if got := <-first; !slices.Equal(got, []int{10}) {
		t.Errorf("first call got %v, want [10]", got)
	}
	wg.Wait()
	for i, res := range results {
		want := []int{(100 + 3*i) * 10, (101 + 3*i) * 10, (102 + 3*i) * 10}
		if !slices.Equal(res, want) {
			t.Errorf("call %d got %v, want its own results %v", i, res, want)
		}
	}
	if got := r.sizes(); !slices.Equal(got, []int{1, 30}) {
		t.Errorf("flush sizes %v, want [1 30]: everything queued behind the first flush goes in the next", got)
	}
}

func TestBatchesAreBoundedAndCallsNeverSplit(t *testing.T) {
	r := &recorder{}
	hook, queued := queuedBarrier(4 * 3)
	c := New(Config[int, int]{Flush: r.flush, MaxBatch: 7, Queued: hook})
	defer c.Close()
	started, release := r.holdNext()
	go func() { _, _ = c.Do(t.Context(), 0) }()
	<-started
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Do(t.Context(), i, i, i); err != nil {
				t.Error(err)
			}
		}()
	}
	<-queued
	release()
	wg.Wait()
	got := r.sizes()
	for _, n := range got[1:] {
		if n > 7 || n%3 != 0 {
			t.Errorf("flush sizes %v: a batch over MaxBatch 7, or a call split", got)
		}
	}
	// A call larger than MaxBatch is flushed alone, whole.
	res, err := c.Do(t.Context(), 1, 2, 3, 4, 5, 6, 7, 8, 9)
	if err != nil || len(res) != 9 {
		t.Fatalf("oversized call: %v, %v", res, err)
	}
}

func TestAFlushErrorFailsEveryCallOfItsBatchOnly(t *testing.T) {
	r := &recorder{}
	hook, queued := queuedBarrier(2)
	c := New(Config[int, int]{Flush: r.flush, Queued: hook})
	defer c.Close()
	boom := errors.New("commit failed")

	started, release := r.holdNext()
	firstErr := make(chan error, 1)
	go func() {
		_, err := c.Do(t.Context(), 1)
		firstErr <- err
	}()
	<-started
	r.mu.Lock()
	r.fail = boom // the held flush and the next one fail
	r.mu.Unlock()
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := c.Do(t.Context(), 2)
			errs <- err
		}()
	}
	<-queued
	release()
	if err := <-firstErr; !errors.Is(err, boom) {
		t.Errorf("first call: %v, want %v", err, boom)
	}
	for range 2 {
		if err := <-errs; !errors.Is(err, boom) {
			t.Errorf("batched call: %v, want %v", err, boom)
		}
	}
	r.mu.Lock()
	r.fail = nil
	r.mu.Unlock()
	if res, err := c.Do(t.Context(), 3); err != nil || res[0] != 30 {
		t.Errorf("after the failure: %v, %v", res, err)
	}
}

func TestACallWithdrawnBeforeItsFlushIsNeverApplied(t *testing.T) {
	r := &recorder{}
	queued := make(chan struct{})
	var calls atomic.Int32
	hook := func(int) {
		if calls.Add(1) == 2 { // the call to withdraw, behind the held flush
			close(queued)
		}
	}
	c := New(Config[int, int]{Flush: r.flush, Queued: hook})
	defer c.Close()
	started, release := r.holdNext()
	go func() { _, _ = c.Do(t.Context(), 1) }()
	<-started
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := c.Do(ctx, 2)
		done <- err
	}()
	<-queued
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("withdrawn call: %v", err)
	}
	release()
	if _, err := c.Do(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range r.batches {
		if slices.Contains(b, 2) {
			t.Errorf("the withdrawn item was flushed: %v", r.batches)
		}
	}
}

func TestFullQueueMakesCallersWait(t *testing.T) {
	r := &recorder{}
	hook, queued := queuedBarrier(4)
	c := New(Config[int, int]{Flush: r.flush, MaxBatch: 4, MaxPending: 4, Queued: hook})
	defer c.Close()
	started, release := r.holdNext()
	go func() { _, _ = c.Do(t.Context(), 0) }()
	<-started
	for i := range 4 {
		go func() { _, _ = c.Do(t.Context(), i) }()
	}
	<-queued
	// The queue is full: a call must wait, and gives up with its context.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := c.Do(ctx, 9); !errors.Is(err, context.Canceled) {
		t.Errorf("call on a full queue with a done context: %v", err)
	}
	release()
	if _, err := c.Do(t.Context(), 5); err != nil {
		t.Errorf("call once room freed: %v", err)
	}
}

func TestCloseFlushesWhatIsQueuedThenRefuses(t *testing.T) {
	r := &recorder{}
	// The second call to join the queue is the one that waits behind the
	// held flush.
	queued := make(chan struct{})
	var calls atomic.Int32
	hook := func(int) {
		if calls.Add(1) == 2 {
			close(queued)
		}
	}
	c := New(Config[int, int]{Flush: r.flush, Queued: hook})
	started, release := r.holdNext()
	go func() { _, _ = c.Do(t.Context(), 1) }()
	<-started
	second := make(chan error, 1)
	go func() {
		_, err := c.Do(t.Context(), 2)
		second <- err
	}()
	<-queued
	closed := make(chan struct{})
	go func() {
		c.Close()
		close(closed)
	}()
	release()
	if err := <-second; err != nil {
		t.Errorf("a call queued before Close: %v, want it flushed", err)
	}
	<-closed
	if _, err := c.Do(t.Context(), 3); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: %v, want ErrClosed", err)
	}
	c.Close() // twice is safe
}

func TestAPanickingFlushFailsItsCallers(t *testing.T) {
	c := New(Config[int, int]{Flush: func(context.Context, []int) ([]int, error) { panic("bug") }})
	defer c.Close()
	if _, err := c.Do(t.Context(), 1); err == nil {
		t.Fatal("a panicking flush answered without error")
	}
}

func TestAFlushReturningTheWrongCountFailsItsCallers(t *testing.T) {
	c := New(Config[int, int]{Flush: func(context.Context, []int) ([]int, error) { return nil, nil }})
	defer c.Close()
	if _, err := c.Do(t.Context(), 1, 2); err == nil {
		t.Fatal("a flush with no results answered without error")
	}
}
