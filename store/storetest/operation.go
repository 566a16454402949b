package storetest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// operationTests cover bulk operations: the frozen match, each kind's
// per-row rules, the results counted, the lease, and a resume that acts
// once.
func operationTests() group {
	return group{name: "Operations", cases: []testCase{
		{"a replay by filter replays each matched dead job once and never a job created after it started", testOperationReplayFrozenMatch},
		{"a cancel applies CancelJob's rules to each job", testOperationCancelRules},
		{"retry, priority, abandon and delete apply their rules to each job", testOperationOtherKinds},
		{"a job that changed since the start is skipped as changed", testOperationChangedSince},
		{"jobs outside the starter's queue scope are skipped out of scope", testOperationOutOfScope},
		{"a chunk that fails to commit is redone by the next holder and acts once", testOperationResumeActsOnce},
		{"a holder whose lease was taken over can no longer run a chunk", testOperationLeaseLost},
		{"a tenant runs at most Limit operations at once", testOperationLimit},
		{"a cancelled operation stops at its next chunk and finished ones are pruned", testOperationCancelAndPrune},
		{"a filter that names only states the kind does not act on is refused", testOperationFilterStates},
	}}
}

const opLease = 30 * time.Second

func (e *env) startOp(p store.StartOperationParams) *store.Operation {
	e.t.Helper()
	if p.Tenant == "" {
		p.Tenant = tenantA
	}
	f, err := store.ParseJobFilter(p.FilterText)
	if err != nil {
		e.t.Fatalf("parse filter %q: %v", p.FilterText, err)
	}
	p.Filter = f
	op, err := e.s.StartOperation(e.ctx, p)
	if err != nil {
		e.t.Fatalf("start %s operation: %v", p.Kind, err)
	}
	return op
}

// runOp claims op as owner at now and runs chunks of n until it is done.
func (e *env) runOp(op *store.Operation, owner string, n int, now time.Time) *store.Operation {
	e.t.Helper()
	claimed, err := e.s.ClaimOperation(e.ctx, store.ClaimOperationParams{Owner: owner, LeaseTTL: opLease, Now: now})
	if err != nil || claimed == nil || claimed.ID != op.ID {
		e.t.Fatalf("claim operation %s: %+v, %v", op.ID, claimed, err)
	}
	for range 100 {
		res, err := e.s.RunOperationChunk(e.ctx, store.RunChunkParams{Tenant: op.Tenant, ID: op.ID, Owner: owner, LeaseTTL: opLease, Limit: n, Now: now})
		if err != nil {
			e.t.Fatalf("run chunk of %s: %v", op.ID, err)
		}
		if res.Finished {
			return res.Operation
		}
	}
	e.t.Fatalf("operation %s did not finish in 100 chunks", op.ID)
	return nil
}

func wantCounts(t *testing.T, op *store.Operation, want store.OperationCounts, state store.OperationState) {
	t.Helper()
	if op.Counts != want || op.State != state || op.FinishedAt.IsZero() != (state == store.OperationRunning) {
		t.Fatalf("operation %s is %s with counts %+v (finished %v), want %s with %+v", op.ID, op.State, op.Counts, op.FinishedAt, state, want)
	}
}

// replays counts the jobs of tenantA in queue that replay dead.
func (e *env) replaysOf(queue, deadID string) int {
	e.t.Helper()
	page, err := e.s.ListJobs(e.ctx, store.ListJobsParams{Tenant: tenantA, Queue: queue, Limit: 500})
	if err != nil {
		e.t.Fatalf("list jobs: %v", err)
	}
	n := 0
	for _, j := range page.Jobs {
		if j.ReplayOf == deadID {
			n++
		}
	}
	return n
}

