package storetest

import (
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// leaseTests cover contract points 3 and 4: only the current generation may
// publish, and expiry is the recovery.
func leaseTests() group {
	return group{name: "Lease", cases: []testCase{
		{"an expired lease is recovered at generation 2 and the old holder is fenced", testExpiredLeaseRecovered},
		{"renewal by the current generation extends the lease and renewal after expiry is lost", testRenew},
		{"one renew call answers for every token and never fails for a lost one", testRenewMany},
		{"release returns the job without spending an attempt", testRelease},
		{"release of a job with cancel requested cancels it", testReleaseCancelRequested},
	}}
}

// leaseBoundCalls runs every lease-bound report with tok at now and
// returns the error of each; Renew's outcome is reported as ErrLeaseLost
// when it says lost, so all entries read alike.
func (e *env) leaseBoundCalls(s store.Store, tenant string, tok store.LeaseToken, now time.Time) map[string]error {
	e.t.Helper()
	out := map[string]error{}
	res, err := s.Renew(e.ctx, store.RenewParams{Tenant: tenant, Tokens: []store.LeaseToken{tok}, LeaseDuration: lease, Now: now})
	switch {
	case err != nil:
		out["renew"] = err
	case len(res) != 1:
		e.t.Fatalf("renew of one token returned %d results", len(res))
	case res[0].Status == store.RenewLost || res[0].Status == store.RenewReported:
		out["renew"] = store.ErrLeaseLost
	default:
		out["renew"] = nil
	}
	_, out["checkpoint"] = s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenant, Token: tok, Phase: "stale", State: []byte("x"), Now: now})
	_, _, out["reserve effect"] = s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenant, Token: tok, Key: "stale-effect", Now: now})
	_, out["record effect"] = s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenant, Token: tok, Key: "charge", Status: store.EffectSucceeded, ProviderOperationID: "op-stale", Now: now})
	_, out["complete"] = s.Complete(e.ctx, store.CompleteParams{Tenant: tenant, Token: tok, Result: []byte(`"stale"`), Now: now})
	_, out["retry"] = s.Retry(e.ctx, store.RetryParams{Tenant: tenant, Token: tok, Error: store.JobError{Code: "stale", Retryable: true}, Now: now})
	_, out["cancel by holder"] = s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenant, Token: tok, Reason: "stale", Now: now})
	_, out["release"] = s.Release(e.ctx, store.ReleaseParams{Tenant: tenant, Token: tok, Now: now})
	return out
}

// wantAllLost fails unless every call of leaseBoundCalls was refused with
// ErrLeaseLost.
func wantAllLost(t *testing.T, who string, errs map[string]error) {
	t.Helper()
	for name, err := range errs {
		wantErr(t, err, store.ErrLeaseLost, who+" "+name)
	}
}

