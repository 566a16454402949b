package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// batchTests cover group commit: reports of many callers applied in one
// transaction, each with its own answer, none acknowledged before the
// commit.
func batchTests() group {
	return group{name: "Batch", cases: []testCase{
		{"a batch with mixed outcomes answers each report as if it ran alone", testBatchMixedOutcomes},
		{"reports of one job in one batch are judged in order", testBatchSameJobInOrder},
		{"a renewal after the holder's own report is answered reported, not lost", testRenewAfterOwnReport},
		{"a repeated report with another result or error is refused", testBatchReportMismatch},
		{"a failed commit fails every report of the batch and applies none", testBatchFailedCommit},
		{"concurrent callers share commits while a flush is in flight", testBatchSharesCommits},
		{"a client cancel racing a batch of completions has one winner per job", testBatchCancelRacesComplete},
		{"concurrent creates share a commit and a conflict fails only its own call", testCreatesShareCommits},
	}}
}

// batchJobs creates n jobs in queue and claims them all for worker with
// the suite's lease; it returns the claims in claim order.
func (e *env) batchJobs(queue, worker string, n int, now time.Time) []store.ClaimedJob {
	e.t.Helper()
	for range n {
		e.mustCreate(tenantA, spec(queue), now)
	}
	got := e.claim(tenantA, worker, queue, n, lease, now.Add(time.Second))
	if len(got) != n {
		e.t.Fatalf("claimed %d of %d jobs", len(got), n)
	}
	return got
}

func (e *env) apply(reports ...store.Report) []store.ReportResult {
	e.t.Helper()
	res, err := e.s.ApplyReports(e.ctx, reports)
	if err != nil {
		e.t.Fatalf("apply %d reports: %v", len(reports), err)
	}
	if len(res) != len(reports) {
		e.t.Fatalf("apply %d reports returned %d results", len(reports), len(res))
	}
	return res
}

