package postgres_test

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// partitionOf names the partition that holds a job.
func partitionOf(t *testing.T, s *postgres.Store, tenant, id string) string {
	t.Helper()
	var part string
	if err := postgres.Pool(s).QueryRow(t.Context(), `SELECT tableoid::regclass::text FROM jobs WHERE tenant = $1 AND id = $2`,
		tenant, id).Scan(&part); err != nil {
		t.Fatalf("partition of %s: %v", id, err)
	}
	return part
}

// TestFinishedJobsMoveOutOfJobsLive: the statement that ends a job moves
// its row to jobs_done (succeeded, failed, cancelled: the partition of its
// creation day) or jobs_dead, and every read finds it there: GetJob, the
// listing by state, its events, a repeated report, and an idempotent
// create of it.
func TestFinishedJobsMoveOutOfJobsLive(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const tenant = "t1"
	reqs := []store.CreateRequest{
		{Spec: store.JobSpec{Queue: "q", Kind: "ok"}, RequestID: "req-ok"},
		{Spec: store.JobSpec{Queue: "q", Kind: "bad"}},
		{Spec: store.JobSpec{Queue: "q", Kind: "flaky", MaxAttempts: 1}},
		{Spec: store.JobSpec{Queue: "later", Kind: "cancel"}},
	}
	created, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: tenant, Requests: reqs, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(created))
	for i, c := range created {
		ids[i] = c.Job.ID
		if p := partitionOf(t, s, tenant, c.Job.ID); p != "jobs_live" {
			t.Fatalf("a new job is in %s, want jobs_live", p)
		}
	}
	claimed, err := s.Claim(ctx, store.ClaimParams{Tenant: tenant, Worker: "w", Queues: []string{"q"}, Max: 3, Now: now.Add(time.Second)})
	if err != nil || len(claimed) != 3 {
		t.Fatalf("claimed %d: %v", len(claimed), err)
	}
	byID := map[string]store.LeaseToken{}
	for _, c := range claimed {
		byID[c.Job.ID] = c.Token
	}
	done := now.Add(2 * time.Second)
	reports := []store.Report{
		{Kind: store.ReportComplete, Tenant: tenant, Token: byID[ids[0]], Result: []byte(`"r"`), Now: done},
		{Kind: store.ReportRetry, Tenant: tenant, Token: byID[ids[1]], Error: store.JobError{Code: "bad", Retryable: false}, Now: done},
		{Kind: store.ReportRetry, Tenant: tenant, Token: byID[ids[2]], Error: store.JobError{Code: "flaky", Retryable: true}, Now: done},
	}
	first, err := s.ApplyReports(ctx, reports)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.RequestCancel(ctx, store.RequestCancelParams{Tenant: tenant, JobID: ids[3], Reason: "no", Now: done}); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		state store.JobState
		event store.EventType
	}{
		{store.JobStateSucceeded, store.EventSucceeded},
		{store.JobStateFailed, store.EventFailed},
		{store.JobStateDead, store.EventDead},
		{store.JobStateCancelled, store.EventCancelled},
	}
	for i, id := range ids {
		ms, err := strconv.ParseInt(strings.ReplaceAll(id[:13], "-", ""), 16, 64)
		if err != nil {
			t.Fatal(err)
		}
		wantPart := store.DonePartitionOf(time.UnixMilli(ms)).Name()
		if want[i].state == store.JobStateDead {
			wantPart = "jobs_dead"
		}
		if p := partitionOf(t, s, tenant, id); p != wantPart {
			t.Fatalf("a %s job is in %s, want %s", want[i].state, p, wantPart)
		}
		j, err := s.GetJob(ctx, tenant, id)
		if err != nil || j.State != want[i].state {
			t.Fatalf("get %s: %+v, %v; want %s", id, j, err, want[i].state)
		}
		evs, err := s.ListEvents(ctx, store.ListEventsParams{Tenant: tenant, JobID: id})
		if err != nil || len(evs) == 0 || evs[len(evs)-1].Type != want[i].event {
			t.Fatalf("events of the %s job: %+v, %v", want[i].state, evs, err)
		}
		for k, ev := range evs {
			if ev.Sequence != int64(k+1) {
				t.Fatalf("events of the %s job are not gapless: %+v", want[i].state, evs)
			}
		}
	}
	var live int
	if err := postgres.Pool(s).QueryRow(ctx, `SELECT count(*) FROM jobs_live`).Scan(&live); err != nil || live != 0 {
		t.Fatalf("%d rows left in jobs_live (%v), want 0", live, err)
	}

	// The same reports again, after the move: the same answers.
	again, err := s.ApplyReports(ctx, reports)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reports {
		if (first[i].Err == nil) != (again[i].Err == nil) || first[i].Job == nil || again[i].Job == nil ||
			again[i].Job.State != first[i].Job.State || again[i].Job.ID != first[i].Job.ID {
			t.Fatalf("report %d repeated after the move answered %+v, first %+v", i, again[i], first[i])
		}
	}

	// The idempotent create of the moved job answers it.
	re, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: tenant, Requests: reqs[:1], Now: done.Add(time.Second)})
	if err != nil || !re[0].Replayed || re[0].Job.ID != ids[0] || re[0].Job.State != store.JobStateSucceeded {
		t.Fatalf("repeated create of the finished job: %+v, %v", re, err)
	}

	// Listing by state finds the moved jobs.
	page, err := s.ListJobs(ctx, store.ListJobsParams{Tenant: tenant,
		States: []store.JobState{store.JobStateSucceeded, store.JobStateFailed, store.JobStateCancelled, store.JobStateDead}})
	if err != nil || len(page.Jobs) != 4 {
		t.Fatalf("listed %d finished jobs (%v), want 4", len(page.Jobs), err)
	}

	// A replayed dead job links both ways, the dead one updated in place.
	replay, _, err := s.ReplayDeadJob(ctx, store.ReplayDeadJobParams{Tenant: tenant, JobID: ids[2], Now: done.Add(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	dead, err := s.GetDeadJob(ctx, tenant, ids[2])
	if err != nil || dead.ReplayedAs != replay.ID || replay.ReplayOf != ids[2] || partitionOf(t, s, tenant, ids[2]) != "jobs_dead" {
		t.Fatalf("replay links: dead %+v, replay %+v, %v", dead, replay, err)
	}

	// A lookup by id reads one partition of jobs_done.
	var plan []string
	rows, err := postgres.Pool(s).Query(ctx, fmt.Sprintf(`EXPLAIN (COSTS OFF) SELECT * FROM jobs WHERE tenant = '%s' AND id = '%s'`, tenant, ids[0]))
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	text := strings.Join(plan, "\n")
	if strings.Contains(text, "jobs_done_default") || strings.Count(text, "on jobs_done_") != 1 {
		t.Fatalf("a lookup by id reads more than its day of jobs_done:\n%s", text)
	}
}

// TestMaintainPartitions: a pass creates the days ahead, drops a day whose
// jobs all finished before the cutoff with the rows hanging off them, and
// keeps a day holding one recent finish; a second coordinator's pass waits
// for nobody (Skipped). LEASEHOLD_DROP_JOBS sets the size of the dropped
// day (20,000 by default; 10,000,000 for the measurement in docs/storage.md).
func TestMaintainPartitions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t, migrated(t), store.EngineOptions{})
	pool := postgres.Pool(s)
	n := 20_000
	if v := os.Getenv("LEASEHOLD_DROP_JOBS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC()
	old := store.DonePartitionOf(now.AddDate(0, 0, -30))
	kept := store.DonePartitionOf(now.AddDate(0, 0, -29))
	for _, p := range []store.DonePartition{old, kept} {
		// Autovacuum, which a day this size starts at once, would hold the
		// lock the detach waits 200 ms for; a real pass retries next time.
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF jobs_done FOR VALUES FROM ('%s') TO ('%s')
			WITH (autovacuum_enabled = false)`, p.Name(), p.From(), p.To())); err != nil {
			t.Fatal(err)
		}
	}
	// Finished jobs with ids of the partition's day; one event and one
	// checkpoint hang off the first of each.
	fill := func(p store.DonePartition, rows int, finished time.Time) {
		t.Helper()
		if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, created_at, available_at, finished_at)
			SELECT 't', $1 || '-7000-8000-' || lpad(to_hex(g), 12, '0'), 'q', 'k', 'succeeded', 1, $2, $2, $3
			FROM generate_series(1, $4) g`, p.From(), p.Day, finished, rows); err != nil {
			t.Fatal(err)
		}
		first := p.From() + "-7000-8000-000000000001"
		if _, err := pool.Exec(ctx, `INSERT INTO job_events (tenant, job_id, seq, type, at) VALUES ('t', $1, 2, 'checkpoint_saved', $2)`, first, finished); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO job_checkpoints (tenant, id, job_id, phase, generation, created_at) VALUES ('t', $1, $1, 'p', 1, $2)`, first, finished); err != nil {
			t.Fatal(err)
		}
	}
	fill(old, n, old.Day.Add(time.Hour))
	fill(kept, 10, kept.Day.Add(time.Hour))
	// One job of the kept day finished an hour ago.
	if _, err := pool.Exec(ctx, `INSERT INTO jobs (tenant, id, queue, kind, state, max_attempts, created_at, available_at, finished_at)
		VALUES ('t', $1, 'q', 'k', 'failed', 1, $2, $2, $3)`, kept.From()+"-7000-8000-ffffffffffff", kept.Day, now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `ANALYZE jobs_done`); err != nil {
		t.Fatal(err)
	}
	// What vacuum does to the BRIN in production: summarize the filled
	// ranges, which the check for a recent finish reads.
	if _, err := pool.Exec(ctx, `SELECT brin_summarize_new_values(indexrelid::regclass) FROM pg_index
		WHERE indrelid IN ($1::regclass, $2::regclass) AND indexrelid::regclass::text LIKE '%finished_at%'`, old.Name(), kept.Name()); err != nil {
		t.Fatal(err)
	}

	// Another coordinator holds the maintenance: this pass does nothing.
	other, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(hashtext(current_schema() || '.leasehold_partitions'))`); err != nil {
		t.Fatal(err)
	}
	res, err := s.MaintainPartitions(ctx, store.MaintainPartitionsParams{FinishedBefore: now.AddDate(0, 0, -7), Now: now})
	if err != nil || !res.Skipped || res.Dropped != 0 {
		t.Fatalf("pass while another holds the lock: %+v, %v", res, err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock(hashtext(current_schema() || '.leasehold_partitions'))`); err != nil {
		t.Fatal(err)
	}
	other.Release()

	start := time.Now()
	res, err = s.MaintainPartitions(ctx, store.MaintainPartitionsParams{FinishedBefore: now.AddDate(0, 0, -7), Now: now, AheadDays: 5})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("maintenance pass dropping %d finished jobs took %s (%+v)", n, took, res)
	if res.Skipped || res.Dropped != 1 || res.SweptRows != 2 {
		t.Fatalf("pass: %+v; want one partition dropped and its 2 hanging rows swept", res)
	}
	var parts []string
	rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'jobs_done'::regclass ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		parts = append(parts, p)
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	has := func(name string) bool {
		for _, p := range parts {
			if p == name {
				return true
			}
		}
		return false
	}
	if has(old.Name()) || !has(kept.Name()) || !has("jobs_done_default") {
		t.Fatalf("partitions after the pass: %v; want %s dropped, %s and the default kept", parts, old.Name(), kept.Name())
	}
	for d := range 6 {
		if p := store.DonePartitionOf(now.AddDate(0, 0, d)); !has(p.Name()) {
			t.Fatalf("partitions after the pass: %v; want %s created ahead", parts, p.Name())
		}
	}
	if _, err := s.GetJob(ctx, "t", old.From()+"-7000-8000-000000000001"); err == nil {
		t.Fatal("a job of the dropped day is still found")
	}
	if _, err := s.GetJob(ctx, "t", kept.From()+"-7000-8000-000000000001"); err != nil {
		t.Fatalf("a job of the kept day: %v", err)
	}
	var events, checkpoints int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM job_events), (SELECT count(*) FROM job_checkpoints)`).Scan(&events, &checkpoints); err != nil {
		t.Fatal(err)
	}
	if events != 1 || checkpoints != 1 {
		t.Fatalf("%d events and %d checkpoints left, want the kept day's 1 and 1", events, checkpoints)
	}
}
