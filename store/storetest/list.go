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
