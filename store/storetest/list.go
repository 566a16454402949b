package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// listTests cover the read side: job listing with filters and cursors, and
// event paging.
func listTests() group {
	return group{name: "List", cases: []testCase{
		{"jobs page newest first with no duplicates or gaps across pages", testListJobsPaging},
		{"jobs are filtered by queue, kind and state", testListJobsFilters},
		{"events page after a sequence in order", testListEventsPaging},
		{"a BASIC list leaves out payloads, results and checkpoint state; FULL has them", testListJobsViews},
		{"a page ends early at its byte budget, always with one job, and paging still lists every job once", testListJobsByteBudget},
		{"dead-job lists have the same views and budget", testListDeadJobsViewsAndBudget},
	}}
}

func testListJobsPaging(t *testing.T, h Harness) {
	e := setup(t, h)
	created := map[string]bool{}
	// Several jobs share a creation instant, so the cursor must break ties.
	for i := range 11 {
		j := e.mustCreate(tenantA, spec("default"), at(time.Duration(i/3)*time.Second))
		created[j.ID] = true
	}
	for _, limit := range []int{1, 2, 3, 4, 11, 50} {
		jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: limit})
		seen := map[string]bool{}
		for i, j := range jobs {
			if seen[j.ID] {
				t.Fatalf("limit %d: job %s listed twice", limit, j.ID)
			}
			seen[j.ID] = true
			if !created[j.ID] {
				t.Fatalf("limit %d: listed unknown job %s", limit, j.ID)
			}
			if i > 0 && j.CreatedAt.After(jobs[i-1].CreatedAt) {
				t.Fatalf("limit %d: job %d created at %s after job %d at %s: not newest first", limit, i, j.CreatedAt, i-1, jobs[i-1].CreatedAt)
			}
		}
		if len(seen) != len(created) {
			t.Fatalf("limit %d: listed %d of %d jobs", limit, len(seen), len(created))
		}
	}
	// A page never holds more than its limit.
	page, err := e.s.ListJobs(e.ctx, store.ListJobsParams{Tenant: tenantA, Limit: 4})
	if err != nil || len(page.Jobs) != 4 || page.NextCursor == "" {
		t.Fatalf("first page of 4: %d jobs, cursor %q, %v", len(page.Jobs), page.NextCursor, err)
	}
	// Jobs created after the first page do not disturb the pages after it.
	e.mustCreate(tenantA, spec("default"), at(time.Hour))
	rest := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 4, Cursor: page.NextCursor})
	if len(rest) != 7 {
		t.Fatalf("after the first page, %d more jobs, want 7", len(rest))
	}
	for _, j := range rest {
		for _, f := range page.Jobs {
			if j.ID == f.ID {
				t.Fatalf("job %s appears on the first page and after it", j.ID)
			}
		}
	}
}

