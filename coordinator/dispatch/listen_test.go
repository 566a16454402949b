package dispatch

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// gatedNotifier is a real store whose job subscriptions come late, as a
// LISTEN connection that is slow to connect does: call i of SubscribeJobs
// reports itself on calls and then waits for gates[i] (when there is one)
// before it subscribes. With dropFirst, the first subscription ends at
// once, as a dropped LISTEN connection does.
type gatedNotifier struct {
	store.Store
	calls     chan int
	gates     []chan struct{}
	dropFirst bool
	n         atomic.Int32
}

func (g *gatedNotifier) SubscribeJobs(ctx context.Context) (<-chan store.QueueRef, error) {
	i := int(g.n.Add(1) - 1)
	select {
	case g.calls <- i:
	default:
	}
	if i < len(g.gates) && g.gates[i] != nil {
		select {
		case <-g.gates[i]:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if g.dropFirst && i == 0 {
		ch := make(chan store.QueueRef)
		close(ch)
		return ch, nil
	}
	return g.Store.(store.JobNotifier).SubscribeJobs(ctx)
}

// notifyScenario starts a dispatcher over g that never polls (an hour),
// with one waiter of one credit on queue "q", and returns the waiter's
// collector.
func notifyScenario(t *testing.T, g *gatedNotifier, subscribeWait time.Duration) *collector {
	t.Helper()
	d := New(Config{Store: g, PollInterval: time.Hour, PollMaxInterval: time.Hour})
	if subscribeWait > 0 {
		d.subscribeWait = subscribeWait
	}
	col := newCollector()
	d.Start(t.Context())
	t.Cleanup(d.Stop)
	d.Add(&Waiter{Tenant: tenant, Worker: "w", Queues: []string{"q"}, Deliver: col.deliver}, 1)
	return col
}

func wantDelivered(t *testing.T, col *collector, why string) {
	t.Helper()
	select {
	case <-col.got:
	case <-time.After(5 * time.Second):
		t.Fatalf("the waiter got nothing in 5s (polling every hour): %s", why)
	}
}

// A job created before the dispatcher's first subscription is active
// notifies nobody; a waiter added before then must still get it, without
// a poll: the first round waits for the subscription (issue: an idle
// stream on a freshly started coordinator missed the first job created on
// another coordinator, TestJobCreatedOnOneCoordinatorReachesAnIdleStreamOnAnotherThroughNotify).
func TestAJobCreatedBeforeListenIsActiveReachesAnEarlyWaiter(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	gate := make(chan struct{})
	g := &gatedNotifier{Store: st, calls: make(chan int, 10), gates: []chan struct{}{gate}}
	col := notifyScenario(t, g, 0)
	<-g.calls
	time.Sleep(200 * time.Millisecond) // a round for the new waiter could run now, on an empty queue
	create(t, st, 1)                   // notifies nobody yet
	close(gate)
	wantDelivered(t, col, "the job created before LISTEN was active was missed")
}

// The same when the subscription is slower than the dispatcher waits for
// it (subscribeWait): rounds start without it, and every waiter gets one
// more round once it is active.
func TestAJobCreatedBeforeALateListenReachesAnEarlyWaiter(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	gate := make(chan struct{})
	g := &gatedNotifier{Store: st, calls: make(chan int, 10), gates: []chan struct{}{gate}}
	col := notifyScenario(t, g, 50*time.Millisecond)
	<-g.calls
	time.Sleep(300 * time.Millisecond) // past subscribeWait: the waiter's first round ran, empty
	create(t, st, 1)
	close(gate)
	wantDelivered(t, col, "the job created before the late LISTEN was active was missed")
}

// After a dropped subscription, a job created before the new one is
// active notifies nobody: the round that makes up for the drop must come
// after the new subscription is active, not before it.
func TestAJobCreatedWhileListenReconnectsReachesAWaiter(t *testing.T) {
	t.Parallel()
	st := setup(t, 0)
	gate := make(chan struct{})
	g := &gatedNotifier{Store: st, calls: make(chan int, 10), gates: []chan struct{}{nil, gate}, dropFirst: true}
	col := notifyScenario(t, g, 0)
	for i := range g.calls {
		if i == 1 { // the subscription after the drop
			break
		}
	}
	time.Sleep(200 * time.Millisecond) // a make-up round could run now, on an empty queue
	create(t, st, 1)                   // notifies nobody: LISTEN is reconnecting
	close(gate)
	wantDelivered(t, col, "the job created while LISTEN reconnected was missed")
}
