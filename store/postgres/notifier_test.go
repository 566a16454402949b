package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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

func createJob(t *testing.T, s store.Store, tenant, queue string) error {
	t.Helper()
	_, err := s.CreateJobs(t.Context(), store.CreateJobsParams{
		Tenant:   tenant,
		Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: queue, Kind: "k"}}},
	})
	return err
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
	if err := createJob(t, producer, "tenant-a", "rolled-back"); err == nil {
		t.Fatal("a create whose commit hook failed succeeded")
	}
	if err := createJob(t, producer, "tenant-a", "emails"); err != nil {
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

// listeningBackend waits (bounded) until a backend other than except has
// finished a LISTEN on channel and is idle, as the server sees it, and
// returns its pid. From then on a committed NOTIFY reaches it.
func listeningBackend(t *testing.T, s *postgres.Store, channel string, except int32) int32 {
	t.Helper()
	const q = `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> $2 AND state = 'idle'
		  AND query ILIKE 'listen %' AND position($1 in query) > 0`
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var pid int32
		err := postgres.Pool(s).QueryRow(t.Context(), q, channel, except).Scan(&pid)
		if err == nil {
			return pid
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("look for the listener's backend: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no backend other than %d listens on %s within 30s", except, channel)
	return 0
}

// TestNotifyListenerReconnects: when the server terminates the listener's
// backend, the subscription survives, reconnects, and a job created after
// that wakes the subscriber.
func TestNotifyListenerReconnects(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	producer := open(t, url, store.EngineOptions{})
	consumer := open(t, url, store.EngineOptions{})

	ch, err := consumer.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatalf("subscribe: %v", err)
	}
	channel := postgres.Channel(consumer)
	first := listeningBackend(t, producer, channel, 0)

	var killed bool
	if err := postgres.Pool(producer).QueryRow(t.Context(), "SELECT pg_terminate_backend($1)", first).Scan(&killed); err != nil || !killed {
		t.Fatalf("terminate the listener backend %d: %v (terminated: %v)", first, err, killed)
	}
	// Once another backend listens on the channel, a create must wake us.
	listeningBackend(t, producer, channel, first)
	if err := createJob(t, producer, "tenant-a", "after-reconnect"); err != nil {
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

// TestJobChangesReachEveryStore: while watchers are announced, the change
// trigger tells a subscriber of another store on the same database which
// job changed, for each change (create, claim, complete), after its
// commit; before the announcement and after its withdrawal nothing is
// sent; another schema's changes never arrive.
func TestJobChangesReachEveryStore(t *testing.T) {
	t.Parallel()
	url := migrated(t)
	writer := open(t, url, store.EngineOptions{})
	watcher := open(t, url, store.EngineOptions{})
	elsewhere := open(t, migrated(t), store.EngineOptions{})
	changes, err := watcher.SubscribeJobChanges(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	next := func(why string) store.JobRef {
		t.Helper()
		timer := time.NewTimer(20 * time.Second)
		defer timer.Stop()
		select {
		case ref, ok := <-changes.Jobs:
			if !ok {
				t.Fatalf("%s: the subscription closed", why)
			}
			return ref
		case <-timer.C:
			t.Fatalf("%s: no change within 20s", why)
		}
		return store.JobRef{}
	}
	if err := createJob(t, elsewhere, "acme", "q"); err != nil {
		t.Fatal(err)
	}
	if err := createJob(t, writer, "acme", "unwatched"); err != nil { // nobody announced watchers yet
		t.Fatal(err)
	}
	if err := elsewhere.AnnounceWatchers(t.Context(), "coordinator-elsewhere", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := createJob(t, elsewhere, "acme", "q"); err != nil { // announced in another schema only
		t.Fatal(err)
	}
	if err := watcher.AnnounceWatchers(t.Context(), "coordinator-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	created, err := writer.CreateJobs(t.Context(), store.CreateJobsParams{
		Tenant: "acme", Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := store.JobRef{Tenant: "acme", ID: created[0].Job.ID}
	if got := next("create"); got != want {
		t.Fatalf("first change %+v; want %+v (another schema's job must not arrive)", got, want)
	}
	claimed, err := writer.Claim(t.Context(), store.ClaimParams{Tenant: "acme", Worker: "w", Queues: []string{"q"}, Max: 1})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	if got := next("claim"); got != want {
		t.Fatalf("change after the claim %+v; want %+v", got, want)
	}
	if _, err := writer.Complete(t.Context(), store.CompleteParams{Tenant: "acme", Token: claimed[0].Token}); err != nil {
		t.Fatal(err)
	}
	if got := next("complete"); got != want {
		t.Fatalf("change after the complete %+v; want %+v", got, want)
	}
	if err := watcher.WithdrawWatchers(t.Context(), "coordinator-b"); err != nil {
		t.Fatal(err)
	}
	if err := createJob(t, writer, "acme", "unwatched"); err != nil {
		t.Fatal(err)
	}
	if err := watcher.AnnounceWatchers(t.Context(), "coordinator-b", time.Minute); err != nil {
		t.Fatal(err)
	}
	again, err := writer.CreateJobs(t.Context(), store.CreateJobsParams{
		Tenant: "acme", Requests: []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := next("create after the withdrawal"); got.ID != again[0].Job.ID {
		t.Fatalf("change %+v; want %s (the job created while nobody watched is not sent)", got, again[0].Job.ID)
	}
}
