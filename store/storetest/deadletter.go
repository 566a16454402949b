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
		{"a job whose leases keep expiring ends DEAD when its last lease expires", testCrashLoopDeadLetters},
		{"the reaper dead-letters spent expired leases and requeues the others for the next claim", testClaimFillsPastDeadLetters},
		{"a lease that expires past the retry deadline ends the job DEAD", testCrashLoopRetryDeadline},
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

// errLeaseExpired is the last error of a job a claim dead-lettered.
var errLeaseExpired = store.JobError{Code: store.ErrorCodeLeaseExpired, Message: store.ErrorMessageLeaseExpired, Retryable: true}

// wantLeaseExpiredDead checks a job a claim at now dead-lettered after its
// lease of generation gen, held by worker, expired with no report: DEAD,
// lease cleared, LEASE_EXPIRED as its last error, its history ending in
// LEASE_EXPIRED, RUN_FAILED and DEAD (the only terminal event) at now, and
// its last attempt closed as lease_expired. It returns the events.
func (e *env) wantLeaseExpiredDead(jobID, worker string, gen int64, attempts, maxAttempts int32, reason string, now time.Time) []store.Event {
	t := e.t
	t.Helper()
	got := e.get(tenantA, jobID)
	if got.State != store.JobStateDead || got.Attempts != attempts || got.MaxAttempts != maxAttempts ||
		got.LeaseGeneration != gen || got.LeaseOwner != worker || !got.LeaseExpiresAt.IsZero() {
		t.Fatalf("dead-lettered job is %s, attempts %d/%d, generation %d, owner %q, lease expiry %v; want dead, %d/%d, %d, %q, none",
			got.State, got.Attempts, got.MaxAttempts, got.LeaseGeneration, got.LeaseOwner, got.LeaseExpiresAt, attempts, maxAttempts, gen, worker)
	}
	wantTime(t, "finished_at", got.FinishedAt, now)
	if got.LastError == nil || *got.LastError != errLeaseExpired {
		t.Errorf("last error %+v, want %+v", got.LastError, errLeaseExpired)
	}
	evs := e.events(tenantA, jobID)
	if n := terminalEvents(evs); n != 1 {
		t.Fatalf("%d terminal events, want exactly one: %v", n, eventTypes(evs))
	}
	n := len(evs)
	if n < 4 || evs[n-3].Type != store.EventLeaseExpired || evs[n-2].Type != store.EventRunFailed || evs[n-1].Type != store.EventDead {
		t.Fatalf("events %v, want them to end with lease_expired, run_failed, dead", eventTypes(evs))
	}
	holder := map[string]any{"worker_id": worker, "lease_generation": float64(gen)}
	wantData(t, evs[n-3], holder)
	wantData(t, evs[n-2], map[string]any{
		"worker_id": worker, "lease_generation": float64(gen), "attempt": float64(attempts),
		"error_code": errLeaseExpired.Code, "error_message": errLeaseExpired.Message, "retryable": true,
	})
	wantData(t, evs[n-1], map[string]any{"reason": reason, "attempts": float64(attempts), "max_attempts": float64(maxAttempts)})
	for _, ev := range evs[n-3:] {
		wantTime(t, string(ev.Type)+" event time", ev.Time, now)
	}
	as := e.attempts(tenantA, jobID)
	if len(as) != int(attempts) {
		t.Fatalf("%d attempt rows, want %d: %+v", len(as), attempts, as)
	}
	last := as[len(as)-1]
	if last.LeaseGeneration != gen || last.WorkerID != worker || last.Outcome != store.AttemptLeaseExpired {
		t.Errorf("last attempt %+v, want generation %d of %s ended lease_expired", last, gen, worker)
	}
	wantTime(t, "last attempt's finished_at", last.FinishedAt, now)
	return evs
}

// listDead returns the ids of the tenant's dead jobs in queue.
func (e *env) listDead(tenant, queue string) []string {
	e.t.Helper()
	page, err := e.s.ListDeadJobs(e.ctx, store.ListDeadJobsParams{Tenant: tenant, Queue: queue, Limit: 100})
	if err != nil {
		e.t.Fatalf("list dead jobs of %q: %v", queue, err)
	}
	var ids []string
	for _, dj := range page.DeadJobs {
		ids = append(ids, dj.Job.ID)
	}
	return ids
}

