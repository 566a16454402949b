package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// idempotencyTests cover contract point 2: (tenant, key) resolves to one
// logical operation by a canonical fingerprint.
func idempotencyTests() group {
	return group{name: "Idempotency", cases: []testCase{
		{"a replay returns the original job and adds no event", testReplay},
		{"the same key with another request conflicts and writes nothing", testConflict},
		{"canonically equal requests replay whatever the metadata order", testCanonicalReplay},
		{"a batch replays and conflicts item by item", testBatchIdempotency},
		{"one hundred concurrent creates with one key make exactly one job", testConcurrentIdempotentCreates},
		{"after the idempotency window the same key creates a new job", testIdempotencyWindow},
	}}
}

func (e *env) createWithKey(s store.Store, tenant string, sp store.JobSpec, key string, window time.Duration, now time.Time) (store.CreateResult, error) {
	res, err := s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant: tenant, IdempotencyWindow: window, Now: now,
		Requests: []store.CreateRequest{{Spec: sp, RequestID: key}},
	})
	if err != nil {
		return store.CreateResult{}, err
	}
	if len(res) != 1 || res[0].Job == nil {
		return store.CreateResult{}, fmt.Errorf("create returned %d results, want 1 with a job", len(res))
	}
	return res[0], nil
}

func testReplay(t *testing.T, h Harness) {
	e := setup(t, h)
	orig := e.createIn(e.s, tenantA, spec("default"), "order-42", base)
	for i := range 3 {
		r, err := e.createWithKey(e.s, tenantA, spec("default"), "order-42", 0, at(time.Duration(i+1)*time.Minute))
		if err != nil {
			t.Fatalf("replay %d: %v", i+1, err)
		}
		if !r.Replayed || r.Job.ID != orig.ID {
			t.Fatalf("replay %d returned job %s (replayed %v), want the original %s", i+1, r.Job.ID, r.Replayed, orig.ID)
		}
		wantTime(t, "the replayed job's created_at", r.Job.CreatedAt, base)
	}
	wantEvents(t, e.events(tenantA, orig.ID), store.EventQueued)
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 1 {
		t.Fatalf("replays left %d jobs, want 1", len(jobs))
	}
	// A replay after the job moved on returns the job as it is now.
	c := e.mustClaim(tenantA, workerA, "default", orig.ID, at(10*time.Minute))
	e.complete(tenantA, c.Token, at(10*time.Minute+time.Second))
	r, err := e.createWithKey(e.s, tenantA, spec("default"), "order-42", 0, at(12*time.Minute))
	if err != nil || !r.Replayed || r.Job.ID != orig.ID || r.Job.State != store.JobStateSucceeded {
		t.Fatalf("replay of a finished job: %+v, %v; want the succeeded original", r, err)
	}
}

func testConflict(t *testing.T, h Harness) {
	e := setup(t, h)
	orig := e.createIn(e.s, tenantA, spec("default"), "order-42", base)
	variants := map[string]func(*store.JobSpec){
		"payload":      func(s *store.JobSpec) { s.Payload = []byte(`{"to":"bob@example.com"}`) },
		"queue":        func(s *store.JobSpec) { s.Queue = "other" },
		"kind":         func(s *store.JobSpec) { s.Kind = "sms.send" },
		"metadata":     func(s *store.JobSpec) { s.Metadata = map[string]string{"origin": "elsewhere"} },
		"priority":     func(s *store.JobSpec) { s.Priority = 1 },
		"max attempts": func(s *store.JobSpec) { s.MaxAttempts = 2 },
		"run at":       func(s *store.JobSpec) { s.RunAt = at(time.Hour) },
	}
	for name, change := range variants {
		sp := spec("default")
		change(&sp)
		_, err := e.createWithKey(e.s, tenantA, sp, "order-42", 0, at(time.Minute))
		wantErr(t, err, store.ErrIdempotencyConflict, "same key with another "+name)
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 1 {
		t.Fatalf("conflicting creates left %d jobs, want 1", len(jobs))
	}
	wantEvents(t, e.events(tenantA, orig.ID), store.EventQueued)
	// The original request still replays after the conflicts.
	r, err := e.createWithKey(e.s, tenantA, spec("default"), "order-42", 0, at(2*time.Minute))
	if err != nil || !r.Replayed || r.Job.ID != orig.ID {
		t.Fatalf("replay after conflicts: %+v, %v", r, err)
	}
}

func testCanonicalReplay(t *testing.T, h Harness) {
	e := setup(t, h)
	keys := []string{"k01", "k02", "k03", "k04", "k05", "k06", "k07", "k08", "k09", "k10", "k11", "k12"}
	forward := map[string]string{}
	for _, k := range keys {
		forward[k] = "v-" + k
	}
	backward := map[string]string{}
	for i := len(keys) - 1; i >= 0; i-- {
		backward[keys[i]] = "v-" + keys[i]
	}
	sp := spec("default")
	sp.Metadata = forward
	orig := e.createIn(e.s, tenantA, sp, "canon", base)
	for i := range 5 {
		sp2 := spec("default")
		sp2.Metadata = backward
		// A fresh copy of the payload: the fingerprint must hash content,
		// not identity.
		sp2.Payload = append([]byte(nil), sp.Payload...)
		r, err := e.createWithKey(e.s, tenantA, sp2, "canon", 0, at(time.Duration(i+1)*time.Second))
		if err != nil || !r.Replayed || r.Job.ID != orig.ID {
			t.Fatalf("equal request with metadata built in reverse order: %+v, %v; want a replay of %s", r, err, orig.ID)
		}
	}
	// RunAfter is part of the request as a duration: the same "in 10
	// minutes" sent a minute later is the same request.
	sp3 := spec("delayed")
	sp3.RunAfter = 10 * time.Minute
	first := e.createIn(e.s, tenantA, sp3, "delayed", base)
	r, err := e.createWithKey(e.s, tenantA, sp3, "delayed", 0, at(time.Minute))
	if err != nil || !r.Replayed || r.Job.ID != first.ID {
		t.Fatalf("same run_after a minute later: %+v, %v; want a replay", r, err)
	}
}

func testBatchIdempotency(t *testing.T, h Harness) {
	e := setup(t, h)
	reqs := []store.CreateRequest{
		{Spec: spec("q1"), RequestID: "a"},
		{Spec: spec("q2"), RequestID: "b"},
		{Spec: spec("q3")},
	}
	first, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: reqs, Now: base})
	if err != nil || len(first) != 3 {
		t.Fatalf("batch create: %d results, %v", len(first), err)
	}
	for i, r := range first {
		if r.Replayed || r.Job.Queue != reqs[i].Spec.Queue {
			t.Fatalf("result %d is %+v, want a new job in %s (results in request order)", i, r.Job, reqs[i].Spec.Queue)
		}
		wantEvents(t, e.events(tenantA, r.Job.ID), store.EventQueued)
	}
	// Again, plus a new keyed item: the keyed ones replay, the unkeyed and
	// the new one are created.
	again := append(append([]store.CreateRequest(nil), reqs...), store.CreateRequest{Spec: spec("q4"), RequestID: "c"})
	second, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: again, Now: at(time.Second)})
	if err != nil || len(second) != 4 {
		t.Fatalf("second batch: %d results, %v", len(second), err)
	}
	if !second[0].Replayed || second[0].Job.ID != first[0].Job.ID || !second[1].Replayed || second[1].Job.ID != first[1].Job.ID {
		t.Fatalf("keyed items did not replay: %+v", second[:2])
	}
	if second[2].Replayed || second[2].Job.ID == first[2].Job.ID || second[3].Replayed {
		t.Fatalf("unkeyed or new items were replayed: %+v", second[2:])
	}
	// One conflicting item fails the whole batch; its new item is not created.
	conflicting := spec("q2")
	conflicting.Payload = []byte("different")
	_, err = e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: at(2 * time.Second),
		Requests: []store.CreateRequest{{Spec: spec("q5"), RequestID: "d"}, {Spec: conflicting, RequestID: "b"}}})
	wantErr(t, err, store.ErrIdempotencyConflict, "a batch with one conflicting item")
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Queue: "q5", Limit: 10}); len(jobs) != 0 {
		t.Fatalf("the conflicting batch created %d jobs in q5", len(jobs))
	}
	if jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 100}); len(jobs) != 5 {
		t.Fatalf("%d jobs in total, want 5", len(jobs))
	}
}

