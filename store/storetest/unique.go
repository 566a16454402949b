package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// uniqueTests cover unique jobs: a unique key is held while its job is
// live (or for its period), a duplicate create answers the holder, and the
// database, not a lock, decides.
func uniqueTests() group {
	return group{name: "Unique", cases: []testCase{
		{"a duplicate create returns the live job that holds the key", testUniqueDuplicateReturnsExisting},
		{"a finished job frees its key", testUniqueFinishedFreesKey},
		{"a job waiting for its retry still holds its key", testUniqueRetryWaitingHolds},
		{"a key derived from kind and metadata ignores the payload and other metadata", testUniqueDerivedKey},
		{"keys are per tenant", testUniquePerTenant},
		{"a period holds the key after the job finished, until it ends", testUniquePeriod},
		{"FAIL refuses a duplicate with ErrUniqueConflict and creates nothing", testUniqueFail},
		{"a batch mixing duplicates and new jobs answers item by item, all or none", testUniqueBatch},
		{"a batch with FAIL and a duplicate creates none of its jobs", testUniqueBatchFail},
		{"a duplicate takes no request id", testUniqueDuplicateTakesNoRequestID},
		{"concurrent creates with one key from two stores make exactly one job", testUniqueConcurrent},
		{"retention removes expired period records", testUniquePrune},
		{"a period record whose job retention removed no longer holds the key", testUniquePrunedHolder},
	}}
}

// createUnique creates one job with unique options u.
func (e *env) createUnique(s store.Store, tenant string, sp store.JobSpec, u store.UniqueOptions, now time.Time) (store.CreateResult, error) {
	res, err := s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenant, Now: now,
		Requests: []store.CreateRequest{{Spec: sp, Unique: &u}},
	})
	if err != nil {
		return store.CreateResult{}, err
	}
	return res[0], nil
}

func (e *env) mustUnique(tenant string, sp store.JobSpec, u store.UniqueOptions, now time.Time) store.CreateResult {
	e.t.Helper()
	r, err := e.createUnique(e.s, tenant, sp, u, now)
	if err != nil {
		e.t.Fatalf("unique create (key %q): %v", u.Key, err)
	}
	return r
}

func wantFresh(t *testing.T, r store.CreateResult, what string) {
	t.Helper()
	if r.Duplicate || r.Replayed || r.Job == nil {
		t.Fatalf("%s: duplicate %v replayed %v, want a new job", what, r.Duplicate, r.Replayed)
	}
}

func wantDuplicateOf(t *testing.T, r store.CreateResult, holder *store.Job, what string) {
	t.Helper()
	if !r.Duplicate || r.Job == nil || r.Job.ID != holder.ID {
		id := ""
		if r.Job != nil {
			id = r.Job.ID
		}
		t.Fatalf("%s: got job %s (duplicate %v), want the holder %s as a duplicate", what, id, r.Duplicate, holder.ID)
	}
}

func testUniqueDuplicateReturnsExisting(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "invoice-7"}
	first := e.mustUnique(tenantA, spec("default"), u, base)
	wantFresh(t, first, "the first create")
	again := e.mustUnique(tenantA, spec("default"), u, at(time.Second))
	wantDuplicateOf(t, again, first.Job, "a create while the job is queued")
	// Another queue: the key is per tenant, not per queue.
	other := e.mustUnique(tenantA, spec("other"), u, at(2*time.Second))
	wantDuplicateOf(t, other, first.Job, "a create in another queue")
	e.mustClaim(tenantA, workerA, "default", first.Job.ID, at(3*time.Second))
	leased := e.mustUnique(tenantA, spec("default"), u, at(4*time.Second))
	wantDuplicateOf(t, leased, first.Job, "a create while the job is leased")
	if leased.Job.State != store.JobStateLeased {
		t.Fatalf("the duplicate answer shows state %s, want the holder as it is now (leased)", leased.Job.State)
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 1 {
		t.Fatalf("%d jobs exist, want 1", len(jobs))
	}
	wantEvents(t, e.events(tenantA, first.Job.ID), store.EventQueued, store.EventLeased)
}