// testCrashLoopDeadLetters is the poison pill: a job whose worker crashes
// every time never reports, so no Retry ever spends its budget. The reaper
// that finds its last lease expired must dead-letter it instead of
// queueing it again, or it would be claimed forever.
func testCrashLoopDeadLetters(t *testing.T, h Harness) {
	e := setup(t, h)
	sp := spec("poison")
	sp.MaxAttempts = 2
	j := e.mustCreate(tenantA, sp, base)
	a := e.mustClaim(tenantA, workerA, "poison", j.ID, at(time.Second)) // expires at 31s
	e.reap(at(40 * time.Second))
	b := e.mustClaim(tenantA, workerB, "poison", j.ID, at(40*time.Second)) // expires at 70s
	if b.Token.Generation != 2 || b.Job.Attempts != 2 {
		t.Fatalf("the takeover with budget left: generation %d, attempts %d; want 2, 2", b.Token.Generation, b.Job.Attempts)
	}

	// While the last lease runs, its holder may still report.
	e.claimNothing(tenantA, "poison", at(69*time.Second), "the second lease runs until 70s")
	// Another tenant's claim on a queue of the same name never touches it.
	if got := e.claim(tenantB, workerC, "poison", 10, lease, at(70*time.Second)); len(got) != 0 {
		t.Fatalf("tenant B claimed %d jobs from its empty queue", len(got))
	}
	if got := e.get(tenantA, j.ID); got.State != store.JobStateLeased || got.LeaseGeneration != 2 {
		t.Fatalf("before tenant A's next claim the job is %s at generation %d, want leased at 2", got.State, got.LeaseGeneration)
	}

	// Both attempts are spent: the reaper at the second expiry ends the job.
	if r := e.reap(at(70 * time.Second)); len(r.Jobs) != 1 || r.Jobs[0].State != store.JobStateDead || len(r.Requeued) != 0 {
		t.Fatalf("reap at the second expiry: %+v, want the job dead", r)
	}
	if got := e.claim(tenantA, workerC, "poison", 10, lease, at(70*time.Second)); len(got) != 0 {
		t.Fatalf("a job with attempts 2 of 2 and an expired lease was claimed again: generation %d, attempts %d", got[0].Token.Generation, got[0].Job.Attempts)
	}
	evs := e.wantLeaseExpiredDead(j.ID, workerB, 2, 2, 2, "attempts exhausted", at(70*time.Second))
	wantEvents(t, evs, store.EventQueued,
		store.EventLeased, store.EventLeaseExpired,
		store.EventLeased, store.EventLeaseExpired, store.EventRunFailed, store.EventDead)
	if as := e.attempts(tenantA, j.ID); as[0].Outcome != store.AttemptLeaseExpired || as[0].WorkerID != workerA {
		t.Errorf("first attempt %+v, want A's, ended lease_expired", as[0])
	}

	// It is in the dead-letter queue with its evidence.
	if ids := e.listDead(tenantA, "poison"); !slices.Equal(ids, []string{j.ID}) {
		t.Fatalf("dead jobs of poison: %v, want [%s]", ids, j.ID)
	}
	dj, err := e.s.GetDeadJob(e.ctx, tenantA, j.ID)
	if err != nil || len(dj.Attempts) != 2 || dj.Job.LastError == nil || dj.Job.LastError.Code != store.ErrorCodeLeaseExpired {
		t.Fatalf("dead job evidence: %+v, %v", dj, err)
	}

	// The crashed holders are fenced, and nothing brings the job back.
	wantAllLost(t, "A after the job died", e.leaseBoundCalls(e.s, tenantA, a.Token, at(71*time.Second)))
	wantAllLost(t, "B after the job died", e.leaseBoundCalls(e.s, tenantA, b.Token, at(71*time.Second)))
	e.claimNothing(tenantA, "poison", at(24*time.Hour), "the job is dead")
	if after := e.events(tenantA, j.ID); len(after) != len(evs) {
		t.Fatalf("calls after the job died added events: %v", eventTypes(after))
	}
	if got := e.get(tenantA, j.ID); got.State != store.JobStateDead || got.Attempts != 2 {
		t.Fatalf("after the fenced reports the job is %s with %d attempts", got.State, got.Attempts)
	}
}