func testBatchMixedOutcomes(t *testing.T, h Harness) {
	e := setup(t, h)
	c := e.batchJobs("mixed", workerA, 6, base) // leases expire at 31s
	// c[4]'s lease expires early: renewed to 5s from 2s.
	if _, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{c[4].Token}, LeaseDuration: 3 * time.Second, Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	// c[5] was completed earlier: its repeat is a lost-response replay.
	done := e.complete(tenantA, c[5].Token, at(3*time.Second))
	// c[1] was released and claimed again: its first token is stale.
	if _, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: c[1].Token, Now: at(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	again := e.mustClaim(tenantA, workerA, "mixed", c[1].Token.JobID, at(4*time.Second))
	stale := c[1].Token
	wrongOwner := c[2].Token
	wrongOwner.WorkerID = workerB
	otherTenant := c[3].Token
	now := at(10 * time.Second)
	rep := func(kind store.ReportKind, tenant string, tok store.LeaseToken) store.Report {
		r := store.Report{Kind: kind, Tenant: tenant, Token: tok, Now: now}
		switch kind {
		case store.ReportComplete:
			r.Result = []byte(`"ok"`)
		case store.ReportRetry:
			r.Error = store.JobError{Code: "http_503", Message: "busy", Retryable: true}
		default:
			// the other kinds carry no payload
		}
		return r
	}
	res := e.apply(
		rep(store.ReportComplete, tenantA, c[0].Token),                                                           // 0 valid
		rep(store.ReportComplete, tenantA, stale),                                                                // 1 stale generation
		rep(store.ReportComplete, tenantA, wrongOwner),                                                           // 2 wrong owner
		rep(store.ReportComplete, tenantB, otherTenant),                                                          // 3 another tenant's job
		rep(store.ReportComplete, tenantA, c[4].Token),                                                           // 4 expired lease
		rep(store.ReportComplete, tenantA, c[5].Token),                                                           // 5 repeat of an applied report
		rep(store.ReportRetry, tenantA, again.Token),                                                             // 6 valid retry
		rep(store.ReportComplete, tenantA, c[0].Token),                                                           // 7 the same report twice in one batch
		rep(store.ReportRenew, tenantA, c[2].Token),                                                              // 8 valid renewal
		rep(store.ReportRelease, tenantA, c[3].Token),                                                            // 9 valid release
		rep(store.ReportRenew, tenantA, wrongOwner),                                                              // 10 renewal of a lease not held
		rep(store.ReportComplete, tenantA, store.LeaseToken{JobID: freshID(), Generation: 1, WorkerID: workerA}), // 11 no such job
	)

	if j := res[0].Job; res[0].Err != nil || j == nil || j.State != store.JobStateSucceeded || string(j.Result) != `"ok"` {
		t.Errorf("valid complete: %+v", res[0])
	}
	wantErr(t, res[1].Err, store.ErrLeaseLost, "stale generation")
	wantErr(t, res[2].Err, store.ErrLeaseLost, "wrong owner")
	wantErr(t, res[3].Err, store.ErrNotFound, "another tenant's job")
	wantErr(t, res[4].Err, store.ErrLeaseLost, "expired lease")
	if j := res[5].Job; res[5].Err != nil || j == nil || j.State != store.JobStateSucceeded || !sameTime(j.FinishedAt, done.FinishedAt) {
		t.Errorf("repeat of an applied complete: %+v, want the job finished at %s", res[5], done.FinishedAt)
	}
	if j := res[6].Job; res[6].Err != nil || j == nil || j.State != store.JobStateQueued {
		t.Errorf("valid retry: %+v", res[6])
	}
	if j := res[7].Job; res[7].Err != nil || j == nil || j.State != store.JobStateSucceeded || !sameTime(j.FinishedAt, res[0].Job.FinishedAt) {
		t.Errorf("the same complete twice in one batch: %+v, want the first one's answer", res[7])
	}
	if r := res[8]; r.Err != nil || r.Renew.Status != store.RenewRenewed || !sameTime(r.Renew.ExpiresAt, now.Add(lease)) {
		t.Errorf("valid renewal: %+v, want renewed until %s", r, now.Add(lease))
	}
	if j := res[9].Job; res[9].Err != nil || j == nil || j.State != store.JobStateQueued || j.Attempts != 0 {
		t.Errorf("valid release: %+v", res[9])
	}
	if r := res[10]; r.Err != nil || r.Renew.Status != store.RenewLost {
		t.Errorf("renewal of a lease not held: %+v, want lost", r)
	}
	wantErr(t, res[11].Err, store.ErrNotFound, "no such job")

	// What was answered is what is stored.
	if j := e.get(tenantA, c[0].Token.JobID); j.State != store.JobStateSucceeded {
		t.Errorf("completed job is %s", j.State)
	}
	wantEvents(t, e.events(tenantA, c[0].Token.JobID), store.EventQueued, store.EventLeased, store.EventSucceeded)
	wantEvents(t, e.events(tenantA, c[1].Token.JobID), store.EventQueued, store.EventLeased, store.EventReleased,
		store.EventLeased, store.EventRunFailed)
	if j := e.get(tenantA, c[2].Token.JobID); j.State != store.JobStateLeased || !sameTime(j.LeaseExpiresAt, now.Add(lease)) {
		t.Errorf("renewed job is %s until %s", j.State, j.LeaseExpiresAt)
	}
	wantEvents(t, e.events(tenantA, c[3].Token.JobID), store.EventQueued, store.EventLeased, store.EventReleased)
	if j := e.get(tenantA, c[4].Token.JobID); j.State != store.JobStateLeased {
		t.Errorf("job with the expired lease is %s, want still leased (nobody reclaimed it)", j.State)
	}
	wantEvents(t, e.events(tenantA, c[5].Token.JobID), store.EventQueued, store.EventLeased, store.EventSucceeded)
	as := e.attempts(tenantA, c[1].Token.JobID)
	if len(as) != 2 || as[1].Outcome != store.AttemptFailed || as[1].Error == nil || as[1].Error.Code != "http_503" {
		t.Errorf("retried job's attempts: %+v", as)
	}
}

func testBatchSameJobInOrder(t *testing.T, h Harness) {
	e := setup(t, h)
	c := e.batchJobs("order", workerA, 3, base)
	now := at(5 * time.Second)
	res := e.apply(
		// Job 0: renewed, then completed, then renewed again (reported:
		// the holder's own complete ended it), then cancelled by the
		// holder (lost: the complete won).
		store.Report{Kind: store.ReportRenew, Tenant: tenantA, Token: c[0].Token, LeaseDuration: time.Minute, Now: now},
		store.Report{Kind: store.ReportComplete, Tenant: tenantA, Token: c[0].Token, Now: now},
		store.Report{Kind: store.ReportRenew, Tenant: tenantA, Token: c[0].Token, Now: now},
		store.Report{Kind: store.ReportCancel, Tenant: tenantA, Token: c[0].Token, Reason: "too late", Now: now},
		// Job 1: the holder cancels, then repeats the cancel.
		store.Report{Kind: store.ReportCancel, Tenant: tenantA, Token: c[1].Token, Reason: "stop", Now: now},
		store.Report{Kind: store.ReportCancel, Tenant: tenantA, Token: c[1].Token, Reason: "stop", Now: now},
		// Job 2: released, then a retry of the same lease (lost).
		store.Report{Kind: store.ReportRelease, Tenant: tenantA, Token: c[2].Token, Now: now},
		store.Report{Kind: store.ReportRetry, Tenant: tenantA, Token: c[2].Token, Error: store.JobError{Code: "x"}, Now: now},
	)
	if r := res[0]; r.Err != nil || r.Renew.Status != store.RenewRenewed {
		t.Errorf("renew before complete: %+v", r)
	}
	if j := res[1].Job; res[1].Err != nil || j.State != store.JobStateSucceeded {
		t.Errorf("complete after renew: %+v", res[1])
	}
	if r := res[2]; r.Err != nil || r.Renew.Status != store.RenewReported {
		t.Errorf("renew after complete: %+v, want reported", r)
	}
	wantErr(t, res[3].Err, store.ErrLeaseLost, "holder cancel after complete")
	if j := res[4].Job; res[4].Err != nil || j.State != store.JobStateCancelled {
		t.Errorf("holder cancel: %+v", res[4])
	}
	if j := res[5].Job; res[5].Err != nil || j.State != store.JobStateCancelled {
		t.Errorf("repeated holder cancel: %+v, want the same cancelled job", res[5])
	}
	if j := res[6].Job; res[6].Err != nil || j.State != store.JobStateQueued {
		t.Errorf("release: %+v", res[6])
	}
	wantErr(t, res[7].Err, store.ErrLeaseLost, "retry after release")

	for i, want := range [][]store.EventType{
		{store.EventQueued, store.EventLeased, store.EventSucceeded},
		{store.EventQueued, store.EventLeased, store.EventCancelled},
		{store.EventQueued, store.EventLeased, store.EventReleased},
	} {
		evs := e.events(tenantA, c[i].Token.JobID)
		wantEvents(t, evs, want...)
		if n := terminalEvents(evs); n > 1 {
			t.Errorf("job %d has %d terminal events", i, n)
		}
	}
}

func testBatchReportMismatch(t *testing.T, h Harness) {
	e := setup(t, h)
	c := e.batchJobs("mismatch", workerA, 2, base)
	now := at(5 * time.Second)
	e.complete(tenantA, c[0].Token, now) // result "ok"
	failure := store.JobError{Code: "http_503", Message: "busy", Retryable: true}
	e.retry(tenantA, c[1].Token, failure, 0, now)

	_, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[0].Token, Result: []byte(`"other"`), Now: now})
	wantErr(t, err, store.ErrReportMismatch, "complete repeated with another result")
	other := failure
	other.Code = "http_500"
	_, err = e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: c[1].Token, Error: other, Now: now})
	wantErr(t, err, store.ErrReportMismatch, "retry repeated with another error")
	// The same reports again are replays, and nothing changed.
	if j, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[0].Token, Result: []byte(`"ok"`), Now: now}); err != nil || string(j.Result) != `"ok"` {
		t.Errorf("complete repeated as made: %v, %v", j, err)
	}
	if _, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenantA, Token: c[1].Token, Error: failure, Now: now}); err != nil {
		t.Errorf("retry repeated as made: %v", err)
	}
	wantEvents(t, e.events(tenantA, c[0].Token.JobID), store.EventQueued, store.EventLeased, store.EventSucceeded)
	wantEvents(t, e.events(tenantA, c[1].Token.JobID), store.EventQueued, store.EventLeased, store.EventRunFailed)
}