func testUniqueFinishedFreesKey(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "nightly"}
	first := e.mustUnique(tenantA, spec("default"), u, base)
	c := e.mustClaim(tenantA, workerA, "default", first.Job.ID, at(time.Second))
	e.complete(tenantA, c.Token, at(2*time.Second))
	second := e.mustUnique(tenantA, spec("default"), u, at(3*time.Second))
	wantFresh(t, second, "a create after the holder succeeded")
	if second.Job.ID == first.Job.ID {
		t.Fatal("the second create returned the finished job")
	}
	// A cancelled holder frees it too.
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: second.Job.ID, Now: at(4 * time.Second)}); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	wantFresh(t, e.mustUnique(tenantA, spec("default"), u, at(5*time.Second)), "a create after the holder was cancelled")
}

func testUniqueRetryWaitingHolds(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "flaky"}
	sp := spec("default")
	sp.MaxAttempts = 5
	first := e.mustUnique(tenantA, sp, u, base)
	c := e.mustClaim(tenantA, workerA, "default", first.Job.ID, at(time.Second))
	j := e.retry(tenantA, c.Token, store.JobError{Code: "busy", Retryable: true}, time.Hour, at(2*time.Second))
	if j.State != store.JobStateQueued || !j.AvailableAt.After(at(time.Minute)) {
		t.Fatalf("after a retry the job is %s available at %s, want queued an hour later", j.State, j.AvailableAt)
	}
	wantDuplicateOf(t, e.mustUnique(tenantA, sp, u, at(3*time.Second)), first.Job, "a create while the holder waits for its retry")
	// A job scheduled for later holds its key too.
	later := spec("default")
	later.RunAfter = time.Hour
	sched := e.mustUnique(tenantA, later, store.UniqueOptions{Key: "later"}, base)
	wantDuplicateOf(t, e.mustUnique(tenantA, spec("default"), store.UniqueOptions{Key: "later"}, at(time.Second)), sched.Job, "a create while the holder is scheduled")
}

func testUniqueDerivedKey(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{ByMetadataKeys: []string{"customer", "region"}}
	sp := spec("default")
	sp.Metadata = map[string]string{"customer": "c1", "region": "eu", "trace": "a"}
	first := e.mustUnique(tenantA, sp, u, base)
	wantFresh(t, first, "the first create")
	dup := spec("default")
	dup.Payload = []byte("another payload")
	dup.Metadata = map[string]string{"region": "eu", "customer": "c1", "trace": "b"}
	swapped := store.UniqueOptions{ByMetadataKeys: []string{"region", "customer"}}
	wantDuplicateOf(t, e.mustUnique(tenantA, dup, swapped, at(time.Second)), first.Job, "another payload and trace, keys listed in another order")
	otherCustomer := spec("default")
	otherCustomer.Metadata = map[string]string{"customer": "c2", "region": "eu"}
	wantFresh(t, e.mustUnique(tenantA, otherCustomer, u, at(2*time.Second)), "another customer")
	otherKind := spec("default")
	otherKind.Kind = "report.build"
	otherKind.Metadata = sp.Metadata
	wantFresh(t, e.mustUnique(tenantA, otherKind, u, at(3*time.Second)), "another kind")
	missing := spec("default")
	missing.Metadata = map[string]string{"customer": "c1", "region": ""}
	wantFresh(t, e.mustUnique(tenantA, missing, u, at(4*time.Second)), "an empty value, which differs from the first's")
	absent := spec("default")
	absent.Metadata = map[string]string{"customer": "c1"}
	wantFresh(t, e.mustUnique(tenantA, absent, u, at(5*time.Second)), "an absent key, which differs from an empty value")
}

func testUniquePerTenant(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "shared-name"}
	a := e.mustUnique(tenantA, spec("default"), u, base)
	b := e.mustUnique(tenantB, spec("default"), u, base)
	wantFresh(t, a, "tenant A's create")
	wantFresh(t, b, "tenant B's create with the same key")
}