func testExpiredLeaseRecovered(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	a := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second)) // expires at 31s
	if _, reserved, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: a.Token, Key: "charge", Now: at(5 * time.Second)}); err != nil || !reserved {
		t.Fatalf("A reserves charge: %v, %v", reserved, err)
	}

	// Expired but not yet reclaimed: A is already fenced, by time alone.
	wantAllLost(t, "A after expiry", e.leaseBoundCalls(e.s, tenantA, a.Token, at(40*time.Second)))
	if got := e.get(tenantA, j.ID); got.LeaseGeneration != 1 || got.Result != nil {
		t.Fatalf("A's refused reports changed the job: generation %d, result %q", got.LeaseGeneration, got.Result)
	}

	// Expiry is the recovery: the reaper requeues the job, and the next
	// claim bumps the generation.
	if r := e.reap(at(40 * time.Second)); len(r.Jobs) != 1 || r.Jobs[0].State != store.JobStateQueued {
		t.Fatalf("reap after expiry: %+v, want the job queued again", r)
	}
	b := e.mustClaim(tenantA, workerB, "default", j.ID, at(41*time.Second))
	if b.Token.Generation != 2 || b.Job.Attempts != 2 || b.Job.LeaseOwner != workerB {
		t.Fatalf("B's claim: generation %d, attempts %d, owner %q; want 2, 2, %s", b.Token.Generation, b.Job.Attempts, b.Job.LeaseOwner, workerB)
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased, store.EventLeaseExpired, store.EventLeased)

	// A, a stranger with B's generation, and B with a wrong generation are
	// all fenced; none of it leaves a trace.
	before := e.events(tenantA, j.ID)
	wantAllLost(t, "A", e.leaseBoundCalls(e.s, tenantA, a.Token, at(42*time.Second)))
	wantAllLost(t, "C with generation 2", e.leaseBoundCalls(e.s, tenantA, store.LeaseToken{JobID: j.ID, Generation: 2, WorkerID: workerC}, at(42*time.Second)))
	wantAllLost(t, "B with generation 3", e.leaseBoundCalls(e.s, tenantA, store.LeaseToken{JobID: j.ID, Generation: 3, WorkerID: workerB}, at(42*time.Second)))
	wantAllLost(t, "B with generation 1", e.leaseBoundCalls(e.s, tenantA, store.LeaseToken{JobID: j.ID, Generation: 1, WorkerID: workerB}, at(42*time.Second)))
	if after := e.events(tenantA, j.ID); len(after) != len(before) {
		t.Fatalf("fenced reports added events: %v → %v", eventTypes(before), eventTypes(after))
	}
	got := e.get(tenantA, j.ID)
	if got.State != store.JobStateLeased || got.LeaseOwner != workerB || got.LeaseGeneration != 2 || got.Checkpoint != nil || got.CancelRequested {
		t.Fatalf("fenced reports changed the job: %+v", got)
	}
	wantTime(t, "B's lease expiry", got.LeaseExpiresAt, at(41*time.Second+lease))

	// B's reports go through.
	res, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{b.Token}, LeaseDuration: lease, Now: at(43 * time.Second)})
	if err != nil || len(res) != 1 || res[0].Status != store.RenewRenewed {
		t.Fatalf("B's renew: %+v, %v", res, err)
	}
	if _, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: b.Token, Phase: "charged", Now: at(44 * time.Second)}); err != nil {
		t.Fatalf("B's checkpoint: %v", err)
	}
	if _, reserved, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: b.Token, Key: "receipt", Now: at(44 * time.Second)}); err != nil || !reserved {
		t.Fatalf("B's reserve: %v, %v", reserved, err)
	}
	if _, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: b.Token, Key: "receipt", Status: store.EffectSucceeded, ProviderOperationID: "op-b", Now: at(45 * time.Second)}); err != nil {
		t.Fatalf("B's record: %v", err)
	}
	done := e.complete(tenantA, b.Token, at(46*time.Second))
	if done.State != store.JobStateSucceeded || string(done.Result) != `"ok"` {
		t.Fatalf("B's complete: %s, result %q", done.State, done.Result)
	}
	wantTime(t, "finished_at", done.FinishedAt, at(46*time.Second))

	// After the end A is still refused and nothing changes.
	wantAllLost(t, "A after B completed", e.leaseBoundCalls(e.s, tenantA, a.Token, at(47*time.Second)))
	evs := e.events(tenantA, j.ID)
	if n := terminalEvents(evs); n != 1 || evs[len(evs)-1].Type != store.EventSucceeded {
		t.Fatalf("events %v: want exactly one terminal event, succeeded, last", eventTypes(evs))
	}
	as := e.attempts(tenantA, j.ID)
	if len(as) != 2 {
		t.Fatalf("%d attempts, want 2: %+v", len(as), as)
	}
	if as[0].LeaseGeneration != 1 || as[0].WorkerID != workerA || as[0].Outcome != store.AttemptLeaseExpired || as[0].FinishedAt.IsZero() {
		t.Errorf("A's attempt is %+v, want generation 1 ended lease_expired", as[0])
	}
	if as[1].LeaseGeneration != 2 || as[1].WorkerID != workerB || as[1].Outcome != store.AttemptSucceeded {
		t.Errorf("B's attempt is %+v, want generation 2 succeeded", as[1])
	}
	wantTime(t, "B's attempt finished_at", as[1].FinishedAt, at(46*time.Second))
}

