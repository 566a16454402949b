// Package groupcommit batches concurrent writes into shared transactions.
//
// A Committer has one flusher goroutine. Callers hand it items (Do); the
// flusher takes everything queued — whole calls, up to MaxBatch items — and
// applies it with one call of the Flush function, which runs one
// transaction and returns one result per item. Each caller gets its own
// results, and only after Flush returned: nothing is acknowledged before
// its commit.
//
// There is no timer. When the flusher is idle a call is flushed at once
// (latency is one transaction when quiet); while a flush is in flight the
// next calls queue up and go together in the next one (throughput batches
// itself under load). The queue is bounded in items (MaxPending): a caller
// that finds it full waits, which pushes back on whoever produces the
// writes.
//
// A Flush error fails every call of that batch with the error: the batch
// was one transaction, and none of it may be acknowledged.
package groupcommit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
)

// ErrClosed is returned by Do once Close has begun.
var ErrClosed = errors.New("groupcommit: committer closed")

// Defaults of Config.
const (
	MaxBatchDefault   = 1000
	MaxPendingDefault = 20_000
	// FlushTimeoutDefault bounds one Flush call. A batch serves many
	// callers, so it runs detached from each caller's context; this keeps
	// a stuck database from holding the flusher forever.
	FlushTimeoutDefault = 30 * time.Second
)

// Config configures a Committer.
type Config[T, R any] struct {
	// Flush applies a batch and returns one result per item, in order.
	// Required.
	Flush func(ctx context.Context, items []T) ([]R, error)
	// MaxBatch bounds the items of one Flush. A single call larger than it
	// is flushed alone, never split. Default MaxBatchDefault.
	MaxBatch int
	// MaxPending bounds the items queued and not yet flushing. Default
	// MaxPendingDefault.
	MaxPending int
	// FlushTimeout bounds one Flush. Default FlushTimeoutDefault.
	FlushTimeout time.Duration
	// Observe, when set, is told the size and duration of every flush
	// (metrics).
	Observe func(items int, d time.Duration, err error)
	// Span, when set, starts the span of one flush, given the span contexts
	// of its calls (to link to: a flush serves many traces); end is called
	// with the flush's error.
	Span func(ctx context.Context, items int, callers []trace.SpanContext) (_ context.Context, end func(error))
	// Queued, when set, is called after a call joined the queue, with the
	// number of items then waiting (tests use it as a barrier).
	Queued func(items int)
}

// call is one caller's items and where its answer goes.
type call[T, R any] struct {
	items []T
	span  trace.SpanContext // the caller's, linked from the flush's span
	done  chan struct{}     // closed when res/err are set
	res   []R
	err   error
}

// Committer batches calls into flushes. Create it with New; it runs until
// Close.
type Committer[T, R any] struct {
	cfg Config[T, R]

	mu      sync.Mutex // guards the fields below
	queue   []*call[T, R]
	queued  int           // items in queue
	room    chan struct{} // closed and replaced when queued items drop
	closed  bool
	wake    chan struct{} // capacity 1: the flusher has work
	stopped chan struct{} // closed when the flusher has returned
	ctx     context.Context
	cancel  context.CancelFunc
}

// New starts a Committer's flusher.
func New[T, R any](cfg Config[T, R]) *Committer[T, R] {
	if cfg.Flush == nil {
		panic("groupcommit: Config.Flush is required")
	}
	cfg.MaxBatch = cmp.Or(cfg.MaxBatch, MaxBatchDefault)
	cfg.MaxPending = max(cmp.Or(cfg.MaxPending, MaxPendingDefault), cfg.MaxBatch)
	cfg.FlushTimeout = cmp.Or(cfg.FlushTimeout, FlushTimeoutDefault)
	ctx, cancel := context.WithCancel(context.Background())
	c := &Committer[T, R]{
		cfg:     cfg,
		room:    make(chan struct{}),
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
		ctx:     ctx,
		cancel:  cancel,
	}
	go c.run()
	return c
}