func testBatchFailedCommit(t *testing.T, h Harness) {
	e := setup(t, h)
	c := e.batchJobs("faulty", workerA, 3, base)
	now := at(5 * time.Second)
	e.f.failCommits("report")
	res, err := e.s.ApplyReports(e.ctx, []store.Report{
		{Kind: store.ReportComplete, Tenant: tenantA, Token: c[0].Token, Now: now},
		{Kind: store.ReportRetry, Tenant: tenantA, Token: c[1].Token, Error: errTransient, Now: now},
		{Kind: store.ReportRenew, Tenant: tenantA, Token: c[2].Token, Now: now},
	})
	if err == nil {
		t.Fatalf("a batch whose commit failed answered %+v", res)
	}
	if !errors.Is(err, errInjected) {
		t.Errorf("failed batch: %v, want the commit's error", err)
	}
	_, err = e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[0].Token, Now: now})
	if !errors.Is(err, errInjected) {
		t.Errorf("single report in a failing batch: %v, want the commit's error", err)
	}
	e.f.healCommits()
	for _, cl := range c {
		j := e.get(tenantA, cl.Token.JobID)
		if j.State != store.JobStateLeased || !sameTime(j.LeaseExpiresAt, cl.Job.LeaseExpiresAt) {
			t.Errorf("job %s after a failed batch: %s until %s, want untouched", j.ID, j.State, j.LeaseExpiresAt)
		}
		wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased)
	}
	// The same reports succeed once commits work again.
	if _, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[0].Token, Now: now}); err != nil {
		t.Errorf("complete after the fault healed: %v", err)
	}
}