func testConcurrentIdempotentCreates(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	const n = 100
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
			sp.Metadata = map[string]string{"x": "1", "y": "2"}
			results[i], errs[i] = e.createWithKey(s, tenantA, sp, "the-one", 0, base)
		}()
	}
	start.open()
	wg.Wait()
	ids := map[string]int{}
	fresh := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("create %d of %d with one key failed: %v", i, n, errs[i])
		}
		ids[results[i].Job.ID]++
		if !results[i].Replayed {
			fresh++
		}
	}
	if len(ids) != 1 || fresh != 1 {
		t.Fatalf("%d concurrent creates with one key returned %d distinct jobs and %d fresh creates, want 1 and 1", n, len(ids), fresh)
	}
	jobs := e.allJobs(store.ListJobsParams{Tenant: tenantA, Limit: 1000})
	if len(jobs) != 1 {
		t.Fatalf("%d jobs exist, want 1", len(jobs))
	}
	wantEvents(t, e.events(tenantA, jobs[0].ID), store.EventQueued)
}

func testIdempotencyWindow(t *testing.T, h Harness) {
	e := setup(t, h)
	const window = time.Hour
	first, err := e.createWithKey(e.s, tenantA, spec("default"), "windowed", window, base)
	if err != nil {
		t.Fatal(err)
	}
	inside, err := e.createWithKey(e.s, tenantA, spec("default"), "windowed", window, at(window-time.Second))
	if err != nil || !inside.Replayed || inside.Job.ID != first.Job.ID {
		t.Fatalf("create inside the window: %+v, %v; want a replay", inside, err)
	}
	// After the window the key is free: even another request is accepted.
	changed := spec("default")
	changed.Payload = []byte("new")
	after, err := e.createWithKey(e.s, tenantA, changed, "windowed", window, at(window+time.Second))
	if err != nil || after.Replayed || after.Job.ID == first.Job.ID {
		t.Fatalf("create after the window: %+v, %v; want a new job", after, err)
	}
	// And the new record replays in its own window.
	again, err := e.createWithKey(e.s, tenantA, changed, "windowed", window, at(window+time.Minute))
	if err != nil || !again.Replayed || again.Job.ID != after.Job.ID {
		t.Fatalf("replay of the new record: %+v, %v", again, err)
	}
	// The default window is IdempotencyWindowDefault.
	def, err := e.createWithKey(e.s, tenantA, spec("default"), "default-window", 0, base)
	if err != nil {
		t.Fatal(err)
	}
	in, err := e.createWithKey(e.s, tenantA, spec("default"), "default-window", 0, at(store.IdempotencyWindowDefault-time.Minute))
	if err != nil || !in.Replayed || in.Job.ID != def.Job.ID {
		t.Fatalf("create inside the default window: %+v, %v; want a replay", in, err)
	}
	out, err := e.createWithKey(e.s, tenantA, spec("default"), "default-window", 0, at(store.IdempotencyWindowDefault+time.Minute))
	if err != nil || out.Replayed {
		t.Fatalf("create after the default window: %+v, %v; want a new job", out, err)
	}
}