// Do queues items as one call and waits for their results (one per item,
// in order) or ctx. The items of one call always go in the same flush.
// When ctx ends first, Do returns its error; the items may still be
// applied if their flush had begun, but they are never acknowledged.
func (c *Committer[T, R]) Do(ctx context.Context, items ...T) ([]R, error) {
	if len(items) == 0 {
		return nil, nil
	}
	cl := &call[T, R]{items: items, span: trace.SpanContextFromContext(ctx), done: make(chan struct{})}
	if err := c.enqueue(ctx, cl); err != nil {
		return nil, err
	}
	select {
	case <-cl.done:
		return cl.res, cl.err
	case <-ctx.Done():
		c.withdraw(cl)
		return nil, ctx.Err()
	}
}

// enqueue adds cl, waiting while the queue is full.
func (c *Committer[T, R]) enqueue(ctx context.Context, cl *call[T, R]) error {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return ErrClosed
		}
		// An oversized call waits for an empty queue rather than forever.
		if c.queued == 0 || c.queued+len(cl.items) <= c.cfg.MaxPending {
			c.queue = append(c.queue, cl)
			c.queued += len(cl.items)
			queued := c.queued
			c.mu.Unlock()
			if c.cfg.Queued != nil {
				c.cfg.Queued(queued)
			}
			select {
			case c.wake <- struct{}{}:
			default:
			}
			return nil
		}
		room := c.room
		c.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// withdraw takes cl out of the queue if it has not been flushed yet.
func (c *Committer[T, R]) withdraw(cl *call[T, R]) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, q := range c.queue {
		if q == cl {
			c.queue = append(c.queue[:i], c.queue[i+1:]...)
			c.queued -= len(cl.items)
			c.freeRoomLocked()
			return
		}
	}
}

func (c *Committer[T, R]) freeRoomLocked() {
	close(c.room)
	c.room = make(chan struct{})
}

// take removes the next batch from the queue: whole calls, up to MaxBatch
// items (at least one call).
func (c *Committer[T, R]) take() []*call[T, R] {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, items := 0, 0
	for n < len(c.queue) {
		k := len(c.queue[n].items)
		if n > 0 && items+k > c.cfg.MaxBatch {
			break
		}
		items += k
		n++
	}
	if n == 0 {
		return nil
	}
	batch := make([]*call[T, R], n)
	copy(batch, c.queue)
	c.queue = append(c.queue[:0], c.queue[n:]...)
	c.queued -= items
	c.freeRoomLocked()
	return batch
}

func (c *Committer[T, R]) run() {
	defer close(c.stopped)
	for {
		batch := c.take()
		if batch == nil {
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed {
				return
			}
			<-c.wake
			continue
		}
		c.flush(batch)
	}
}

// flush applies one batch and answers its calls.
func (c *Committer[T, R]) flush(batch []*call[T, R]) {
	var items []T
	for _, cl := range batch {
		items = append(items, cl.items...)
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.cfg.FlushTimeout)
	end := func(error) {}
	if c.cfg.Span != nil {
		callers := make([]trace.SpanContext, len(batch))
		for i, cl := range batch {
			callers[i] = cl.span
		}
		ctx, end = c.cfg.Span(ctx, len(items), callers)
	}
	start := time.Now()
	res, err := c.safeFlush(ctx, items)
	cancel()
	if err == nil && len(res) != len(items) {
		err = fmt.Errorf("groupcommit: flush returned %d results for %d items", len(res), len(items))
	}
	end(err)
	if c.cfg.Observe != nil {
		c.cfg.Observe(len(items), time.Since(start), err)
	}
	off := 0
	for _, cl := range batch {
		if err != nil {
			cl.err = err
		} else {
			cl.res = res[off : off+len(cl.items) : off+len(cl.items)]
		}
		off += len(cl.items)
		close(cl.done)
	}
}

// safeFlush turns a panic in Flush into an error for the batch's callers
// instead of a crash of the process that serves them.
func (c *Committer[T, R]) safeFlush(ctx context.Context, items []T) (res []R, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("groupcommit: flush panicked: %v", r)
		}
	}()
	return c.cfg.Flush(ctx, items)
}

// Close stops taking calls, flushes what is queued, and waits for the
// flusher to end. Calls made after Close begins fail with ErrClosed. It is
// safe to call twice.
func (c *Committer[T, R]) Close() {
	c.mu.Lock()
	already := c.closed
	c.closed = true
	c.mu.Unlock()
	if !already {
		select {
		case c.wake <- struct{}{}:
		default:
		}
	}
	<-c.stopped
	c.cancel()
}