func testRenew(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second)) // expires at 31s
	renew := func(now time.Time) store.RenewResult {
		t.Helper()
		res, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{c.Token}, LeaseDuration: lease, Now: now})
		if err != nil || len(res) != 1 {
			t.Fatalf("renew at %s: %+v, %v", now, res, err)
		}
		if res[0].Token != c.Token {
			t.Fatalf("renew answered for token %+v, asked for %+v", res[0].Token, c.Token)
		}
		return res[0]
	}
	r := renew(at(20 * time.Second))
	if r.Status != store.RenewRenewed {
		t.Fatalf("renew within the lease: %s", r.Status)
	}
	wantTime(t, "renewed expiry", r.ExpiresAt, at(50*time.Second))
	wantTime(t, "job lease expiry after renewal", e.get(tenantA, j.ID).LeaseExpiresAt, at(50*time.Second))

	// Past the original expiry the renewed lease still holds: nobody else
	// can claim, and the holder can renew again.
	e.claimNothing(tenantA, "default", at(45*time.Second), "the renewed lease runs until 50s")
	r = renew(at(45 * time.Second))
	if r.Status != store.RenewRenewed {
		t.Fatalf("second renew: %s", r.Status)
	}
	wantTime(t, "second renewed expiry", r.ExpiresAt, at(75*time.Second))

	// After expiry a renewal is lost and does not revive the lease.
	r = renew(at(80 * time.Second))
	if r.Status != store.RenewLost {
		t.Fatalf("renew after expiry: %s, want lost", r.Status)
	}
	got := e.get(tenantA, j.ID)
	wantTime(t, "lease expiry after a lost renewal", got.LeaseExpiresAt, at(75*time.Second))
	_, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: c.Token, Now: at(81 * time.Second)})
	wantErr(t, err, store.ErrLeaseLost, "complete after a lost renewal")
	// Exactly at expiry the lease is over (expires_at > now must hold).
	j2 := e.mustCreate(tenantA, spec("edge"), base)
	c2 := e.mustClaim(tenantA, workerA, "edge", j2.ID, at(time.Second))
	res, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{c2.Token}, LeaseDuration: lease, Now: at(time.Second + lease)})
	if err != nil || res[0].Status != store.RenewLost {
		t.Fatalf("renew exactly at expiry: %+v, %v; want lost", res, err)
	}
	e.reap(at(time.Second + lease))
	e.mustClaim(tenantA, workerB, "edge", j2.ID, at(time.Second+lease))
}

func testRenewMany(t *testing.T, h Harness) {
	e := setup(t, h)
	var tokens []store.LeaseToken
	for i := range 3 {
		j := e.mustCreate(tenantA, spec("default"), base)
		c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Duration(i)*10*time.Second))
		tokens = append(tokens, c.Token)
	}
	// Job 0's lease (0s–30s) has expired at 35s; job 1 (10s–40s) and 2
	// (20s–50s) are current. A token of a job that does not exist is lost.
	ghost := store.LeaseToken{JobID: freshID(), Generation: 1, WorkerID: workerA}
	ask := append(append([]store.LeaseToken(nil), tokens...), ghost)
	res, err := e.s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: ask, LeaseDuration: time.Minute, Now: at(35 * time.Second)})
	if err != nil {
		t.Fatalf("renew of several tokens, one expired and one unknown: %v", err)
	}
	if len(res) != len(ask) {
		t.Fatalf("renew of %d tokens returned %d results", len(ask), len(res))
	}
	byJob := map[string]store.RenewResult{}
	for _, r := range res {
		byJob[r.Token.JobID] = r
	}
	if r := byJob[tokens[0].JobID]; r.Status != store.RenewLost {
		t.Errorf("expired token: %s, want lost", r.Status)
	}
	if r := byJob[ghost.JobID]; r.Status != store.RenewLost {
		t.Errorf("unknown token: %s, want lost", r.Status)
	}
	for _, tok := range tokens[1:] {
		r := byJob[tok.JobID]
		if r.Status != store.RenewRenewed {
			t.Errorf("current token of %s: %s, want renewed", tok.JobID, r.Status)
		}
		wantTime(t, "renewed expiry", r.ExpiresAt, at(95*time.Second))
	}
}