func testOperationReplayFrozenMatch(t *testing.T, h Harness) {
	e := setup(t, h)
	var dead []*store.Job
	for i := range 5 {
		dead = append(dead, e.deadJob(tenantA, "poisoned", at(time.Duration(i)*time.Minute)))
	}
	other := e.deadJob(tenantA, "other", at(0))
	op := e.startOp(store.StartOperationParams{Kind: store.OperationReplay, FilterText: "queue = poisoned", Reason: "upstream fixed", Actor: "ops@example", Now: at(time.Hour)})
	if op.State != store.OperationRunning || op.Counts.Matched != 5 || op.Kind != store.OperationReplay || op.Actor != "ops@example" {
		t.Fatalf("started operation %+v, want running with 5 matched", op)
	}
	late := e.deadJob(tenantA, "poisoned", at(time.Hour+time.Minute)) // after the start: not in the match
	done := e.runOp(op, "coordinator-1", 2, at(2*time.Hour))
	wantCounts(t, done, store.OperationCounts{Matched: 5, Acted: 5}, store.OperationSucceeded)
	for _, d := range dead {
		if n := e.replaysOf("poisoned", d.ID); n != 1 {
			t.Errorf("dead job %s has %d replays, want 1", d.ID, n)
		}
		dj, err := e.s.GetDeadJob(e.ctx, tenantA, d.ID)
		if err != nil || dj.ReplayedAs == "" {
			t.Errorf("dead job %s after the replay: %+v, %v", d.ID, dj, err)
		}
		evs := e.events(tenantA, d.ID)
		checkGapless(t, d.ID, evs)
		if last := evs[len(evs)-1]; last.Type != store.EventReplayed {
			t.Errorf("dead job %s's last event is %s, want replayed", d.ID, last.Type)
		} else if dj != nil {
			checkReplayEvents(t, op.ID, d.ID, dj.ReplayedAs, last, e.events(tenantA, dj.ReplayedAs))
		}
	}
	if n := e.replaysOf("poisoned", late.ID); n != 0 {
		t.Errorf("a job that died after the operation started was replayed %d times", n)
	}
	if n := e.replaysOf("other", other.ID); n != 0 {
		t.Errorf("a dead job of another queue was replayed %d times", n)
	}
	got, err := e.s.GetOperation(e.ctx, tenantA, op.ID)
	if err != nil || got.State != store.OperationSucceeded {
		t.Fatalf("get operation: %+v, %v", got, err)
	}
	_, err = e.s.GetOperation(e.ctx, tenantB, op.ID)
	wantErr(t, err, store.ErrNotFound, "get another tenant's operation")
}

// checkReplayEvents checks the history an operation's replay leaves, as
// ReplayDeadJob leaves it: the dead job's REPLAYED event names the new job,
// and the new job's history is one QUEUED event naming the dead one, both
// with the replay key of the operation and the dead job.
func checkReplayEvents(t *testing.T, opID, deadID, newID string, replayed store.Event, fresh []store.Event) {
	t.Helper()
	key := store.OperationReplayKey(opID, deadID)
	data := func(ev store.Event) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			t.Fatalf("event %d of %s: data %q: %v", ev.Sequence, ev.JobID, ev.Data, err)
		}
		return m
	}
	if d := data(replayed); d["replayed_as"] != newID || d["replay_key"] != key || d["operation"] != opID {
		t.Errorf("dead job %s's REPLAYED event data %v, want replayed_as %s, replay_key %s, operation %s", deadID, d, newID, key, opID)
	}
	if len(fresh) != 1 || fresh[0].Type != store.EventQueued {
		t.Fatalf("replay %s of %s has events %+v, want one QUEUED", newID, deadID, fresh)
	}
	if d := data(fresh[0]); d["replay_of"] != deadID || d["replay_key"] != key || d["operation"] != opID {
		t.Errorf("replay %s's QUEUED event data %v, want replay_of %s, replay_key %s, operation %s", newID, d, deadID, key, opID)
	}
}

func testOperationCancelRules(t *testing.T, h Harness) {
	e := setup(t, h)
	b := e.mustCreate(tenantA, spec("bulk"), at(0))
	e.mustClaim(tenantA, workerA, "bulk", b.ID, at(time.Second))
	a := e.mustCreate(tenantA, spec("bulk"), at(time.Second))
	done := e.mustCreate(tenantA, spec("bulk"), at(0))
	c := e.mustClaim(tenantA, workerB, "bulk", done.ID, at(2*time.Second))
	e.complete(tenantA, c.Token, at(3*time.Second))

	op := e.startOp(store.StartOperationParams{Kind: store.OperationCancel, FilterText: "queue = bulk", Reason: "bad deploy", Now: at(time.Minute)})
	if op.Counts.Matched != 2 {
		t.Fatalf("a cancel matched %d jobs, want the queued and the leased one", op.Counts.Matched)
	}
	fin := e.runOp(op, "c1", 0, at(2*time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 2, Acted: 2}, store.OperationSucceeded)
	if j := e.get(tenantA, a.ID); j.State != store.JobStateCancelled {
		t.Errorf("queued job is %s after a bulk cancel, want cancelled", j.State)
	}
	if j := e.get(tenantA, b.ID); j.State != store.JobStateLeased || !j.CancelRequested {
		t.Errorf("leased job is %s (cancel requested %v), want leased with cancel requested", j.State, j.CancelRequested)
	}
	for _, id := range []string{a.ID, b.ID} {
		checkGapless(t, id, e.events(tenantA, id))
	}
	if j := e.get(tenantA, done.ID); j.State != store.JobStateSucceeded {
		t.Errorf("a succeeded job is %s after a bulk cancel", j.State)
	}
}