func testBatchSharesCommits(t *testing.T, h Harness) {
	e := setup(t, h)
	const n = 40
	c := e.batchJobs("shared", workerA, n+1, base)
	now := at(5 * time.Second)
	// The first report's commit waits at the gate; meanwhile n more
	// callers report, and must all go in the next commit.
	gate := e.f.gateCommits("report")
	queued := e.f.whenQueued("report", n)
	first := make(chan error, 1)
	go func() {
		_, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[0].Token, Now: now})
		first <- err
	}()
	gate.entered()
	commitsBefore := e.f.commits.Load()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[i+1].Token, Now: now})
		}()
	}
	// None of them may be answered while the first flush is held.
	<-queued
	select {
	case err := <-first:
		t.Fatalf("the first report was answered (%v) before its commit", err)
	default:
	}
	gate.release()
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("report %d: %v", i+1, err)
		}
	}
	if got := e.f.commits.Load() - commitsBefore; got != 1 {
		t.Errorf("%d reports queued behind one flush took %d more commits, want them batched in 1", n, got)
	}
	for _, cl := range c {
		if j := e.get(tenantA, cl.Token.JobID); j.State != store.JobStateSucceeded {
			t.Errorf("job %s is %s", j.ID, j.State)
		}
	}
}

func testBatchCancelRacesComplete(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	const n = 20
	c := e.batchJobs("race", workerA, n, base)
	now := at(5 * time.Second)
	start := make(barrier)
	var (
		wg         sync.WaitGroup
		completeEr = make([]error, n)
		cancelEr   = make([]error, n)
		cancelled  = make([]*store.Job, n)
	)
	for i := range n {
		wg.Add(2)
		go func() {
			defer wg.Done()
			start.wait()
			_, completeEr[i] = e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c[i].Token, Now: now})
		}()
		go func() {
			defer wg.Done()
			start.wait()
			cancelled[i], cancelEr[i] = other.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: c[i].Token.JobID, Reason: "race", Now: now})
		}()
	}
	start.open()
	wg.Wait()
	for i := range n {
		j := e.get(tenantA, c[i].Token.JobID)
		evs := e.events(tenantA, j.ID)
		if terminalEvents(evs) != 1 {
			t.Errorf("job %d: events %v, want exactly one terminal", i, eventTypes(evs))
		}
		// The complete always holds a live lease, so it succeeds; the
		// cancel either came first (a request the holder then overrode
		// by finishing) or found the job final.
		if completeEr[i] != nil || j.State != store.JobStateSucceeded {
			t.Errorf("job %d: complete %v, state %s", i, completeEr[i], j.State)
		}
		switch {
		case cancelEr[i] == nil:
			if !cancelled[i].CancelRequested || countEvents(evs, store.EventCancelRequested) != 1 {
				t.Errorf("job %d: accepted cancel left %+v, events %v", i, cancelled[i], eventTypes(evs))
			}
		case errors.Is(cancelEr[i], store.ErrAlreadyFinal):
			if countEvents(evs, store.EventCancelRequested) != 0 {
				t.Errorf("job %d: refused cancel left a request: %v", i, eventTypes(evs))
			}
		default:
			t.Errorf("job %d: cancel: %v", i, cancelEr[i])
		}
	}
}