func testUniquePeriod(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "daily-digest", Period: time.Hour}
	first := e.mustUnique(tenantA, spec("default"), u, base)
	wantFresh(t, first, "the first create")
	c := e.mustClaim(tenantA, workerA, "default", first.Job.ID, at(time.Second))
	e.complete(tenantA, c.Token, at(2*time.Second))
	held := e.mustUnique(tenantA, spec("default"), u, at(30*time.Minute))
	wantDuplicateOf(t, held, first.Job, "a create within the period after the job finished")
	if held.Job.State != store.JobStateSucceeded {
		t.Fatalf("the holder is %s, want succeeded", held.Job.State)
	}
	// Without a period, a finished holder does not count.
	wantFresh(t, e.mustUnique(tenantA, spec("default"), store.UniqueOptions{Key: "daily-digest"}, at(31*time.Minute)),
		"a create with the key but no period")
	// That job is live: the next periodic create answers it even though
	// the period record is still the first job's.
	second := e.mustUnique(tenantA, spec("default"), u, at(61*time.Minute))
	if !second.Duplicate || second.Job.ID == first.Job.ID {
		t.Fatalf("after the period a create answered %s (duplicate %v), want the live job without a period", second.Job.ID, second.Duplicate)
	}
	c2 := e.mustClaim(tenantA, workerA, "default", second.Job.ID, at(62*time.Minute))
	e.complete(tenantA, c2.Token, at(62*time.Minute+time.Second))
	third := e.mustUnique(tenantA, spec("default"), u, at(64*time.Minute))
	wantFresh(t, third, "a create after the period with no live holder")
	wantDuplicateOf(t, e.mustUnique(tenantA, spec("default"), u, at(65*time.Minute)), third.Job, "a create within the new period")
}

func testUniqueFail(t *testing.T, h Harness) {
	e := setup(t, h)
	first := e.mustUnique(tenantA, spec("default"), store.UniqueOptions{Key: "once"}, base)
	_, err := e.createUnique(e.s, tenantA, spec("default"), store.UniqueOptions{Key: "once", OnConflict: store.UniqueFail}, at(time.Second))
	wantErr(t, err, store.ErrUniqueConflict, "a FAIL create with a held key")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 1 || jobs[0].ID != first.Job.ID {
		t.Fatalf("%d jobs exist after the refused create, want only the holder", len(jobs))
	}
}

func testUniqueBatch(t *testing.T, h Harness) {
	e := setup(t, h)
	holder := e.mustUnique(tenantA, spec("default"), store.UniqueOptions{Key: "k1"}, base)
	reqs := []store.CreateRequest{
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "k1"}}, // held
		{Spec: spec("default")}, // plain
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "k2"}}, // new
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "k2"}}, // repeats item 2
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "k3"}, RequestID: "r3"},
	}
	res, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: reqs, Now: at(time.Second)})
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	wantDuplicateOf(t, res[0], holder.Job, "item 0")
	wantFresh(t, res[1], "item 1")
	wantFresh(t, res[2], "item 2")
	wantDuplicateOf(t, res[3], res[2].Job, "item 3")
	wantFresh(t, res[4], "item 4")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 4 {
		t.Fatalf("%d jobs exist, want 4 (the holder and three new)", len(jobs))
	}
	for _, r := range []store.CreateResult{res[1], res[2], res[4]} {
		wantEvents(t, e.events(tenantA, r.Job.ID), store.EventQueued)
	}
	// Sent again, the batch creates only the plain job.
	again, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: reqs, Now: at(2 * time.Second)})
	if err != nil {
		t.Fatalf("batch again: %v", err)
	}
	wantDuplicateOf(t, again[2], res[2].Job, "item 2 again")
	if !again[4].Replayed || again[4].Job.ID != res[4].Job.ID {
		t.Fatalf("item 4 again (request id r3) answered %s replayed %v, want the replay of %s", again[4].Job.ID, again[4].Replayed, res[4].Job.ID)
	}
	wantFresh(t, again[1], "the plain item again")
}

func testUniqueBatchFail(t *testing.T, h Harness) {
	e := setup(t, h)
	e.mustUnique(tenantA, spec("default"), store.UniqueOptions{Key: "taken"}, base)
	reqs := []store.CreateRequest{
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "fresh-1"}, RequestID: "rid-1"},
		{Spec: spec("default")},
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "taken", OnConflict: store.UniqueFail}},
	}
	_, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: reqs, Now: at(time.Second)})
	wantErr(t, err, store.ErrUniqueConflict, "a batch whose FAIL item is held")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 1 {
		t.Fatalf("%d jobs exist after the refused batch, want only the holder", len(jobs))
	}
	// Nothing of the batch stayed: its key and request id are free.
	r, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: at(2 * time.Second),
		Requests: []store.CreateRequest{{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "fresh-1"}, RequestID: "rid-1"}}})
	if err != nil {
		t.Fatalf("create after the refused batch: %v", err)
	}
	wantFresh(t, r[0], "the refused batch's first item sent alone")
	// A FAIL item repeating an earlier item's key fails the batch too.
	_, err = e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: at(3 * time.Second), Requests: []store.CreateRequest{
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "twice"}},
		{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "twice", OnConflict: store.UniqueFail}},
	}})
	wantErr(t, err, store.ErrUniqueConflict, "a batch repeating a key with FAIL")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 2 {
		t.Fatalf("%d jobs exist, want 2", len(jobs))
	}
}

