package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/internal/testkit/sqlitetest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/sqlite"
)

// Focused tests of what is particular to the SQLite engine. Store semantics
// are checked by the conformance suite (TestConformance).

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func spec(queue string) store.JobSpec {
	return store.JobSpec{Queue: queue, Kind: "report.build", Payload: []byte(`{"n":1}`)}
}

func create(t *testing.T, s store.Store, tenant string, sp store.JobSpec, now time.Time) *store.Job {
	t.Helper()
	res, err := s.CreateJobs(t.Context(), store.CreateJobsParams{
		Tenant: tenant, Requests: []store.CreateRequest{{Spec: sp}}, Now: now,
	})
	if err != nil {
		t.Fatalf("create in %q: %v", sp.Queue, err)
	}
	return res[0].Job
}

func claimOne(t *testing.T, s store.Store, tenant, queue string, now time.Time) store.ClaimedJob {
	t.Helper()
	got, err := s.Claim(t.Context(), store.ClaimParams{Tenant: tenant, Worker: "w1", Queues: []string{queue}, Max: 1, Now: now})
	if err != nil || len(got) != 1 {
		t.Fatalf("claim from %q: %d jobs, %v; want 1", queue, len(got), err)
	}
	return got[0]
}

func TestOpenCreatesTheFileAndMigrationsAreIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "sub-dir-free.db")
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the file exists before Open: %v", err)
	}
	// Migrate on a missing file creates it; running it again is a no-op.
	for i := range 2 {
		if err := sqlite.Migrate(t.Context(), path); err != nil {
			t.Fatalf("migrate #%d: %v", i+1, err)
		}
	}
	s := open(t, path, store.EngineOptions{})
	j := create(t, s, "t1", spec("q"), t0)
	// Open migrates too; a second Store on the migrated file must not
	// re-apply anything nor lose data.
	s2 := open(t, path, store.EngineOptions{})
	got, err := s2.GetJob(t.Context(), "t1", j.ID)
	if err != nil || got.ID != j.ID {
		t.Fatalf("second store reads job %s: %+v, %v", j.ID, got, err)
	}

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	v, err := migrations.Version(t.Context(), db, migrations.SQLite)
	if err != nil || v < 1 {
		t.Fatalf("schema version %d, %v; want at least 1", v, err)
	}
	var mode string
	if err := db.QueryRow("PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode is %q (%v), want wal: it is persistent once the engine set it", mode, err)
	}
}

func TestOpenRefusesPathsItCannotServe(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"", ":memory:", "file:x.db?mode=memory", filepath.Join(t.TempDir(), "a.db?_pragma=foo")} {
		s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded, want an error", path)
		}
	}
	if err := sqlite.Migrate(t.Context(), ""); err == nil {
		t.Error("Migrate(\"\") succeeded, want an error")
	}
	// A directory cannot be a database file.
	if s, err := sqlite.Open(t.Context(), sqlite.Config{Path: t.TempDir()}); err == nil {
		s.Close()
		t.Error("Open on a directory succeeded")
	}
}