// gate holds commits of one operation at BeforeCommit until released.
type gate struct {
	in      chan struct{}
	out     chan struct{}
	once    sync.Once
	release func()
}

func (g *gate) entered() { <-g.in }

// gateCommits makes the next commit of op wait at BeforeCommit until the
// returned gate is released; later commits pass.
func (f *faults) gateCommits(op string) *gate {
	g := &gate{in: make(chan struct{}), out: make(chan struct{})}
	g.release = func() { close(g.out) }
	f.gate.Store(&gateFor{op: op, g: g})
	return g
}

type gateFor struct {
	op string
	g  *gate
}

func (g *gateFor) pass(op string) {
	if g == nil || g.op != op {
		return
	}
	first := false
	g.g.once.Do(func() { first = true })
	if first {
		close(g.g.in)
		<-g.g.out
	}
}

// createAsync runs one CreateJobs call on its own goroutine.
func (e *env) createAsync(p store.CreateJobsParams) <-chan createOutcome {
	ch := make(chan createOutcome, 1)
	go func() {
		res, err := e.s.CreateJobs(e.ctx, p)
		ch <- createOutcome{res, err}
	}()
	return ch
}

type createOutcome struct {
	res []store.CreateResult
	err error
}

func testCreatesShareCommits(t *testing.T, h Harness) {
	e := setup(t, h)
	// A live record that the conflicting call below reuses.
	e.createIn(e.s, tenantA, spec("creates"), "taken", base)
	other := spec("creates")
	other.Kind = "other.kind"

	gate := e.f.gateCommits("create")
	held := e.createAsync(store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{{Spec: spec("creates")}}, Now: base})
	gate.entered()
	queued := e.f.whenQueued("create", 4)
	commits := e.f.commits.Load()
	fresh := e.createAsync(store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{{Spec: spec("creates"), RequestID: "k1"}}, Now: base})
	conflict := e.createAsync(store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{
		{Spec: spec("creates"), RequestID: "mine"}, {Spec: other, RequestID: "taken"}}, Now: base})
	twoA := e.createAsync(store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{{Spec: spec("creates"), RequestID: "same"}}, Now: base})
	twoB := e.createAsync(store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{{Spec: spec("creates"), RequestID: "same"}}, Now: base})
	<-queued
	gate.release()
	if got := <-held; got.err != nil {
		t.Fatal(got.err)
	}
	f, c, a, b := <-fresh, <-conflict, <-twoA, <-twoB
	if f.err != nil || len(f.res) != 1 || f.res[0].Replayed {
		t.Errorf("a fresh create in a shared batch: %+v, %v", f.res, f.err)
	}
	wantErr(t, c.err, store.ErrIdempotencyConflict, "the call reusing a live request id with another request")
	if a.err != nil || b.err != nil || a.res[0].Job.ID != b.res[0].Job.ID || a.res[0].Replayed == b.res[0].Replayed {
		t.Errorf("two calls with one request id in a batch: %+v (%v) and %+v (%v); want one job, one of them replayed", a.res, a.err, b.res, b.err)
	}
	if n := e.f.commits.Load() - commits; n != 1 {
		t.Errorf("four calls queued behind a held create took %d commits, want 1", n)
	}
	// The refused call left nothing: its other request id is free.
	res, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: []store.CreateRequest{{Spec: other, RequestID: "mine"}}, Now: at(time.Second)})
	if err != nil || res[0].Replayed {
		t.Errorf("reusing the refused call's request id with another request: %+v, %v; want a new job", res, err)
	}
	jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Queue: "creates", Limit: 100})
	if len(jobs) != 5 {
		t.Errorf("%d jobs, want 5 (taken, held, k1, same, mine)", len(jobs))
	}
}

