package sqlite

import (
	"context"
	"errors"
	"sync"

	"github.com/leasehold/leasehold/store"
)

// subscriptionBuffer bounds the hints queued for one subscriber. A full
// buffer drops further hints: the subscriber is behind and will look at the
// database anyway (the dispatcher polls as a fallback).
const subscriptionBuffer = 64

// notifier is the in-process store.JobNotifier. SQLite has no LISTEN/NOTIFY,
// and one file has one coordinator, so signalling this Store's subscribers
// after each commit reaches everyone who can act on it.
type notifier struct {
	// mu guards subs and closed, and is held while sending so that a channel
	// is never closed during a send.
	mu     sync.Mutex
	subs   map[*subscription]struct{}
	closed bool
}

type subscription struct {
	ch   chan store.QueueRef
	stop func() bool // unregisters the context.AfterFunc
}

func newNotifier() *notifier {
	return &notifier{subs: make(map[*subscription]struct{})}
}

// SubscribeJobs implements store.JobNotifier. The channel gets the queues of
// jobs this Store created, rescheduled, released or replayed, and of queues
// it resumed. It is closed when ctx is done or the Store is closed.
func (s *Store) SubscribeJobs(ctx context.Context) (<-chan store.QueueRef, error) {
	return s.notifier.subscribe(ctx)
}

func (n *notifier) subscribe(ctx context.Context) (<-chan store.QueueRef, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, errors.New("sqlite: store is closed")
	}
	sub := &subscription{ch: make(chan store.QueueRef, subscriptionBuffer)}
	n.subs[sub] = struct{}{}
	// AfterFunc rather than a goroutine per subscriber: nothing runs until
	// the context ends.
	sub.stop = context.AfterFunc(ctx, func() { n.remove(sub) })
	return sub.ch, nil
}

func (n *notifier) remove(sub *subscription) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.subs[sub]; ok {
		delete(n.subs, sub)
		close(sub.ch)
	}
}

// signal sends each distinct ref of one commit to every subscriber without
// blocking: a commit touching many jobs of one queue sends one hint, and a
// subscriber whose buffer is full misses it.
func (n *notifier) signal(refs []store.QueueRef) {
	if len(refs) == 0 {
		return
	}
	seen := make(map[store.QueueRef]struct{}, len(refs))
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ref := range refs {
		if _, dup := seen[ref]; dup {
			continue
		}
		seen[ref] = struct{}{}
		for sub := range n.subs {
			select {
			case sub.ch <- ref:
			default: // slow subscriber: a hint may be dropped
			}
		}
	}
}

// close ends every subscription; later subscribes fail.
func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for sub := range n.subs {
		sub.stop()
		delete(n.subs, sub)
		close(sub.ch)
	}
}
