package storetest

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// filterTests cover store.JobFilter in ListJobs, ListDeadJobs and
// CountJobs: every field, their AND, the OR of a list's values, and the
// bounds.
func filterTests() group {
	return group{name: "Filter", cases: []testCase{
		{"every filter field selects exactly its jobs in ListJobs and CountJobs", testFilterFields},
		{"a filter is ANDed with the list's own queue, kind and state fields", testFilterAndListFields},
		{"a filtered list pages with its cursor, every job once", testFilterPaging},
		{"a filtered dead-job list keeps to DEAD jobs and the abandoned rule", testFilterDeadJobs},
		{"a filter never reaches another tenant's jobs", testFilterTenant},
		{"CountJobs caps its count at Limit and samples the newest jobs in the BASIC view", testCountJobsCapAndSample},
		{"an invalid filter or count is ErrInvalid with a FilterError naming the field", testFilterInvalid},
	}}
}

// filterFixture is one job in each state, with distinct queues, kinds,
// metadata, times, error codes, dependency, concurrency key and schedule.
type filterFixture struct {
	ids   map[string]string // name → job id
	other string            // tenant B's job, a twin of q1
}

// names of the fixture's jobs, in creation order (base + i seconds).
var filterNames = []string{"q1", "q2", "leased", "succeeded", "failed", "cancelled", "dead", "scheduled"}

func newFilterFixture(e *env) filterFixture {
	e.t.Helper()
	fx := filterFixture{ids: map[string]string{}}
	mk := func(name, queue, kind string, i int, edit func(*store.JobSpec)) {
		sp := spec(queue)
		sp.Kind = kind
		sp.Metadata = map[string]string{"origin": "storetest"}
		if edit != nil {
			edit(&sp)
		}
		fx.ids[name] = e.mustCreate(tenantA, sp, at(time.Duration(i)*time.Second)).ID
	}
	q1 := func(sp *store.JobSpec) {
		sp.Metadata["customer"] = "42"
		sp.Metadata["team/x y"] = "blue"
		sp.Dependency = "pay-api"
		sp.ConcurrencyKey = "cust-42"
	}
	mk("q1", "fa", "k.a", 0, q1)
	mk("q2", "fb", "k.b", 1, func(sp *store.JobSpec) { sp.Metadata["customer"] = "7" })
	mk("leased", "fl", "k.b", 2, nil)
	mk("succeeded", "fc", "email.send", 3, nil)
	mk("failed", "fc", "email.send", 4, nil)
	mk("cancelled", "fb", "email.send", 5, nil)
	fx.ids["dead"] = e.deadJob(tenantA, "fd", at(6*time.Second)).ID // dead at base+8s, upstream_503
	mk("scheduled", "fa", "email.send", 7, func(sp *store.JobSpec) { sp.Metadata[store.ScheduleMetadataKey] = "nightly" })

	e.mustClaim(tenantA, workerA, "fl", fx.ids["leased"], at(9*time.Second))
	c := e.mustClaim(tenantA, workerA, "fc", fx.ids["succeeded"], at(9*time.Second))
	if c.Job.ID != fx.ids["succeeded"] {
		e.t.Fatalf("claimed %s from fc, want the succeeded fixture %s", c.Job.ID, fx.ids["succeeded"])
	}
	e.complete(tenantA, c.Token, at(10*time.Second))
	c = e.mustClaim(tenantA, workerA, "fc", fx.ids["failed"], at(10*time.Second))
	if c.Job.ID != fx.ids["failed"] {
		e.t.Fatalf("claimed %s from fc, want the failed fixture %s", c.Job.ID, fx.ids["failed"])
	}
	if j := e.retry(tenantA, c.Token, store.JobError{Code: "BAD_INPUT", Message: "no", Retryable: false}, 0, at(11*time.Second)); j.State != store.JobStateFailed {
		e.t.Fatalf("a non-retryable failure left the job %s, want failed", j.State)
	}
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: fx.ids["cancelled"], Now: at(12 * time.Second)}); err != nil {
		e.t.Fatalf("cancel the cancelled fixture: %v", err)
	}

	sp := spec("fa")
	sp.Kind = "k.a"
	sp.Metadata = map[string]string{"origin": "storetest"}
	q1(&sp)
	fx.other = e.mustCreate(tenantB, sp, base).ID
	return fx
}