func testRelease(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	a := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	rel, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: a.Token, Now: at(5 * time.Second)})
	if err != nil {
		t.Fatalf("release: %v", err)
	}
	for _, g := range []*store.Job{rel, e.get(tenantA, j.ID)} {
		if g.State != store.JobStateQueued || g.Attempts != 0 || !g.LeaseExpiresAt.IsZero() || !g.FinishedAt.IsZero() {
			t.Fatalf("released job is %s, attempts %d, lease expiry %v, finished %v; want queued, 0, none, none", g.State, g.Attempts, g.LeaseExpiresAt, g.FinishedAt)
		}
		wantTime(t, "released job's available_at", g.AvailableAt, at(5*time.Second))
	}
	wantEvents(t, e.events(tenantA, j.ID), store.EventQueued, store.EventLeased, store.EventReleased)
	_, err = e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: a.Token, Now: at(6 * time.Second)})
	wantErr(t, err, store.ErrLeaseLost, "a second release by the same generation")

	b := e.mustClaim(tenantA, workerB, "default", j.ID, at(6*time.Second))
	if b.Token.Generation != 2 || b.Job.Attempts != 1 {
		t.Fatalf("claim after release: generation %d, attempts %d; want 2, 1", b.Token.Generation, b.Job.Attempts)
	}
	_, err = e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenantA, Token: a.Token, Now: at(7 * time.Second)})
	wantErr(t, err, store.ErrLeaseLost, "complete by the released generation")
	as := e.attempts(tenantA, j.ID)
	if len(as) != 2 || as[0].Outcome != store.AttemptReleased || as[0].LeaseGeneration != 1 || as[1].Outcome != store.AttemptRunning || as[1].LeaseGeneration != 2 {
		t.Fatalf("attempt history %+v, want released at generation 1 then running at generation 2", as)
	}

	// Releases never spend the budget: a job with one attempt released three
	// times still has its one attempt, and only a failure kills it.
	sp := spec("once")
	sp.MaxAttempts = 1
	once := e.mustCreate(tenantA, sp, base)
	now := at(time.Minute)
	for i := range 3 {
		c := e.mustClaim(tenantA, workerA, "once", once.ID, now)
		if c.Job.Attempts != 1 || c.Token.Generation != int64(i+1) {
			t.Fatalf("claim %d: attempts %d, generation %d", i+1, c.Job.Attempts, c.Token.Generation)
		}
		if _, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: c.Token, Now: now.Add(time.Second)}); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
		now = now.Add(2 * time.Second)
	}
	c := e.mustClaim(tenantA, workerA, "once", once.ID, now)
	dead := e.retry(tenantA, c.Token, store.JobError{Code: "boom", Retryable: true}, 0, now.Add(time.Second))
	if dead.State != store.JobStateDead || dead.Attempts != 1 {
		t.Fatalf("after three releases and one failure the job is %s with %d attempts; want dead with 1", dead.State, dead.Attempts)
	}
}

func testReleaseCancelRequested(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: j.ID, Reason: "user", Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	rel, err := e.s.Release(e.ctx, store.ReleaseParams{Tenant: tenantA, Token: c.Token, Now: at(3 * time.Second)})
	if err != nil {
		t.Fatalf("release with cancel requested: %v", err)
	}
	if rel.State != store.JobStateCancelled || rel.FinishedAt.IsZero() {
		t.Fatalf("released job with cancel requested is %s, want cancelled", rel.State)
	}
	evs := e.events(tenantA, j.ID)
	if terminalEvents(evs) != 1 || evs[len(evs)-1].Type != store.EventCancelled {
		t.Fatalf("events %v, want one terminal event, cancelled, last", eventTypes(evs))
	}
	e.claimNothing(tenantA, "default", at(time.Hour), "the job was cancelled")
}
