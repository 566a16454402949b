package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// deadLetterTests cover the dead-letter queue: dead work keeps its evidence,
// is replayed under a new identity (idempotently), or abandoned.
func deadLetterTests() group {
	return group{name: "DeadLetter", cases: []testCase{
		{"a dead job keeps its evidence", testDeadJobEvidence},
		{"replaying a dead job makes a new job and keeps the dead one", testReplayDeadJob},
		{"replaying twice returns the same new job", testReplayTwice},
		{"abandon and replay exclude each other", testAbandonReplayExclusive},
		{"dead-letter operations refuse a job that is not dead", testDeadLetterNotDead},
		{"listing dead jobs pages newest first and hides abandoned ones unless asked", testListDeadJobs},
	}}
}

func testDeadJobEvidence(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := spec("dlq")
	sp.MaxAttempts = 2
	sp.Metadata = map[string]string{"customer": "42"}
	j := e.mustCreate(tenantA, sp, base)
	c := e.mustClaim(tenantA, workerA, "dlq", j.ID, at(time.Second))
	r := e.retry(tenantA, c.Token, store.JobError{Code: "timeout", Message: "first", Retryable: true}, 0, at(2*time.Second))
	c = e.mustClaim(tenantA, workerB, "dlq", j.ID, r.AvailableAt)
	e.retry(tenantA, c.Token, store.JobError{Code: "timeout", Message: "second", Retryable: true}, 0, r.AvailableAt.Add(time.Second))

	dj, err := e.s.GetDeadJob(e.ctx, tenantA, j.ID)
	if err != nil {
		t.Fatalf("get dead job: %v", err)
	}
	if dj.Job.State != store.JobStateDead || string(dj.Job.Payload) != string(sp.Payload) || dj.Job.Metadata["customer"] != "42" || dj.Job.Attempts != 2 {
		t.Fatalf("dead job %+v does not keep its payload, metadata and attempts", dj.Job)
	}
	if dj.Job.LastError == nil || dj.Job.LastError.Message != "second" {
		t.Fatalf("dead job's last error %+v, want the second failure", dj.Job.LastError)
	}
	if len(dj.Attempts) != 2 || dj.Attempts[0].WorkerID != workerA || dj.Attempts[1].WorkerID != workerB ||
		dj.Attempts[0].Error == nil || dj.Attempts[0].Error.Message != "first" || dj.Attempts[1].Outcome != store.AttemptFailed {
		t.Fatalf("dead job's attempt history %+v", dj.Attempts)
	}
	if dj.ReplayedAs != "" || dj.Abandoned {
		t.Fatalf("a fresh dead job is replayed %q, abandoned %v", dj.ReplayedAs, dj.Abandoned)
	}
	_, err = e.s.GetDeadJob(e.ctx, tenantA, freshID())
	wantErr(t, err, store.ErrNotFound, "get a dead job that does not exist")
}