// names maps job ids back to fixture names, sorted; an unknown id is
// "?<id>".
func (fx filterFixture) names(ids []string) []string {
	var out []string
	for _, id := range ids {
		name := "?" + id
		for n, fid := range fx.ids {
			if fid == id {
				name = n
			}
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

func jobIDs(jobs []*store.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

func sorted(names ...string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return out
}

func testFilterFields(t *testing.T, h Harness) {
	e := setup(t, h)
	fx := newFilterFixture(e)
	ns := time.Nanosecond
	cases := []struct {
		name string
		f    store.JobFilter
		want []string
	}{
		{"zero", store.JobFilter{}, filterNames},
		{"one queue", store.JobFilter{Queues: []string{"fa"}}, []string{"q1", "scheduled"}},
		{"two queues", store.JobFilter{Queues: []string{"fa", "fb"}}, []string{"q1", "q2", "cancelled", "scheduled"}},
		{"an unknown queue", store.JobFilter{Queues: []string{"nowhere"}}, nil},
		{"queued", store.JobFilter{States: []store.JobState{store.JobStateQueued}}, []string{"q1", "q2", "scheduled"}},
		{"leased", store.JobFilter{States: []store.JobState{store.JobStateLeased}}, []string{"leased"}},
		{"succeeded or failed", store.JobFilter{States: []store.JobState{store.JobStateSucceeded, store.JobStateFailed}}, []string{"succeeded", "failed"}},
		{"cancelled", store.JobFilter{States: []store.JobState{store.JobStateCancelled}}, []string{"cancelled"}},
		{"dead", store.JobFilter{States: []store.JobState{store.JobStateDead}}, []string{"dead"}},
		{"kind", store.JobFilter{Kinds: []string{"k.b"}}, []string{"q2", "leased"}},
		{"two kinds", store.JobFilter{Kinds: []string{"k.a", "k.b"}}, []string{"q1", "q2", "leased"}},
		{"metadata", store.JobFilter{Metadata: map[string]string{"customer": "42"}}, []string{"q1"}},
		{"two metadata pairs", store.JobFilter{Metadata: map[string]string{"customer": "42", "team/x y": "blue"}}, []string{"q1"}},
		{"metadata pairs that do not all hold", store.JobFilter{Metadata: map[string]string{"customer": "42", "team/x y": "red"}}, nil},
		{"a metadata pair every job has", store.JobFilter{Metadata: map[string]string{"origin": "storetest"}}, filterNames},
		{"a metadata value of another key", store.JobFilter{Metadata: map[string]string{"origin": "42"}}, nil},
		{"created after (inclusive)", store.JobFilter{CreatedAfter: at(2 * time.Second)}, []string{"leased", "succeeded", "failed", "cancelled", "dead", "scheduled"}},
		{"created before (exclusive)", store.JobFilter{CreatedBefore: at(2 * time.Second)}, []string{"q1", "q2"}},
		{"created in a range", store.JobFilter{CreatedAfter: at(time.Second), CreatedBefore: at(3 * time.Second)}, []string{"q2", "leased"}},
		{"created after a nanosecond past a job", store.JobFilter{CreatedAfter: at(time.Second + ns)}, []string{"leased", "succeeded", "failed", "cancelled", "dead", "scheduled"}},
		{"created before a nanosecond past a job", store.JobFilter{CreatedBefore: at(time.Second + ns)}, []string{"q1", "q2"}},
		{"finished after (inclusive)", store.JobFilter{FinishedAfter: at(10 * time.Second)}, []string{"succeeded", "failed", "cancelled"}},
		{"finished before (exclusive)", store.JobFilter{FinishedBefore: at(10 * time.Second)}, []string{"dead"}},
		{"finished in a range", store.JobFilter{FinishedAfter: at(10 * time.Second), FinishedBefore: at(12 * time.Second)}, []string{"succeeded", "failed"}},
		{"an error code", store.JobFilter{ErrorCodes: []string{"BAD_INPUT"}}, []string{"failed"}},
		{"two error codes", store.JobFilter{ErrorCodes: []string{"BAD_INPUT", "upstream_503"}}, []string{"failed", "dead"}},
		{"dependency", store.JobFilter{Dependency: "pay-api"}, []string{"q1"}},
		{"concurrency key", store.JobFilter{ConcurrencyKey: "cust-42"}, []string{"q1"}},
		{"schedule", store.JobFilter{Schedule: "nightly"}, []string{"scheduled"}},
		{"another schedule", store.JobFilter{Schedule: "weekly"}, nil},
		{"ids, one of another tenant", store.JobFilter{IDs: []string{fx.ids["q1"], fx.ids["dead"], fx.other}}, []string{"q1", "dead"}},
		{"fields together", store.JobFilter{
			Queues: []string{"fa", "fb"}, States: []store.JobState{store.JobStateQueued},
			Metadata: map[string]string{"customer": "7"}, Kinds: []string{"k.b"},
			CreatedAfter: at(time.Second), CreatedBefore: at(2 * time.Second),
		}, []string{"q2"}},
		{"fields that exclude each other", store.JobFilter{Queues: []string{"fa"}, Kinds: []string{"k.b"}}, nil},
	}
	for _, c := range cases {
		want := sorted(c.want...)
		got := fx.names(jobIDs(e.allJobs(store.ListJobsParams{Tenant: tenantA, Filter: c.f, Limit: store.ListLimitMax})))
		if !slices.Equal(got, want) {
			t.Errorf("%s: ListJobs with filter %q listed %v, want %v", c.name, c.f.String(), got, want)
		}
		n, err := e.s.CountJobs(e.ctx, store.CountJobsParams{Tenant: tenantA, Filter: c.f, SampleSize: store.CountSampleMax})
		if err != nil {
			t.Errorf("%s: CountJobs: %v", c.name, err)
			continue
		}
		if n.Count != int64(len(want)) || n.Capped {
			t.Errorf("%s: CountJobs counted %d (capped %v), want %d", c.name, n.Count, n.Capped, len(want))
		}
		if got := fx.names(jobIDs(n.Sample)); !slices.Equal(got, want) {
			t.Errorf("%s: CountJobs sampled %v, want %v", c.name, got, want)
		}
		// The string form selects the same jobs.
		parsed, err := store.ParseJobFilter(c.f.String())
		if err != nil {
			t.Errorf("%s: ParseJobFilter(%q): %v", c.name, c.f.String(), err)
			continue
		}
		if got := fx.names(jobIDs(e.allJobs(store.ListJobsParams{Tenant: tenantA, Filter: parsed, Limit: store.ListLimitMax}))); !slices.Equal(got, want) {
			t.Errorf("%s: ListJobs with the parsed filter %q listed %v, want %v", c.name, c.f.String(), got, want)
		}
	}
}

func testFilterAndListFields(t *testing.T, h Harness) {
	e := setup(t, h)
	fx := newFilterFixture(e)
	cases := []struct {
		name string
		p    store.ListJobsParams
		want []string
	}{
		{"queue and a state filter", store.ListJobsParams{Queue: "fa", Filter: store.JobFilter{States: []store.JobState{store.JobStateQueued}}}, []string{"q1", "scheduled"}},
		{"queue and a filter on another queue", store.ListJobsParams{Queue: "fa", Filter: store.JobFilter{Queues: []string{"fb"}}}, nil},
		{"kind and a queue filter", store.ListJobsParams{Kind: "k.b", Filter: store.JobFilter{Queues: []string{"fb", "fl"}}}, []string{"q2", "leased"}},
		{"states and a state filter", store.ListJobsParams{
			States: []store.JobState{store.JobStateQueued, store.JobStateDead},
			Filter: store.JobFilter{States: []store.JobState{store.JobStateDead, store.JobStateFailed}},
		}, []string{"dead"}},
	}
	for _, c := range cases {
		c.p.Tenant = tenantA
		got := fx.names(jobIDs(e.allJobs(c.p)))
		if want := sorted(c.want...); !slices.Equal(got, want) {
			t.Errorf("%s: listed %v, want %v", c.name, got, want)
		}
	}
}

func testFilterPaging(t *testing.T, h Harness) {
	e := setup(t, h)
	var want []string
	for i := range 7 {
		sp := spec("fp")
		if i%2 == 0 {
			sp.Metadata = map[string]string{"pick": "yes"}
			want = append(want, e.mustCreate(tenantA, sp, at(time.Duration(i/2)*time.Second)).ID)
		} else {
			e.mustCreate(tenantA, sp, at(time.Duration(i/2)*time.Second))
		}
	}
	f := store.JobFilter{Metadata: map[string]string{"pick": "yes"}}
	for _, limit := range []int{1, 2, 3} {
		jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Filter: f, Limit: limit})
		got := jobIDs(jobs)
		for i := 1; i < len(jobs); i++ {
			if jobs[i].CreatedAt.After(jobs[i-1].CreatedAt) {
				t.Fatalf("limit %d: not newest first at %d", limit, i)
			}
		}
		slices.Sort(got)
		w := sorted(want...)
		if !slices.Equal(got, w) {
			t.Fatalf("limit %d: paged %v, want %v", limit, got, w)
		}
	}
}

func testFilterDeadJobs(t *testing.T, h Harness) {
	e := setup(t, h)
	fx := newFilterFixture(e)
	dead2 := e.deadJob(tenantA, "fe", at(20*time.Second))
	abandoned := e.deadJob(tenantA, "fd", at(30*time.Second))
	if _, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: abandoned.ID, Now: at(40 * time.Second)}); err != nil {
		t.Fatalf("abandon: %v", err)
	}
	fx.ids["dead2"], fx.ids["abandoned"] = dead2.ID, abandoned.ID
	list := func(p store.ListDeadJobsParams) []string {
		t.Helper()
		p.Tenant, p.Limit = tenantA, 1
		var ids []string
		for {
			page, err := e.s.ListDeadJobs(e.ctx, p)
			if err != nil {
				t.Fatalf("list dead jobs with filter %q: %v", p.Filter.String(), err)
			}
			for _, d := range page.DeadJobs {
				ids = append(ids, d.Job.ID)
			}
			if page.NextCursor == "" {
				return fx.names(ids)
			}
			p.Cursor = page.NextCursor
		}
	}
	cases := []struct {
		name string
		p    store.ListDeadJobsParams
		want []string
	}{
		{"no filter", store.ListDeadJobsParams{}, []string{"dead", "dead2"}},
		{"a queue filter", store.ListDeadJobsParams{Filter: store.JobFilter{Queues: []string{"fd"}}}, []string{"dead"}},
		{"a queue filter with abandoned", store.ListDeadJobsParams{IncludeAbandoned: true, Filter: store.JobFilter{Queues: []string{"fd"}}}, []string{"dead", "abandoned"}},
		{"a filter on the error code", store.ListDeadJobsParams{Filter: store.JobFilter{ErrorCodes: []string{"upstream_503"}}}, []string{"dead", "dead2"}},
		{"a filter on finished", store.ListDeadJobsParams{Filter: store.JobFilter{FinishedAfter: at(20 * time.Second)}}, []string{"dead2"}},
		{"a queue and a filter on another queue", store.ListDeadJobsParams{Queue: "fe", Filter: store.JobFilter{Queues: []string{"fd"}}}, nil},
		{"a filter on a state that is not DEAD", store.ListDeadJobsParams{Filter: store.JobFilter{States: []store.JobState{store.JobStateQueued}}}, nil},
		{"a filter on ids", store.ListDeadJobsParams{Filter: store.JobFilter{IDs: []string{fx.ids["q1"], dead2.ID}}}, []string{"dead2"}},
	}
	for _, c := range cases {
		if got, want := list(c.p), sorted(c.want...); !slices.Equal(got, want) {
			t.Errorf("%s: listed %v, want %v", c.name, got, want)
		}
	}
}