func testClaimFillsPastDeadLetters(t *testing.T, h Harness) {
	e := setup(t, h)
	poison := spec("mixed")
	poison.MaxAttempts = 1
	poison.Priority = 9
	p := e.mustCreate(tenantA, poison, base)
	healthy := spec("mixed")
	healthy.MaxAttempts = 3
	healthy.Priority = 5
	hj := e.mustCreate(tenantA, healthy, base)
	side := spec("side")
	side.MaxAttempts = 1
	sj := e.mustCreate(tenantA, side, base)
	if got := e.claim(tenantA, workerA, "mixed", 2, lease, at(time.Second)); len(got) != 2 {
		t.Fatalf("first claim from mixed returned %d jobs, want 2", len(got))
	}
	e.mustClaim(tenantA, workerA, "side", sj.ID, at(time.Second))
	other := e.mustCreate(tenantA, spec("mixed"), at(2*time.Second))

	// At 40s every lease has expired. The reaper ends the poison jobs
	// (budget spent) and requeues the healthy one; the claim's two slots go
	// to it and to the queued job.
	r := e.reap(at(40 * time.Second))
	if len(r.Jobs) != 3 || !slices.Equal(r.Requeued, []store.QueueRef{{Tenant: tenantA, Queue: "mixed"}}) {
		t.Fatalf("reap at 40s: %d jobs, requeued %v; want 3 jobs and mixed requeued", len(r.Jobs), r.Requeued)
	}
	got, err := e.s.Claim(e.ctx, store.ClaimParams{
		Tenant: tenantA, Worker: workerB, Queues: []string{"mixed", "side"}, Max: 2, LeaseDuration: lease, Now: at(40 * time.Second),
	})
	if err != nil {
		t.Fatalf("claim from mixed and side: %v", err)
	}
	ids := make([]string, len(got))
	for i, c := range got {
		ids[i] = c.Job.ID
	}
	if want := []string{hj.ID, other.ID}; !slices.Equal(ids, want) {
		t.Fatalf("claim returned %v, want the requeued healthy job then the queued job %v (poison jobs %s, %s)", ids, want, p.ID, sj.ID)
	}
	if got[0].Token.Generation != 2 || got[0].Job.Attempts != 2 {
		t.Errorf("healthy job's second lease: generation %d, attempts %d; want 2, 2", got[0].Token.Generation, got[0].Job.Attempts)
	}
	wantEvents(t, e.events(tenantA, hj.ID), store.EventQueued, store.EventLeased, store.EventLeaseExpired, store.EventLeased)
	for _, id := range []string{p.ID, sj.ID} {
		wantEvents(t, e.wantLeaseExpiredDead(id, workerA, 1, 1, 1, "attempts exhausted", at(40*time.Second)),
			store.EventQueued, store.EventLeased, store.EventLeaseExpired, store.EventRunFailed, store.EventDead)
	}
	if ids := e.listDead(tenantA, ""); len(ids) != 2 || !slices.Contains(ids, p.ID) || !slices.Contains(ids, sj.ID) {
		t.Fatalf("dead jobs %v, want %s and %s", ids, p.ID, sj.ID)
	}
}

func testCrashLoopRetryDeadline(t *testing.T, h Harness) {
	e := setup(t, h)
	e.setPolicy(tenantA, store.QueuePolicy{Queue: "q", Retry: store.RetryPolicy{MaxAttempts: 100, TotalRetryDeadline: time.Minute}})
	j := e.mustCreate(tenantA, spec("q"), base)
	wantTime(t, "retry deadline", j.RetryDeadline, at(time.Minute))
	e.mustClaim(tenantA, workerA, "q", j.ID, at(time.Second)) // expires at 31s
	// An attempt may still start at the deadline itself, as after a Retry
	// (the next run must not be after it).
	e.reap(at(time.Minute))
	b := e.mustClaim(tenantA, workerB, "q", j.ID, at(time.Minute)) // expires at 90s
	if b.Token.Generation != 2 {
		t.Fatalf("the takeover at the deadline: generation %d, want 2", b.Token.Generation)
	}
	// Its lease expires past the deadline: the job ends with 98 attempts
	// unspent.
	e.reap(at(90 * time.Second))
	e.claimNothing(tenantA, "q", at(90*time.Second), "the retry deadline has passed")
	e.wantLeaseExpiredDead(j.ID, workerB, 2, 2, 100, "retry deadline exceeded", at(90*time.Second))
	if ids := e.listDead(tenantA, "q"); !slices.Equal(ids, []string{j.ID}) {
		t.Fatalf("dead jobs of q: %v, want [%s]", ids, j.ID)
	}
	e.claimNothing(tenantA, "q", at(24*time.Hour), "the job is dead")
}