func testListJobsFilters(t *testing.T, h Harness) {
	e := setup(t, h)
	mk := func(queue, kind string) *store.Job {
		sp := spec(queue)
		sp.Kind = kind
		return e.mustCreate(tenantA, sp, base)
	}
	a1 := mk("a", "k1")
	a2 := mk("a", "k2")
	b1 := mk("b", "k1")
	b2 := mk("b", "k2")
	c := e.mustClaim(tenantA, workerA, "a", "", at(time.Second))
	e.complete(tenantA, c.Token, at(2*time.Second))
	done := c.Job.ID
	e.mustClaim(tenantA, workerA, "b", "", at(time.Second))
	ids := func(p store.ListJobsParams) []string {
		p.Tenant = tenantA
		p.Limit = 2
		var out []string
		for _, j := range e.allJobs(p) {
			out = append(out, j.ID)
		}
		slices.Sort(out)
		return out
	}
	sorted := func(s ...string) []string { slices.Sort(s); return s }
	cases := []struct {
		name string
		p    store.ListJobsParams
		want []string
	}{
		{"queue a", store.ListJobsParams{Queue: "a"}, sorted(a1.ID, a2.ID)},
		{"kind k1", store.ListJobsParams{Kind: "k1"}, sorted(a1.ID, b1.ID)},
		{"queue b and kind k2", store.ListJobsParams{Queue: "b", Kind: "k2"}, sorted(b2.ID)},
		{"succeeded", store.ListJobsParams{States: []store.JobState{store.JobStateSucceeded}}, sorted(done)},
		{"queued or leased", store.ListJobsParams{States: []store.JobState{store.JobStateQueued, store.JobStateLeased}}, sorted(slices.DeleteFunc([]string{a1.ID, a2.ID, b1.ID, b2.ID}, func(id string) bool { return id == done })...)},
		{"no such queue", store.ListJobsParams{Queue: "zzz"}, nil},
		{"everything", store.ListJobsParams{}, sorted(a1.ID, a2.ID, b1.ID, b2.ID)},
	}
	for _, tc := range cases {
		if got := ids(tc.p); !slices.Equal(got, tc.want) {
			t.Errorf("filter %s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func testListEventsPaging(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	for i := range 5 {
		if _, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c.Token, Phase: "p", Now: at(time.Duration(2+i) * time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	e.complete(tenantA, c.Token, at(10*time.Second))
	all := e.events(tenantA, j.ID)
	if len(all) != 8 {
		t.Fatalf("%d events, want 8: %v", len(all), eventTypes(all))
	}
	var paged []store.Event
	after := int64(0)
	for range 10 {
		evs, err := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenantA, JobID: j.ID, AfterSequence: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) > 3 {
			t.Fatalf("a page of limit 3 has %d events", len(evs))
		}
		if len(evs) == 0 {
			break
		}
		paged = append(paged, evs...)
		after = evs[len(evs)-1].Sequence
	}
	checkGapless(t, j.ID, paged)
	if len(paged) != len(all) {
		t.Fatalf("paging found %d events, want %d", len(paged), len(all))
	}
	for i := 1; i < len(all); i++ {
		if all[i].Time.Before(all[i-1].Time) {
			t.Fatalf("event %d at %s is before event %d at %s", all[i].Sequence, all[i].Time, all[i-1].Sequence, all[i-1].Time)
		}
	}
}

// bigJobs creates n jobs of payload bytes each in queue, one second apart.
func (e *env) bigJobs(queue string, n, payload int) []*store.Job {
	e.t.Helper()
	var out []*store.Job
	for i := range n {
		sp := spec(queue)
		sp.Payload = make([]byte, payload)
		sp.Payload[0] = byte('a' + i)
		out = append(out, e.mustCreate(tenantA, sp, at(time.Duration(i)*time.Second)))
	}
	return out
}

func testListJobsViews(t *testing.T, h Harness) {
	e := setup(t, h)
	jobs := e.bigJobs("views", 2, 10_000)
	c := e.mustClaim(tenantA, workerA, "views", jobs[0].ID, at(time.Minute))
	if _, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c.Token, Phase: "half", State: []byte("state"), Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	e.complete(tenantA, c.Token, at(time.Minute+time.Second))

	find := func(view store.JobView, id string) *store.Job {
		t.Helper()
		page, err := e.s.ListJobs(e.ctx, store.ListJobsParams{Tenant: tenantA, Queue: "views", Limit: 10, View: view})
		if err != nil || len(page.Jobs) != 2 || page.NextCursor != "" {
			t.Fatalf("list view %d: %d jobs, cursor %q, %v; want both jobs on one page", view, len(page.Jobs), page.NextCursor, err)
		}
		for _, j := range page.Jobs {
			if j.ID == id {
				return j
			}
		}
		t.Fatalf("list view %d lacks job %s", view, id)
		return nil
	}
	basic := find(store.JobViewBasic, jobs[0].ID)
	if basic.Payload != nil || basic.Result != nil {
		t.Fatalf("BASIC job has a %d-byte payload and a %d-byte result; want neither", len(basic.Payload), len(basic.Result))
	}
	if basic.Checkpoint == nil || basic.Checkpoint.Phase != "half" || basic.Checkpoint.State != nil {
		t.Fatalf("BASIC checkpoint %+v; want phase half without state", basic.Checkpoint)
	}
	if basic.State != store.JobStateSucceeded || basic.Metadata["origin"] != "storetest" || basic.Kind != "email.send" {
		t.Fatalf("BASIC job lost its other fields: %+v", basic)
	}
	full := find(store.JobViewFull, jobs[0].ID)
	if len(full.Payload) != 10_000 || string(full.Result) != `"ok"` || full.Checkpoint == nil || string(full.Checkpoint.State) != "state" {
		t.Fatalf("FULL job: payload %d bytes, result %q, checkpoint %+v", len(full.Payload), full.Result, full.Checkpoint)
	}
}

func testListJobsByteBudget(t *testing.T, h Harness) {
	e := setup(t, h)
	jobs := e.bigJobs("budget", 5, 100_000)
	list := func(p store.ListJobsParams) (pages int, ids []string) {
		t.Helper()
		p.Tenant, p.Queue = tenantA, "budget"
		for range 20 {
			page, err := e.s.ListJobs(e.ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			if len(page.Jobs) == 0 {
				t.Fatal("an empty page: paging makes no progress")
			}
			pages++
			budget := p.MaxBytes
			if n := len(page.Jobs); n > 1 && sumSizes(page.Jobs) > budget {
				t.Fatalf("a page of %d jobs is %d bytes, over its budget of %d", n, sumSizes(page.Jobs), budget)
			}
			for _, j := range page.Jobs {
				ids = append(ids, j.ID)
			}
			if page.NextCursor == "" {
				return pages, ids
			}
			p.Cursor = page.NextCursor
		}
		t.Fatal("the cursor never ends")
		return 0, nil
	}
	want := make([]string, 0, len(jobs))
	for i := len(jobs) - 1; i >= 0; i-- {
		want = append(want, jobs[i].ID) // newest first
	}
	// Two jobs fit 250 KB, three do not.
	pages, ids := list(store.ListJobsParams{Limit: 50, View: store.JobViewFull, MaxBytes: 250_000})
	if pages != 3 || !slices.Equal(ids, want) {
		t.Fatalf("FULL with 250 KB pages: %d pages, ids %v; want 3 pages listing %v", pages, ids, want)
	}
	// A budget smaller than one job still moves on, one job a page.
	pages, ids = list(store.ListJobsParams{Limit: 50, View: store.JobViewFull, MaxBytes: 1})
	if pages != 5 || !slices.Equal(ids, want) {
		t.Fatalf("FULL with 1-byte pages: %d pages, ids %v; want 5 pages of one job", pages, ids)
	}
	// BASIC jobs are small: all on one page of the same budget.
	pages, ids = list(store.ListJobsParams{Limit: 50, View: store.JobViewBasic, MaxBytes: 250_000})
	if pages != 1 || !slices.Equal(ids, want) {
		t.Fatalf("BASIC with 250 KB pages: %d pages, ids %v; want one page", pages, ids)
	}
	// The limit still applies within the budget.
	pages, _ = list(store.ListJobsParams{Limit: 2, View: store.JobViewBasic, MaxBytes: 250_000})
	if pages != 3 {
		t.Fatalf("BASIC pages of 2: %d pages, want 3", pages)
	}
}

func sumSizes(jobs []*store.Job) int {
	n := 0
	for _, j := range jobs {
		n += store.JobSize(j)
	}
	return n
}

func testListDeadJobsViewsAndBudget(t *testing.T, h Harness) {
	e := setup(t, h)
	for i := range 3 {
		sp := spec("dead-views")
		sp.MaxAttempts = 1
		sp.Payload = make([]byte, 100_000)
		j := e.mustCreate(tenantA, sp, at(time.Duration(i)*time.Minute))
		c := e.mustClaim(tenantA, workerA, "dead-views", j.ID, at(time.Duration(i)*time.Minute+time.Second))
		e.retry(tenantA, c.Token, store.JobError{Code: "boom", Message: "failed", Retryable: true}, 0, at(time.Duration(i)*time.Minute+2*time.Second))
	}
	basic, err := e.s.ListDeadJobs(e.ctx, store.ListDeadJobsParams{Tenant: tenantA, Limit: 10, View: store.JobViewBasic, MaxBytes: 250_000})
	if err != nil || len(basic.DeadJobs) != 3 || basic.NextCursor != "" {
		t.Fatalf("BASIC dead jobs: %d, cursor %q, %v; want 3 on one page", len(basic.DeadJobs), basic.NextCursor, err)
	}
	for _, d := range basic.DeadJobs {
		if d.Job.Payload != nil || len(d.Attempts) != 1 {
			t.Fatalf("BASIC dead job: %d-byte payload, %d attempts; want no payload and its attempt", len(d.Job.Payload), len(d.Attempts))
		}
	}
	p := store.ListDeadJobsParams{Tenant: tenantA, Limit: 10, View: store.JobViewFull, MaxBytes: 250_000}
	seen := 0
	for pages := 1; ; pages++ {
		page, err := e.s.ListDeadJobs(e.ctx, p)
		if err != nil || len(page.DeadJobs) == 0 || len(page.DeadJobs) > 2 {
			t.Fatalf("FULL dead page %d: %d jobs, %v; want 1 or 2", pages, len(page.DeadJobs), err)
		}
		for _, d := range page.DeadJobs {
			if len(d.Job.Payload) != 100_000 {
				t.Fatalf("FULL dead job has a %d-byte payload", len(d.Job.Payload))
			}
		}
		seen += len(page.DeadJobs)
		if page.NextCursor == "" {
			if pages != 2 || seen != 3 {
				t.Fatalf("FULL dead jobs: %d pages, %d jobs; want 2 pages of 3 jobs", pages, seen)
			}
			return
		}
		p.Cursor = page.NextCursor
	}
}