func testFilterTenant(t *testing.T, h Harness) {
	e := setup(t, h)
	fx := newFilterFixture(e)
	f := store.JobFilter{Queues: []string{"fa"}, Metadata: map[string]string{"customer": "42"}}
	got := jobIDs(e.allJobs(store.ListJobsParams{Tenant: tenantB, Filter: f}))
	if !slices.Equal(got, []string{fx.other}) {
		t.Errorf("tenant B's filtered list is %v, want only its own job %s", got, fx.other)
	}
	n, err := e.s.CountJobs(e.ctx, store.CountJobsParams{Tenant: tenantB, Filter: store.JobFilter{IDs: []string{fx.ids["q1"], fx.ids["dead"]}}, SampleSize: 10})
	if err != nil || n.Count != 0 || len(n.Sample) != 0 {
		t.Errorf("tenant B counting tenant A's ids: %d jobs, sample %d, %v; want none", n.Count, len(n.Sample), err)
	}
	n, err = e.s.CountJobs(e.ctx, store.CountJobsParams{Tenant: "tenant-c"})
	if err != nil || n.Count != 0 {
		t.Errorf("a tenant with no jobs counts %d, %v; want 0", n.Count, err)
	}
}

func testCountJobsCapAndSample(t *testing.T, h Harness) {
	e := setup(t, h)
	newFilterFixture(e)
	for _, c := range []struct {
		limit  int64
		count  int64
		capped bool
	}{{0, 8, false}, {1, 1, true}, {3, 3, true}, {7, 7, true}, {8, 8, false}, {100, 8, false}} {
		n, err := e.s.CountJobs(e.ctx, store.CountJobsParams{Tenant: tenantA, Limit: c.limit})
		if err != nil {
			t.Fatalf("count with limit %d: %v", c.limit, err)
		}
		if n.Count != c.count || n.Capped != c.capped {
			t.Errorf("count with limit %d: %d capped %v, want %d capped %v", c.limit, n.Count, n.Capped, c.count, c.capped)
		}
		if len(n.Sample) != 0 {
			t.Errorf("count with sample size 0 returned %d jobs", len(n.Sample))
		}
	}
	n, err := e.s.CountJobs(e.ctx, store.CountJobsParams{Tenant: tenantA, SampleSize: 3, Limit: 2})
	if err != nil {
		t.Fatalf("count with a sample: %v", err)
	}
	if n.Count != 2 || !n.Capped {
		t.Errorf("count with limit 2: %d capped %v", n.Count, n.Capped)
	}
	if len(n.Sample) != 3 {
		t.Fatalf("sample of 3 holds %d jobs", len(n.Sample))
	}
	for i, j := range n.Sample {
		wantAt := at(time.Duration(7-i) * time.Second)
		wantTime(t, "sample job's creation", j.CreatedAt, wantAt)
		if j.Payload != nil || j.Result != nil || j.Checkpoint != nil {
			t.Errorf("sample job %d has a payload, result or checkpoint; the sample is BASIC", i)
		}
		if j.Tenant != tenantA || j.Queue == "" || j.State == "" {
			t.Errorf("sample job %d is incomplete: %+v", i, j)
		}
	}
}