func TestAcceptedJobSurvivesAReopen(t *testing.T) {
	t.Parallel()
	path := sqlitetest.Path(t)
	s, err := sqlite.Open(t.Context(), sqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	j := create(t, s, "t1", spec("q"), t0)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	s2 := open(t, path, store.EngineOptions{})
	c := claimOne(t, s2, "t1", "q", t0.Add(time.Second))
	if c.Job.ID != j.ID || c.Token.Generation != 1 {
		t.Fatalf("after reopen claimed %s gen %d, want %s gen 1", c.Job.ID, c.Token.Generation, j.ID)
	}
	evs, err := s2.ListEvents(t.Context(), store.ListEventsParams{Tenant: "t1", JobID: j.ID})
	if err != nil || len(evs) != 2 || evs[0].Type != store.EventQueued || evs[1].Type != store.EventLeased {
		t.Fatalf("events after reopen: %+v, %v", evs, err)
	}
}

func TestStoreClockIsUTCMicroseconds(t *testing.T) {
	t.Parallel()
	loc := time.FixedZone("UTC+5:30", 5*3600+1800)
	wall := time.Date(2031, 6, 1, 12, 0, 0, 123456789, loc)
	s, err := sqlite.Open(t.Context(), sqlite.Config{
		Path: sqlitetest.Path(t),
		Now:  func() time.Time { return wall },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now, err := s.Now(t.Context())
	want := wall.UTC().Truncate(time.Microsecond)
	if err != nil || !now.Equal(want) || now.Location() != time.UTC {
		t.Fatalf("Now = %v (%v), want %v in UTC", now, err, want)
	}
	// A zero Now in params means the store clock.
	j := create(t, s, "t1", spec("q"), time.Time{})
	if !j.CreatedAt.Equal(want) || j.CreatedAt.Location() != time.UTC || !j.AvailableAt.Equal(want) {
		t.Fatalf("created_at %v available_at %v, want %v UTC", j.CreatedAt, j.AvailableAt, want)
	}
}

func TestBadPageTokensAreInvalidArguments(t *testing.T) {
	t.Parallel()
	s := open(t, sqlitetest.Path(t), store.EngineOptions{})
	for range 3 {
		create(t, s, "t1", spec("q"), t0)
	}
	page, err := s.ListJobs(t.Context(), store.ListJobsParams{Tenant: "t1", Limit: 2})
	if err != nil || len(page.Jobs) != 2 || page.NextCursor == "" {
		t.Fatalf("first page: %+v, %v", page, err)
	}
	for _, tok := range []string{"x", "%%%", strings.Repeat("A", 600), page.NextCursor + "A", page.NextCursor[:len(page.NextCursor)-2]} {
		if _, err := s.ListJobs(t.Context(), store.ListJobsParams{Tenant: "t1", Cursor: tok}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListJobs cursor %q: got %v, want ErrInvalid", tok, err)
		}
		if _, err := s.ListDeadJobs(t.Context(), store.ListDeadJobsParams{Tenant: "t1", Cursor: tok}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListDeadJobs cursor %q: got %v, want ErrInvalid", tok, err)
		}
	}
	if _, err := s.ListDeadJobs(t.Context(), store.ListDeadJobsParams{Tenant: "t1", Cursor: page.NextCursor}); !errors.Is(err, store.ErrInvalid) {
		t.Errorf("a ListJobs cursor given to ListDeadJobs: got %v, want ErrInvalid", err)
	}
	rest, err := s.ListJobs(t.Context(), store.ListJobsParams{Tenant: "t1", Limit: 2, Cursor: page.NextCursor})
	if err != nil || len(rest.Jobs) != 1 || rest.NextCursor != "" {
		t.Fatalf("second page: %+v, %v; want the one remaining job and no cursor", rest, err)
	}
}

// recv waits for one notification; the channel is buffered and the send
// happened before the call that produced it returned, so it is there
// already unless the notifier failed.
func recv(t *testing.T, ch <-chan store.QueueRef, what string) store.QueueRef {
	t.Helper()
	select {
	case ref, ok := <-ch:
		if !ok {
			t.Fatalf("%s: subscription closed", what)
		}
		return ref
	default:
		t.Fatalf("%s: no notification", what)
	}
	return store.QueueRef{}
}

func quiet(t *testing.T, ch <-chan store.QueueRef, what string) {
	t.Helper()
	select {
	case ref := <-ch:
		t.Fatalf("%s: unexpected notification %+v", what, ref)
	default:
	}
}

func TestNotifierSignalsWorkThatBecameAvailable(t *testing.T) {
	t.Parallel()
	s := open(t, sqlitetest.Path(t), store.EngineOptions{})
	ctx, cancel := context.WithCancel(t.Context())
	ch, err := s.SubscribeJobs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithCancel(t.Context())
	defer cancel2()
	ch2, err := s.SubscribeJobs(ctx2)
	if err != nil {
		t.Fatal(err)
	}
	want := store.QueueRef{Tenant: "t1", Queue: "mail"}

	// Create: one hint per commit and queue, even for a batch.
	if _, err := s.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t1", Now: t0, Requests: []store.CreateRequest{
		{Spec: spec("mail")}, {Spec: spec("mail")},
	}}); err != nil {
		t.Fatal(err)
	}
	if got := recv(t, ch, "create"); got != want {
		t.Fatalf("create signalled %+v, want %+v", got, want)
	}
	quiet(t, ch, "a batch of one queue")
	if got := recv(t, ch2, "create, second subscriber"); got != want {
		t.Fatalf("second subscriber got %+v", got)
	}

	// A claim makes nothing available: no hint.
	c := claimOne(t, s, "t1", "mail", t0.Add(time.Second))
	quiet(t, ch, "claim")

	// Retry (rescheduled) and release give work back.
	if _, err := s.Retry(t.Context(), store.RetryParams{Tenant: "t1", Token: c.Token, Error: store.JobError{Code: "e", Retryable: true}, Now: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "retry")
	c2 := claimOne(t, s, "t1", "mail", t0.Add(time.Hour))
	if _, err := s.Release(t.Context(), store.ReleaseParams{Tenant: "t1", Token: c2.Token, Now: t0.Add(time.Hour + time.Second)}); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "release")

	// A failed commit signals nothing.
	bad := open(t, sqlitetest.Path(t), store.EngineOptions{BeforeCommit: func(string) error { return errors.New("injected") }})
	badCh, err := bad.SubscribeJobs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.CreateJobs(t.Context(), store.CreateJobsParams{Tenant: "t1", Requests: []store.CreateRequest{{Spec: spec("mail")}}}); err == nil {
		t.Fatal("create with a failing BeforeCommit succeeded")
	}
	quiet(t, badCh, "rolled-back create")

	// Resume signals; pause does not.
	if _, err := s.SetQueuePaused(t.Context(), "t1", "mail", true); err != nil {
		t.Fatal(err)
	}
	quiet(t, ch, "pause")
	if _, err := s.SetQueuePaused(t.Context(), "t1", "mail", false); err != nil {
		t.Fatal(err)
	}
	recv(t, ch, "resume")

	// Sends never block: a subscriber that does not read loses hints, the
	// writer carries on.
	for i := range 200 {
		create(t, s, "t1", spec("q"+string(rune('a'+i%26))+string(rune('a'+i/26))), t0)
	}
	n := 0
	for len(ch) > 0 {
		<-ch
		n++
	}
	if n == 0 || n >= 200 {
		t.Fatalf("drained %d hints after 200 unread creates: want some, and fewer than sent", n)
	}

	// Ending the context closes the channel.
	cancel()
	for range ch {
	}

	// Closing the store closes the remaining subscriptions and refuses
	// new ones.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range ch2 {
	}
	if _, err := s.SubscribeJobs(t.Context()); err == nil {
		t.Fatal("SubscribeJobs on a closed store succeeded")
	}
}