// testRenewAfterOwnReport: a heartbeat sent before the answer to the
// holder's own report came back reaches the store after that report
// committed. It is answered RenewReported (the lease ended by a report
// made with its own token), while a renewal of a lease that expired, or
// of a job another generation holds, is still RenewLost.
func testRenewAfterOwnReport(t *testing.T, h Harness) {
	e := setup(t, h)
	c := e.batchJobs("own", workerA, 4, base)
	now := at(5 * time.Second)
	res := e.apply(
		store.Report{Kind: store.ReportComplete, Tenant: tenantA, Token: c[0].Token, Now: now},
		store.Report{Kind: store.ReportRetry, Tenant: tenantA, Token: c[1].Token, Error: store.JobError{Code: "x", Retryable: true}, Now: now},
		store.Report{Kind: store.ReportCancel, Tenant: tenantA, Token: c[2].Token, Reason: "stop", Now: now},
		store.Report{Kind: store.ReportRelease, Tenant: tenantA, Token: c[3].Token, Now: now},
	)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("report %d: %v", i, r.Err)
		}
	}
	toks := []store.LeaseToken{c[0].Token, c[1].Token, c[2].Token, c[3].Token}
	got, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: toks, LeaseDuration: lease, Now: at(6 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if r.Status != store.RenewReported {
			t.Errorf("renewal %d after the holder's own report: %s, want reported", i, r.Status)
		}
	}
	// Released job 3 leased again by B: A's old generation is still
	// reported (its own release ended it), B's lease is untouched.
	b := e.mustClaim(tenantA, workerB, "own", c[3].Token.JobID, at(7*time.Second))
	got, err = e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{c[3].Token}, LeaseDuration: lease, Now: at(8 * time.Second)})
	if err != nil || got[0].Status != store.RenewReported {
		t.Errorf("renewal of A's released lease after B claimed the job: %+v, %v; want reported", got, err)
	}
	// B's lease expires and is reaped: that generation is lost, not reported.
	e.reap(at(8*time.Second + lease))
	got, err = e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{b.Token}, LeaseDuration: lease, Now: at(9*time.Second + lease)})
	if err != nil || got[0].Status != store.RenewLost {
		t.Errorf("renewal of an expired lease: %+v, %v; want lost", got, err)
	}
}