func testFilterInvalid(t *testing.T, h Harness) {
	e := setup(t, h)
	long := strings.Repeat("q", store.NameMaxLen+1)
	many := make([]string, store.FilterMaxValues+1)
	for i := range many {
		many[i] = "q"
	}
	bad := []struct {
		field string
		f     store.JobFilter
	}{
		{"queue", store.JobFilter{Queues: []string{"bad queue"}}},
		{"queue", store.JobFilter{Queues: []string{long}}},
		{"queue", store.JobFilter{Queues: many}},
		{"state", store.JobFilter{States: []store.JobState{"sleeping"}}},
		{"kind", store.JobFilter{Kinds: []string{""}}},
		{"metadata", store.JobFilter{Metadata: map[string]string{"": "x"}}},
		{"metadata.k", store.JobFilter{Metadata: map[string]string{"k": "a\x00b"}}},
		{"created", store.JobFilter{CreatedAfter: at(time.Hour), CreatedBefore: at(time.Hour)}},
		{"finished", store.JobFilter{FinishedAfter: at(2 * time.Hour), FinishedBefore: at(time.Hour)}},
		{"created", store.JobFilter{CreatedAfter: time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Hour)}},
		{"error_code", store.JobFilter{ErrorCodes: []string{""}}},
		{"dependency", store.JobFilter{Dependency: "no spaces"}},
		{"concurrency_key", store.JobFilter{ConcurrencyKey: long}},
		{"schedule", store.JobFilter{Schedule: long}},
		{"id", store.JobFilter{IDs: []string{""}}},
	}
	for _, c := range bad {
		check := func(what string, err error) {
			t.Helper()
			var fe *store.FilterError
			if !errors.Is(err, store.ErrInvalid) || !errors.As(err, &fe) {
				t.Errorf("%s with a bad %s filter: got %v, want ErrInvalid as a *store.FilterError", what, c.field, err)
				return
			}
			if fe.Field != c.field {
				t.Errorf("%s with a bad %s filter: the error names field %q (%v)", what, c.field, fe.Field, err)
			}
		}
		_, err := e.s.ListJobs(e.ctx, store.ListJobsParams{Tenant: tenantA, Filter: c.f})
		check("ListJobs", err)
		_, err = e.s.ListDeadJobs(e.ctx, store.ListDeadJobsParams{Tenant: tenantA, Filter: c.f})
		check("ListDeadJobs", err)
		_, err = e.s.CountJobs(e.ctx, store.CountJobsParams{Tenant: tenantA, Filter: c.f})
		check("CountJobs", err)
	}
	for _, p := range []store.CountJobsParams{
		{Tenant: tenantA, SampleSize: -1},
		{Tenant: tenantA, SampleSize: store.CountSampleMax + 1},
		{Tenant: tenantA, Limit: -1},
		{Tenant: ""},
	} {
		if _, err := e.s.CountJobs(e.ctx, p); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("CountJobs(%+v): got %v, want ErrInvalid", p, err)
		}
	}
}
