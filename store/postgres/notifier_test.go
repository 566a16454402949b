package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// receive waits for one notification; the timeout only bounds a failure.
func receive(t *testing.T, ch <-chan store.QueueRef, why string) store.QueueRef {
	t.Helper()
	timer := time.NewTimer(20 * time.Second)
	defer timer.Stop()
	select {
	case ref, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the subscription channel closed", why)
		}
		return ref
	case <-timer.C:
		t.Fatalf("%s: no notification within 20s", why)
	}
	return store.QueueRef{}
}

func createJob(t *testing.T, s store.Store, tenant, queue string) (*store.Job, error) {
	t.Helper()
	res, err := s.CreateJobs(t.Context(), store.CreateJobsParams{
		Tenant:   tenant,
		Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: queue, Kind: "k"}}},
	})
	if err != nil {
		return nil, err
	}
	return res[0].Job, nil
}

// TestNotifyWakesSubscriber: a job created through one store (coordinator)
// wakes a subscriber of another store on the same database, and only
// committed creates notify.
func TestNotifyWakesSubscriber(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	failCreate := make(chan bool, 1)
	producer := open(t, url, store.EngineOptions{BeforeCommit: func(op string) error {
		select {
		case <-failCreate:
			return errors.New("injected")
		default:
			return nil
		}
	}})
	consumer := open(t, url, store.EngineOptions{})

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch, err := consumer.SubscribeJobs(ctx)
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}

	// A create that rolls back must not notify. Notifications arrive in
	// commit order, so if the rolled-back one had been sent it would come
	// before the committed one.
	failCreate <- true
	if _, err := createJob(t, producer, "tenant-a", "rolled-back"); err == nil {
		t.Fatal("a create whose commit hook failed succeeded")
	}
	if _, err := createJob(t, producer, "tenant-a", "emails"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, want := receive(t, ch, "after a create"), (store.QueueRef{Tenant: "tenant-a", Queue: "emails"}); got != want {
		t.Fatalf("first notification is %+v, want %+v", got, want)
	}

	// A release puts the job back: it notifies too.
	claimed, err := producer.Claim(t.Context(), store.ClaimParams{Tenant: "tenant-a", Worker: "w", Queues: []string{"emails"}, Max: 1})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v (%d jobs)", err, len(claimed))
	}
	if _, err := producer.Release(t.Context(), store.ReleaseParams{Tenant: "tenant-a", Token: claimed[0].Token}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if got, want := receive(t, ch, "after a release"), (store.QueueRef{Tenant: "tenant-a", Queue: "emails"}); got != want {
		t.Fatalf("notification after release is %+v, want %+v", got, want)
	}

	// Cancelling the subscription closes the channel.
	cancel()
	for range ch {
	}
}

// TestNotifyListenerReconnects: when the listener's connection is killed,
// the subscription survives and delivers again once it has reconnected.
func TestNotifyListenerReconnects(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	producer := open(t, url, store.EngineOptions{})
	consumer := open(t, url, store.EngineOptions{})
	pids := make(chan uint32, 4)
	postgres.SetOnListen(consumer, func(pid uint32) { pids <- pid })

	ch, err := consumer.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	first := <-pids

	var killed bool
	if err := postgres.Pool(producer).QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", int32(first)).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener backend %d: %v (terminated: %v)", first, err, killed)
	}
	// The hook fires once the new connection is listening; from then on a
	// create must wake us.
	timer := time.NewTimer(30 * time.Second)
	defer timer.Stop()
	select {
	case second := <-pids:
		if second == first {
			t.Fatalf("the listener reconnected on the killed backend %d", first)
		}
	case <-timer.C:
		t.Fatal("the listener did not reconnect within 30s")
	}
	if _, err := createJob(t, producer, "tenant-a", "after-reconnect"); err != nil {
		t.Fatalf("create: %v", err)
	}
	if got, want := receive(t, ch, "after reconnecting"), (store.QueueRef{Tenant: "tenant-a", Queue: "after-reconnect"}); got != want {
		t.Fatalf("notification is %+v, want %+v", got, want)
	}
}

// TestCloseEndsSubscriptions: closing the store closes subscription
// channels even when their context is still live, and a later subscribe
// fails.
func TestCloseEndsSubscriptions(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	ch, err := s.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	for range ch {
	}
	if _, err := s.SubscribeJobs(t.Context()); err == nil {
		t.Fatal("subscribe on a closed store succeeded")
	}
}