func testOperationOtherKinds(t *testing.T, h Harness) {
	e := setup(t, h)
	// retry: a retry-waiting job becomes available now.
	j := e.mustCreate(tenantA, spec("r"), at(0))
	c := e.mustClaim(tenantA, workerA, "r", j.ID, at(time.Second))
	waiting := e.retry(tenantA, c.Token, store.JobError{Code: "x", Message: "x", Retryable: true}, time.Hour, at(2*time.Second))
	if !waiting.AvailableAt.After(at(time.Minute)) {
		t.Fatalf("retried job available at %v, want an hour later", waiting.AvailableAt)
	}
	op := e.startOp(store.StartOperationParams{Kind: store.OperationRetry, FilterText: "queue = r", Now: at(time.Minute)})
	fin := e.runOp(op, "c1", 0, at(time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 1, Acted: 1}, store.OperationSucceeded)
	if got := e.get(tenantA, j.ID); got.AvailableAt.After(at(time.Minute)) || got.State != store.JobStateQueued {
		t.Errorf("retried job after retry now: %s available at %v", got.State, got.AvailableAt)
	}
	e.mustClaim(tenantA, workerA, "r", j.ID, at(2*time.Minute))

	// set priority: queued jobs only.
	p1 := e.mustCreate(tenantA, spec("p"), at(0))
	op = e.startOp(store.StartOperationParams{Kind: store.OperationSetPriority, FilterText: "queue = p", Priority: 7, Now: at(time.Minute)})
	fin = e.runOp(op, "c1", 0, at(time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 1, Acted: 1}, store.OperationSucceeded)
	if got := e.get(tenantA, p1.ID); got.Priority != 7 {
		t.Errorf("priority %d after set priority 7", got.Priority)
	}

	// abandon: dead jobs.
	d := e.deadJob(tenantA, "a", at(0))
	op = e.startOp(store.StartOperationParams{Kind: store.OperationAbandon, FilterText: "queue = a", Now: at(time.Minute)})
	fin = e.runOp(op, "c1", 0, at(time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 1, Acted: 1}, store.OperationSucceeded)
	if dj, err := e.s.GetDeadJob(e.ctx, tenantA, d.ID); err != nil || !dj.Abandoned {
		t.Errorf("dead job after a bulk abandon: %+v, %v", dj, err)
	}
	checkGapless(t, d.ID, e.events(tenantA, d.ID))

	// delete: finished jobs with their history; live ones are not matched.
	gone := e.deadJob(tenantA, "d", at(0))
	live := e.mustCreate(tenantA, spec("d"), at(0))
	op = e.startOp(store.StartOperationParams{Kind: store.OperationDelete, FilterText: "queue = d", Now: at(time.Minute)})
	fin = e.runOp(op, "c1", 0, at(time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 1, Acted: 1}, store.OperationSucceeded)
	_, err := e.s.GetJob(e.ctx, tenantA, gone.ID)
	wantErr(t, err, store.ErrNotFound, "get a deleted job")
	if e.h.Rows != nil && e.rows(RowsEvents, gone.ID) != 0 {
		t.Errorf("a deleted job's events are left behind")
	}
	if got := e.get(tenantA, live.ID); got.State != store.JobStateQueued {
		t.Errorf("a live job is %s after a bulk delete", got.State)
	}
}

func testOperationChangedSince(t *testing.T, h Harness) {
	e := setup(t, h)
	d1 := e.deadJob(tenantA, "q", at(0))
	d2 := e.deadJob(tenantA, "q", at(0))
	d3 := e.deadJob(tenantA, "q", at(0))
	op := e.startOp(store.StartOperationParams{Kind: store.OperationReplay, FilterText: "queue = q", Now: at(time.Minute)})
	// After the start: d1 is replayed by hand, d2 abandoned.
	if _, _, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: d1.ID, Now: at(2 * time.Minute)}); err != nil {
		t.Fatalf("replay by hand: %v", err)
	}
	if _, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: d2.ID, Now: at(2 * time.Minute)}); err != nil {
		t.Fatalf("abandon by hand: %v", err)
	}
	fin := e.runOp(op, "c1", 0, at(3*time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 3, Acted: 1, SkippedChanged: 2}, store.OperationSucceeded)
	if n := e.replaysOf("q", d1.ID); n != 1 {
		t.Errorf("a job replayed by hand before its chunk has %d replays, want 1", n)
	}
	if n := e.replaysOf("q", d3.ID); n != 1 {
		t.Errorf("d3 has %d replays, want 1", n)
	}
}

