package postgres_test

import (
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/pressly/goose/v3"

	"github.com/leasehold/leasehold/internal/testkit/pgtest"
	"github.com/leasehold/leasehold/migrations"
	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// TestSuccessfulJobInsertsTwoRows counts, in PostgreSQL's own statistics,
// the rows a successful job inserts: its job row in jobs_live and the same
// row moved into jobs_done by its completion, and nothing else (no event,
// no attempt row); one idempotency record more when it is created with a
// request id.
func TestSuccessfulJobInsertsTwoRows(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	pool := postgres.Pool(s)
	inserted := func() (jobs, others int64) {
		t.Helper()
		if err := pool.QueryRow(ctx, `SELECT
			coalesce(sum(n_tup_ins) FILTER (WHERE relname ~ '^jobs_(live|dead|done)'), 0),
			coalesce(sum(n_tup_ins) FILTER (WHERE relname !~ '^jobs_(live|dead|done)'), 0)
			FROM pg_stat_user_tables WHERE schemaname = current_schema()
			-- The copied schema's goose versions are counted when the
			-- copying backend flushes its statistics, which can be after
			-- the baseline is read (seen as 13 extra rows under load).
			AND relname <> 'goose_db_version'`).Scan(&jobs, &others); err != nil {
			t.Fatal(err)
		}
		return jobs, others
	}
	jobs0, others0 := inserted()
	const n, keyed = 40, 10
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	reqs := make([]store.CreateRequest, n)
	for i := range reqs {
		reqs[i].Spec = store.JobSpec{Queue: "rows", Kind: "k"}
		if i < keyed {
			reqs[i].RequestID = "req-" + string(rune('a'+i))
		}
	}
	if _, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t1", Requests: reqs, Now: now}); err != nil {
		t.Fatal(err)
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Tenant: "t1", Worker: "w", Queues: []string{"rows"}, Max: n, Now: now.Add(time.Second)})
	if err != nil || len(claimed) != n {
		t.Fatalf("claimed %d of %d: %v", len(claimed), n, err)
	}
	reports := make([]store.Report, n)
	for i, c := range claimed {
		reports[i] = store.Report{Kind: store.ReportComplete, Tenant: "t1", Token: c.Token, Now: now.Add(2 * time.Second)}
	}
	res, err := s.ApplyReports(ctx, reports)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil || r.Job.State != store.JobStateSucceeded {
			t.Fatalf("complete: %+v", r)
		}
	}
	// Statistics reach the shared counters when a backend goes idle, within
	// seconds.
	deadline := time.Now().Add(30 * time.Second)
	var jobs, others int64
	for {
		jobs, others = inserted()
		jobs, others = jobs-jobs0, others-others0
		if jobs >= 2*n || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if jobs != 2*n || others != keyed {
		t.Fatalf("%d successful jobs (%d with a request id) inserted %d job rows and %d other rows, want %d and %d",
			n, keyed, jobs, others, 2*n, keyed)
	}
	if perJob := float64(jobs) / n; perJob > 2 {
		t.Fatalf("%.2f rows inserted per successful job without a request id, want at most 2", perJob)
	}
	var events, attempts int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_events), (SELECT count(*) FROM job_attempts)`).Scan(&events, &attempts); err != nil {
		t.Fatal(err)
	}
	if events != 0 || attempts != 0 {
		t.Fatalf("%d event rows and %d attempt rows, want none", events, attempts)
	}
}

// TestHistoryOfRowsBeforeMigration013 writes jobs as migration 012 left
// them (every event in job_events, attempts in job_attempts), migrates, and
// reads the same history back; jobs live at the upgrade go on with their
// later events derived, with no event shown twice.
func TestHistoryOfRowsBeforeMigration013(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := pgtest.Schema(t)
	db, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src, err := migrations.Source(migrations.Postgres)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 12); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, q := range []string{
		// j1: succeeded, three events and its attempt.
		`INSERT INTO jobs (tenant, id, queue, kind, state, attempts, max_attempts, lease_owner, lease_generation,
		    created_at, available_at, finished_at, leased_at, last_event_seq)
		 VALUES ('t1', 'j1', 'q', 'k', 'succeeded', 1, 3, 'w1', 1, $1, $1, $1::timestamptz + interval '2 s', $1::timestamptz + interval '1 s', 3)`,
		`INSERT INTO job_events (tenant, job_id, seq, type, at, data) VALUES
		    ('t1', 'j1', 1, 'queued', $1, '{"queue":"q"}'),
		    ('t1', 'j1', 2, 'leased', $1::timestamptz + interval '1 s', '{"worker_id":"w1"}'),
		    ('t1', 'j1', 3, 'succeeded', $1::timestamptz + interval '2 s', '{"worker_id":"w1"}')`,
		`INSERT INTO job_attempts (tenant, job_id, attempt, generation, worker_id, claimed_at, finished_at, outcome)
		 VALUES ('t1', 'j1', 1, 1, 'w1', $1::timestamptz + interval '1 s', $1::timestamptz + interval '2 s', 'succeeded')`,
		// j2: queued, its QUEUED event.
		`INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, created_at, available_at, last_event_seq)
		 VALUES ('t1', 'j2', 'q', 'k', 'queued', 3, $1, $1, 1)`,
		`INSERT INTO job_events (tenant, job_id, seq, type, at, data) VALUES ('t1', 'j2', 1, 'queued', $1, '{"queue":"q","old":true}')`,
		// j3: leased by w3 (generation 1) until an hour later.
		`INSERT INTO jobs (tenant, id, queue, kind, state, attempts, max_attempts, lease_owner, lease_generation,
		    lease_expires_at, created_at, available_at, leased_at, last_event_seq)
		 VALUES ('t1', 'j3', 'q3', 'k', 'leased', 1, 3, 'w3', 1, $1::timestamptz + interval '1 h', $1, $1, $1, 2)`,
		`INSERT INTO job_events (tenant, job_id, seq, type, at, data) VALUES
		    ('t1', 'j3', 1, 'queued', $1, '{"queue":"q3","old":true}'), ('t1', 'j3', 2, 'leased', $1, '{"worker_id":"w3","old":true}')`,
	} {
		if _, err := db.ExecContext(ctx, q, t0); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if err := postgres.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	s := open(t, url, store.EngineOptions{})

	evs, err := s.ListEvents(ctx, store.ListEventsParams{Tenant: "t1", JobID: "j1"})
	if err != nil || len(evs) != 3 || evs[1].Type != store.EventLeased || evs[1].Data != `{"worker_id": "w1"}` || evs[2].Type != store.EventSucceeded {
		t.Fatalf("events of a finished job after the migration: %+v, %v", evs, err)
	}
	as, err := s.ListAttempts(ctx, "t1", "j1")
	if err != nil || len(as) != 1 || as[0].Outcome != store.AttemptSucceeded || as[0].WorkerID != "w1" {
		t.Fatalf("attempts of a finished job after the migration: %+v, %v", as, err)
	}

	// j2 is claimed and completed by the new code; j3's old lease completes.
	c, err := s.Claim(ctx, store.ClaimParams{Tenant: "t1", Worker: "w2", Queues: []string{"q"}, Max: 1, Now: t0.Add(time.Minute)})
	if err != nil || len(c) != 1 || c[0].Job.ID != "j2" {
		t.Fatalf("claim j2: %+v, %v", c, err)
	}
	if _, err := s.Complete(ctx, store.CompleteParams{Tenant: "t1", Token: c[0].Token, Now: t0.Add(time.Minute + time.Second)}); err != nil {
		t.Fatal(err)
	}
	tok := store.LeaseToken{JobID: "j3", Generation: 1, WorkerID: "w3"}
	if _, err := s.Complete(ctx, store.CompleteParams{Tenant: "t1", Token: tok, Now: t0.Add(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		want []store.EventType
		old  int
	}{
		{"j2", []store.EventType{store.EventQueued, store.EventLeased, store.EventSucceeded}, 1},
		{"j3", []store.EventType{store.EventQueued, store.EventLeased, store.EventSucceeded}, 2},
	} {
		evs, err := s.ListEvents(ctx, store.ListEventsParams{Tenant: "t1", JobID: c.id})
		if err != nil || len(evs) != len(c.want) {
			t.Fatalf("events of %s: %+v, %v", c.id, evs, err)
		}
		for i, e := range evs {
			if e.Sequence != int64(i+1) || e.Type != c.want[i] {
				t.Fatalf("events of %s: %+v", c.id, evs)
			}
			if stored := i < c.old; stored != strings.Contains(e.Data, `"old": true`) {
				t.Errorf("event %d of %s: data %s (stored before the migration: %v)", e.Sequence, c.id, e.Data, stored)
			}
		}
		as, err := s.ListAttempts(ctx, "t1", c.id)
		if err != nil || len(as) != 1 || as[0].Outcome != store.AttemptSucceeded {
			t.Fatalf("attempts of %s: %+v, %v", c.id, as, err)
		}
	}
}