func eventTypes(t *testing.T, s store.Store, tenant, id string) []store.EventType {
	t.Helper()
	evs, err := s.ListEvents(t.Context(), store.ListEventsParams{Tenant: tenant, JobID: id})
	if err != nil {
		t.Fatalf("events of %s: %v", id, err)
	}
	out := make([]store.EventType, len(evs))
	for i, ev := range evs {
		if ev.Sequence != int64(i+1) {
			t.Fatalf("events of %s: sequence %d at position %d", id, ev.Sequence, i)
		}
		out[i] = ev.Type
	}
	return out
}

func wantTypes(t *testing.T, got []store.EventType, want ...store.EventType) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("events are %v, want %v", got, want)
	}
}

// A retryable failure of a cancel-requested job ends it: queued again, it
// could never be claimed.
func TestRetryOfACancelRequestedJobCancelsIt(t *testing.T) {
	t.Parallel()
	s := open(t, sqlitetest.Path(t), store.EngineOptions{})
	j := create(t, s, "t", spec("q"), t0)
	c := claimOne(t, s, "t", "q", t0.Add(time.Second))
	if _, err := s.RequestCancel(t.Context(), store.RequestCancelParams{Tenant: "t", JobID: j.ID, Reason: "stop", Now: t0.Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	p := store.RetryParams{Tenant: "t", Token: c.Token, Error: store.JobError{Code: "timeout", Message: "upstream slow", Retryable: true}, Now: t0.Add(3 * time.Second)}
	job, err := s.Retry(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if job.State != store.JobStateCancelled || job.LastError == nil || job.LastError.Code != "timeout" {
		t.Fatalf("after retry the job is %s with last error %+v, want cancelled with the error kept", job.State, job.LastError)
	}
	wantTypes(t, eventTypes(t, s, "t", j.ID), store.EventQueued, store.EventLeased, store.EventCancelRequested,
		store.EventRunFailed, store.EventCancelled)
	// The same report again (its answer was lost) gets the same job.
	again, err := s.Retry(t.Context(), p)
	if err != nil || again.State != store.JobStateCancelled {
		t.Fatalf("repeated retry: %+v, %v", again, err)
	}
	wantTypes(t, eventTypes(t, s, "t", j.ID), store.EventQueued, store.EventLeased, store.EventCancelRequested,
		store.EventRunFailed, store.EventCancelled)
}

// Claiming from several queues keeps the global claim order while no queue
// exceeds its concurrency limit.
func TestClaimAcrossQueuesKeepsOrderAndLimits(t *testing.T) {
	t.Parallel()
	s := open(t, sqlitetest.Path(t), store.EngineOptions{})
	if _, err := s.UpdateQueuePolicy(t.Context(), "t", store.QueuePolicy{Queue: "scarce", ConcurrencyLimit: 1}); err != nil {
		t.Fatal(err)
	}
	var scarce, plenty []string
	for i := range 3 {
		sp := spec("scarce")
		sp.Priority = 10
		scarce = append(scarce, create(t, s, "t", sp, t0.Add(time.Duration(i)*time.Millisecond)).ID)
		plenty = append(plenty, create(t, s, "t", spec("plenty"), t0.Add(time.Duration(i)*time.Millisecond)).ID)
	}
	got, err := s.Claim(t.Context(), store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"plenty", "scarce"}, Max: 3, Now: t0.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range got {
		ids = append(ids, c.Job.ID)
	}
	// The scarce queue's first job wins on priority; its limit of one
	// leaves the rest of the batch to the other queue, oldest first.
	if want := []string{scarce[0], plenty[0], plenty[1]}; !slices.Equal(ids, want) {
		t.Fatalf("claimed %v, want %v", ids, want)
	}
	got, err = s.Claim(t.Context(), store.ClaimParams{Tenant: "t", Worker: "w", Queues: []string{"scarce", "plenty"}, Max: 5, Now: t0.Add(2 * time.Second)})
	if err != nil || len(got) != 1 || got[0].Job.ID != plenty[2] {
		t.Fatalf("second claim: %d jobs, %v; want only %s (scarce is at its limit)", len(got), err, plenty[2])
	}
	// When the scarce lease expires and the reaper requeues the job (in
	// its old place), its room comes back: still only one job at a time.
	if _, err := s.ReapExpired(t.Context(), store.ReapParams{Now: t0.Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	got, err = s.Claim(t.Context(), store.ClaimParams{Tenant: "t", Worker: "w2", Queues: []string{"scarce"}, Max: 5, Now: t0.Add(time.Hour)})
	if err != nil || len(got) != 1 || got[0].Job.ID != scarce[0] || got[0].Token.Generation != 2 {
		t.Fatalf("claim after expiry: %+v, %v; want %s at generation 2 only", got, err, scarce[0])
	}
}