func testReplayDeadJob(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := spec("dlq")
	sp.MaxAttempts = 1
	sp.Priority = 9
	sp.Metadata = map[string]string{"k": "v"}
	dead := e.mustCreate(tenantA, sp, base)
	c := e.mustClaim(tenantA, workerA, "dlq", dead.ID, at(time.Second))
	e.retry(tenantA, c.Token, errTransient, 0, at(2*time.Second))
	deadEvents := e.events(tenantA, dead.ID)

	nj, already, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: dead.ID, Reason: "fixed upstream", Now: at(time.Hour)})
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if already {
		t.Fatal("a first replay reported alreadyReplayed")
	}
	if nj.ID == dead.ID || nj.ReplayOf != dead.ID || nj.State != store.JobStateQueued || nj.Attempts != 0 || nj.LeaseGeneration != 0 {
		t.Fatalf("replayed job %+v, want a new queued job with replay_of %s and no attempts", nj, dead.ID)
	}
	if nj.Queue != sp.Queue || nj.Kind != sp.Kind || string(nj.Payload) != string(sp.Payload) || !maps.Equal(nj.Metadata, sp.Metadata) ||
		nj.Priority != 9 || nj.MaxAttempts != 1 || nj.Tenant != tenantA {
		t.Fatalf("replayed job %+v does not copy the dead job's spec", nj)
	}
	wantTime(t, "replayed job's available_at", nj.AvailableAt, at(time.Hour))
	wantEvents(t, e.events(tenantA, nj.ID), store.EventQueued)

	// The dead job stays dead, as evidence, with an audit event.
	old := e.get(tenantA, dead.ID)
	if old.State != store.JobStateDead {
		t.Fatalf("the replayed dead job is now %s", old.State)
	}
	evs := e.events(tenantA, dead.ID)
	if len(evs) != len(deadEvents)+1 || evs[len(evs)-1].Type != store.EventReplayed || terminalEvents(evs) != 1 {
		t.Fatalf("dead job's events after replay %v, want the old ones plus replayed", eventTypes(evs))
	}
	dj, err := e.s.GetDeadJob(e.ctx, tenantA, dead.ID)
	if err != nil || dj.ReplayedAs != nj.ID {
		t.Fatalf("dead job after replay: %+v, %v; want replayed as %s", dj, err, nj.ID)
	}
	// The new job runs like any other.
	c = e.mustClaim(tenantA, workerA, "dlq", nj.ID, at(time.Hour+time.Second))
	if c.Token.Generation != 1 || c.Job.Attempts != 1 {
		t.Fatalf("replayed job's first claim: generation %d, attempts %d", c.Token.Generation, c.Job.Attempts)
	}
	e.complete(tenantA, c.Token, at(time.Hour+2*time.Second))
}

func testReplayTwice(t *testing.T, h Harness) {
	e := setup(t, h)
	dead := e.deadJob(tenantA, "dlq", base)
	first, already, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: dead.ID, Now: at(time.Minute)})
	if err != nil || already {
		t.Fatalf("first replay: %v, already %v", err, already)
	}
	n := len(e.events(tenantA, dead.ID))
	second, already, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: dead.ID, Now: at(2 * time.Minute)})
	if err != nil || !already || second.ID != first.ID {
		t.Fatalf("second replay: %+v, already %v, %v; want job %s with alreadyReplayed", second, already, err, first.ID)
	}
	if got := len(e.events(tenantA, dead.ID)); got != n {
		t.Fatalf("a second replay added %d events to the dead job", got-n)
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Queue: "dlq", Limit: 100}); len(jobs) != 2 {
		t.Fatalf("%d jobs after two replays, want the dead one and one replay", len(jobs))
	}
}

func testAbandonReplayExclusive(t *testing.T, h Harness) {
	e := setup(t, h)
	replayed := e.deadJob(tenantA, "dlq", base)
	if _, _, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: replayed.ID, Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	_, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: replayed.ID, Reason: "too late", Now: at(2 * time.Minute)})
	wantErr(t, err, store.ErrAlreadyReplayed, "abandon after replay")

	abandoned := e.deadJob(tenantA, "dlq2", base)
	dj, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: abandoned.ID, Reason: "obsolete", Now: at(time.Minute)})
	if err != nil || !dj.Abandoned || dj.Job.State != store.JobStateDead {
		t.Fatalf("abandon: %+v, %v; want an abandoned dead job", dj, err)
	}
	evs := e.events(tenantA, abandoned.ID)
	if evs[len(evs)-1].Type != store.EventAbandoned || terminalEvents(evs) != 1 {
		t.Fatalf("events after abandon %v", eventTypes(evs))
	}
	// Abandoning again is a no-op.
	dj, err = e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: abandoned.ID, Now: at(2 * time.Minute)})
	if err != nil || !dj.Abandoned {
		t.Fatalf("second abandon: %+v, %v", dj, err)
	}
	if got := e.events(tenantA, abandoned.ID); len(got) != len(evs) {
		t.Fatalf("a second abandon added events: %v", eventTypes(got))
	}
	_, _, err = e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: abandoned.ID, Now: at(3 * time.Minute)})
	wantErr(t, err, store.ErrAbandoned, "replay after abandon")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Queue: "dlq2", Limit: 10}); len(jobs) != 1 {
		t.Fatalf("replay of an abandoned job created a job: %d jobs in its queue", len(jobs))
	}
}