func testOperationOutOfScope(t *testing.T, h Harness) {
	e := setup(t, h)
	e.deadJob(tenantA, "team-a.mail", at(0))
	out := e.deadJob(tenantA, "team-b.mail", at(0))
	op := e.startOp(store.StartOperationParams{Kind: store.OperationAbandon, FilterText: "state = dead",
		QueueScope: []string{"team-a.*"}, Now: at(time.Minute)})
	fin := e.runOp(op, "c1", 0, at(time.Minute))
	wantCounts(t, fin, store.OperationCounts{Matched: 2, Acted: 1, SkippedOutOfScope: 1}, store.OperationSucceeded)
	if dj, _ := e.s.GetDeadJob(e.ctx, tenantA, out.ID); dj == nil || dj.Abandoned {
		t.Errorf("a job outside the scope was touched: %+v", dj)
	}
}

func testOperationResumeActsOnce(t *testing.T, h Harness) {
	e := setup(t, h)
	var dead []*store.Job
	for range 4 {
		dead = append(dead, e.deadJob(tenantA, "q", at(0)))
	}
	op := e.startOp(store.StartOperationParams{Kind: store.OperationReplay, FilterText: "queue = q", Now: at(time.Minute)})
	if _, err := e.s.ClaimOperation(e.ctx, store.ClaimOperationParams{Owner: "c1", LeaseTTL: opLease, Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	// c1's first chunk commits, its second dies before its commit.
	res, err := e.s.RunOperationChunk(e.ctx, store.RunChunkParams{Tenant: tenantA, ID: op.ID, Owner: "c1", LeaseTTL: opLease, Limit: 2, Now: at(time.Minute)})
	if err != nil || res.Handled != 2 || res.Rows.Acted != 2 || res.Finished {
		t.Fatalf("first chunk: %+v, %v", res, err)
	}
	e.f.failCommits("operation_chunk")
	_, err = e.s.RunOperationChunk(e.ctx, store.RunChunkParams{Tenant: tenantA, ID: op.ID, Owner: "c1", LeaseTTL: opLease, Limit: 2, Now: at(time.Minute)})
	if !errors.Is(err, errInjected) {
		t.Fatalf("a chunk whose commit fails: %v", err)
	}
	e.f.healCommits()
	// Before c1's lease expires nobody else takes the operation.
	if got, err := e.s.ClaimOperation(e.ctx, store.ClaimOperationParams{Owner: "c2", LeaseTTL: opLease, Now: at(time.Minute + time.Second)}); err != nil || got != nil {
		t.Fatalf("claim of a held operation: %+v, %v", got, err)
	}
	fin := e.runOp(op, "c2", 2, at(time.Minute+2*opLease))
	wantCounts(t, fin, store.OperationCounts{Matched: 4, Acted: 4}, store.OperationSucceeded)
	for _, d := range dead {
		if n := e.replaysOf("q", d.ID); n != 1 {
			t.Errorf("dead job %s has %d replays after the resume, want exactly 1", d.ID, n)
		}
	}
}

func testOperationLeaseLost(t *testing.T, h Harness) {
	e := setup(t, h)
	e.deadJob(tenantA, "q", at(0))
	op := e.startOp(store.StartOperationParams{Kind: store.OperationReplay, FilterText: "queue = q", Now: at(time.Minute)})
	if got, err := e.s.ClaimOperation(e.ctx, store.ClaimOperationParams{Owner: "c1", LeaseTTL: opLease, Now: at(time.Minute)}); err != nil || got == nil {
		t.Fatalf("claim: %+v, %v", got, err)
	}
	if got, err := e.s.ClaimOperation(e.ctx, store.ClaimOperationParams{Owner: "c2", LeaseTTL: opLease, Now: at(time.Minute + 2*opLease)}); err != nil || got == nil || got.LeaseOwner != "c2" {
		t.Fatalf("claim after the lease expired: %+v, %v", got, err)
	}
	_, err := e.s.RunOperationChunk(e.ctx, store.RunChunkParams{Tenant: tenantA, ID: op.ID, Owner: "c1", LeaseTTL: opLease, Now: at(time.Minute + 2*opLease)})
	wantErr(t, err, store.ErrOperationLeaseLost, "a chunk by the holder that lost the lease")
}

func testOperationLimit(t *testing.T, h Harness) {
	e := setup(t, h)
	e.deadJob(tenantA, "q", at(0))
	e.deadJob(tenantB, "q", at(0))
	p := store.StartOperationParams{Kind: store.OperationReplay, FilterText: "queue = q", Limit: 2, Now: at(time.Minute)}
	e.startOp(p)
	e.startOp(p)
	f, _ := store.ParseJobFilter(p.FilterText)
	p.Filter, p.Tenant = f, tenantA
	_, err := e.s.StartOperation(e.ctx, p)
	wantErr(t, err, store.ErrOperationLimit, "a third running operation of a tenant")
	p.Tenant = tenantB
	if _, err := e.s.StartOperation(e.ctx, p); err != nil {
		t.Fatalf("another tenant's operation: %v", err)
	}
	page, err := e.s.ListOperations(e.ctx, store.ListOperationsParams{Tenant: tenantA, Limit: 1})
	if err != nil || len(page.Operations) != 1 || page.NextCursor == "" {
		t.Fatalf("list first page: %+v, %v", page, err)
	}
	page, err = e.s.ListOperations(e.ctx, store.ListOperationsParams{Tenant: tenantA, Limit: 1, Cursor: page.NextCursor})
	if err != nil || len(page.Operations) != 1 || page.NextCursor != "" {
		t.Fatalf("list second page: %+v, %v", page, err)
	}
}

func testOperationCancelAndPrune(t *testing.T, h Harness) {
	e := setup(t, h)
	for range 3 {
		e.deadJob(tenantA, "q", at(0))
	}
	op := e.startOp(store.StartOperationParams{Kind: store.OperationAbandon, FilterText: "queue = q", Now: at(time.Minute)})
	if _, err := e.s.ClaimOperation(e.ctx, store.ClaimOperationParams{Owner: "c1", LeaseTTL: opLease, Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.RunOperationChunk(e.ctx, store.RunChunkParams{Tenant: tenantA, ID: op.ID, Owner: "c1", LeaseTTL: opLease, Limit: 1, Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	got, err := e.s.CancelOperation(e.ctx, tenantA, op.ID, at(time.Minute))
	if err != nil || !got.CancelRequested || got.State != store.OperationRunning {
		t.Fatalf("cancel: %+v, %v", got, err)
	}
	res, err := e.s.RunOperationChunk(e.ctx, store.RunChunkParams{Tenant: tenantA, ID: op.ID, Owner: "c1", LeaseTTL: opLease, Limit: 1, Now: at(2 * time.Minute)})
	if err != nil || !res.Finished || res.Handled != 0 {
		t.Fatalf("the chunk after a cancel: %+v, %v", res, err)
	}
	wantCounts(t, res.Operation, store.OperationCounts{Matched: 3, Acted: 1}, store.OperationCancelled)
	again, err := e.s.CancelOperation(e.ctx, tenantA, op.ID, at(3*time.Minute))
	if err != nil || again.State != store.OperationCancelled {
		t.Fatalf("cancel a finished operation: %+v, %v", again, err)
	}
	if n, err := e.s.PruneOperations(e.ctx, at(2*time.Minute), 0); err != nil || n != 0 {
		t.Fatalf("prune before the operation finished: %d, %v", n, err)
	}
	if n, err := e.s.PruneOperations(e.ctx, at(time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("prune after: %d, %v", n, err)
	}
	_, err = e.s.GetOperation(e.ctx, tenantA, op.ID)
	wantErr(t, err, store.ErrNotFound, "get a pruned operation")
}

func testOperationFilterStates(t *testing.T, h Harness) {
	e := setup(t, h)
	f, err := store.ParseJobFilter("state = succeeded")
	if err != nil {
		t.Fatal(err)
	}
	_, err = e.s.StartOperation(e.ctx, store.StartOperationParams{Tenant: tenantA, Kind: store.OperationReplay, Filter: f, FilterText: "state = succeeded", Now: at(0)})
	wantErr(t, err, store.ErrInvalid, "a replay of succeeded jobs")
	_, err = e.s.StartOperation(e.ctx, store.StartOperationParams{Tenant: tenantA, Kind: store.OperationReplay, Now: at(0)})
	wantErr(t, err, store.ErrInvalid, "an operation without a filter")
}