func testUniqueDuplicateTakesNoRequestID(t *testing.T, h Harness) {
	e := setup(t, h)
	holder := e.mustUnique(tenantA, spec("default"), store.UniqueOptions{Key: "k"}, base)
	res, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: at(time.Second),
		Requests: []store.CreateRequest{{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "k"}, RequestID: "rid"}}})
	if err != nil {
		t.Fatalf("duplicate with a request id: %v", err)
	}
	wantDuplicateOf(t, res[0], holder.Job, "the duplicate")
	c := e.mustClaim(tenantA, workerA, "default", holder.Job.ID, at(2*time.Second))
	e.complete(tenantA, c.Token, at(3*time.Second))
	// The request id was not recorded, so the same request now creates.
	res, err = e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: at(4 * time.Second),
		Requests: []store.CreateRequest{{Spec: spec("default"), Unique: &store.UniqueOptions{Key: "k"}, RequestID: "rid"}}})
	if err != nil {
		t.Fatalf("resend: %v", err)
	}
	wantFresh(t, res[0], "the resent request after the holder finished")
}

func testUniqueConcurrent(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	const n = 40
	var (
		wg      sync.WaitGroup
		start   = make(barrier)
		results = make([]store.CreateResult, n)
		errs    = make([]error, n)
	)
	for i := range n {
		s := e.s
		if i%2 == 1 {
			s = other
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			sp := spec("default")
			sp.Payload = []byte{byte(i)} // the payload is not part of the key
			results[i], errs[i] = e.createUnique(s, tenantA, sp, store.UniqueOptions{Key: "the-one"}, base)
		}()
	}
	start.open()
	wg.Wait()
	ids := map[string]bool{}
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d of %d with one unique key failed: %v", i, n, errs[i])
		}
		ids[results[i].Job.ID] = true
		if !results[i].Duplicate {
			fresh++
		}
	}
	if len(ids) != 1 || fresh != 1 {
		t.Fatalf("%d concurrent creates with one key returned %d distinct jobs and %d new ones, want 1 and 1", n, len(ids), fresh)
	}
	jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 1000})
	if len(jobs) != 1 {
		t.Fatalf("%d jobs exist, want 1", len(jobs))
	}
	wantEvents(t, e.events(tenantA, jobs[0].ID), store.EventQueued)
}

func testUniquePrune(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "p", Period: time.Hour}
	first := e.mustUnique(tenantA, spec("default"), u, base)
	res, err := e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: base, Now: at(30 * time.Minute)})
	if err != nil || res.UniqueKeys != 0 {
		t.Fatalf("prune within the period removed %d records (%v), want 0", res.UniqueKeys, err)
	}
	res, err = e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: base, Now: at(2 * time.Hour)})
	if err != nil || res.UniqueKeys != 1 {
		t.Fatalf("prune after the period removed %d records (%v), want 1", res.UniqueKeys, err)
	}
	// The live job still holds the key without its record.
	wantDuplicateOf(t, e.mustUnique(tenantA, spec("default"), u, at(3*time.Hour)), first.Job, "a create after the record was pruned")
}

func testUniquePrunedHolder(t *testing.T, h Harness) {
	e := setup(t, h)
	u := store.UniqueOptions{Key: "pruned", Period: 24 * time.Hour}
	first := e.mustUnique(tenantA, spec("default"), u, base)
	c := e.mustClaim(tenantA, workerA, "default", first.Job.ID, at(time.Second))
	e.complete(tenantA, c.Token, at(2*time.Second))
	res, err := e.s.Prune(e.ctx, store.PruneParams{FinishedBefore: at(time.Minute), Now: at(time.Hour)})
	if err != nil || res.Jobs != 1 || res.UniqueKeys != 0 {
		t.Fatalf("prune: %+v, %v; want the job pruned and its unexpired record kept", res, err)
	}
	second := e.mustUnique(tenantA, spec("default"), u, at(2*time.Hour))
	wantFresh(t, second, "a create within the period after the holder was pruned")
	wantDuplicateOf(t, e.mustUnique(tenantA, spec("default"), u, at(3*time.Hour)), second.Job, "the next create within the new period")
}