func testDeadLetterNotDead(t *testing.T, h Harness) {
	e := setup(t, h)
	queued := e.mustCreate(tenantA, spec("q"), base)
	leasedJob := e.mustCreate(tenantA, spec("q2"), base)
	e.mustClaim(tenantA, workerA, "q2", leasedJob.ID, at(time.Second))
	done := e.mustCreate(tenantA, spec("q3"), base)
	c := e.mustClaim(tenantA, workerA, "q3", done.ID, at(time.Second))
	e.complete(tenantA, c.Token, at(2*time.Second))
	for _, id := range []string{queued.ID, leasedJob.ID, done.ID} {
		before := e.get(tenantA, id)
		n := len(e.events(tenantA, id))
		_, err := e.s.GetDeadJob(e.ctx, tenantA, id)
		wantErr(t, err, store.ErrNotDead, "get dead job of a "+string(before.State)+" job")
		_, _, err = e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: id, Now: at(time.Minute)})
		wantErr(t, err, store.ErrNotDead, "replay a "+string(before.State)+" job")
		_, err = e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: id, Now: at(time.Minute)})
		wantErr(t, err, store.ErrNotDead, "abandon a "+string(before.State)+" job")
		if after := e.get(tenantA, id); after.State != before.State || len(e.events(tenantA, id)) != n {
			t.Fatalf("refused dead-letter calls changed a %s job", before.State)
		}
	}
	missing := freshID()
	_, _, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: missing, Now: at(time.Minute)})
	wantErr(t, err, store.ErrNotFound, "replay a job that does not exist")
	_, err = e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: missing, Now: at(time.Minute)})
	wantErr(t, err, store.ErrNotFound, "abandon a job that does not exist")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 3 {
		t.Fatalf("refused replays created jobs: %d jobs", len(jobs))
	}
}

func testListDeadJobs(t *testing.T, h Harness) {
	e := setup(t, h)
	var dead []*store.Job
	for i := range 5 {
		queue := "dlq"
		if i == 4 {
			queue = "other"
		}
		dead = append(dead, e.deadJob(tenantA, queue, at(time.Duration(i)*time.Minute)))
	}
	e.mustCreate(tenantA, spec("dlq"), base) // not dead: never listed
	if _, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: dead[1].ID, Now: at(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	list := func(p store.ListDeadJobsParams) []*store.DeadJob {
		t.Helper()
		p.Tenant = tenantA
		var out []*store.DeadJob
		for range 100 {
			page, err := e.s.ListDeadJobs(e.ctx, p)
			if err != nil {
				t.Fatalf("list dead jobs: %v", err)
			}
			out = append(out, page.DeadJobs...)
			if page.NextCursor == "" {
				return out
			}
			p.Cursor = page.NextCursor
		}
		t.Fatal("ListDeadJobs cursor never ends")
		return nil
	}
	ids := func(djs []*store.DeadJob) []string {
		out := make([]string, len(djs))
		for i, dj := range djs {
			out[i] = dj.Job.ID
		}
		return out
	}
	// Newest first (finished_at desc), abandoned hidden.
	got := ids(list(store.ListDeadJobsParams{Limit: 2}))
	want := []string{dead[4].ID, dead[3].ID, dead[2].ID, dead[0].ID}
	if !slices.Equal(got, want) {
		t.Fatalf("dead jobs %v, want %v (newest first, abandoned hidden)", got, want)
	}
	got = ids(list(store.ListDeadJobsParams{Limit: 3, IncludeAbandoned: true}))
	want = []string{dead[4].ID, dead[3].ID, dead[2].ID, dead[1].ID, dead[0].ID}
	if !slices.Equal(got, want) {
		t.Fatalf("dead jobs with abandoned %v, want %v", got, want)
	}
	got = ids(list(store.ListDeadJobsParams{Queue: "other", Limit: 10}))
	if !slices.Equal(got, []string{dead[4].ID}) {
		t.Fatalf("dead jobs of queue other: %v", got)
	}
	for _, dj := range list(store.ListDeadJobsParams{Limit: 10, IncludeAbandoned: true}) {
		if dj.Job.State != store.JobStateDead || len(dj.Attempts) != 1 || dj.Abandoned != (dj.Job.ID == dead[1].ID) {
			t.Fatalf("listed dead job %+v", dj)
		}
	}
}
