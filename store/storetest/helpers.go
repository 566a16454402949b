package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/leasehold/leasehold/store"
)

// base is the suite's epoch. Every params struct gets an explicit Now
// derived from it, far from the wall clock, so a test that forgot to inject
// time would see nothing claimable and fail rather than pass by luck.
var base = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// at is base plus d.
func at(d time.Duration) time.Time { return base.Add(d) }

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
	workerA = "worker-a"
	workerB = "worker-b"
	workerC = "worker-c"
	// lease is the lease duration most tests claim with.
	lease = 30 * time.Second
)

// errInjected is what BeforeCommit returns when a test injects a fault.
var errInjected = errors.New("storetest: injected commit failure")

// faults is the state behind the EngineOptions hooks of one test's stores.
// Its fields are atomics because engines call the hooks from whatever
// goroutine runs the transaction.
type faults struct {
	// failOn makes BeforeCommit fail: "*" for every write transaction, or
	// one operation name.
	failOn atomic.Pointer[string]
	// commits counts BeforeCommit calls, i.e. write transactions about to
	// commit.
	commits atomic.Int64
	// forcedID, when set, is what NewID returns (duplicate-id faults).
	forcedID atomic.Pointer[string]
	// randomIDs makes NewID return ids that do not sort by creation, so
	// ordering tests can tell "by id" apart from "by insertion".
	randomIDs atomic.Bool
	// rnd holds the float64 bits of the pinned jitter factor.
	rnd atomic.Uint64
	// gate, when set, holds one commit at BeforeCommit (gateCommits).
	gate atomic.Pointer[gateFor]
	// onQueued, when set, is told how many calls wait in a committer
	// (whenQueued).
	onQueued atomic.Pointer[func(string, int)]
}

// whenQueued returns a channel closed once at least n items wait in the
// store's committer ("report" or "create"): a barrier for tests that hold
// a flush.
func (f *faults) whenQueued(committer string, n int) <-chan struct{} {
	ch := make(chan struct{})
	var once sync.Once
	fn := func(c string, queued int) {
		if c == committer && queued >= n {
			once.Do(func() { close(ch) })
		}
	}
	f.onQueued.Store(&fn)
	return ch
}

func newFaults() *faults {
	f := &faults{}
	f.setRand(0.5)
	return f
}

func (f *faults) setRand(v float64) { f.rnd.Store(math.Float64bits(v)) }

func (f *faults) failCommits(op string) { f.failOn.Store(&op) }

func (f *faults) healCommits() { f.failOn.Store(nil) }

func (f *faults) forceID(id string) { f.forcedID.Store(&id) }

func (f *faults) freeIDs() { f.forcedID.Store(nil) }

func (f *faults) options() store.EngineOptions {
	return store.EngineOptions{
		Rand: func() float64 { return math.Float64frombits(f.rnd.Load()) },
		NewID: func() string {
			if p := f.forcedID.Load(); p != nil {
				return *p
			}
			if f.randomIDs.Load() {
				return uuid.NewString()
			}
			return store.NewID()
		},
		Queued: func(committer string, n int) {
			if fn := f.onQueued.Load(); fn != nil {
				(*fn)(committer, n)
			}
		},
		BeforeCommit: func(op string) error {
			f.commits.Add(1)
			f.gate.Load().pass(op)
			if p := f.failOn.Load(); p != nil && (*p == "*" || *p == op) {
				return fmt.Errorf("%w (op %q)", errInjected, op)
			}
			return nil
		},
	}
}

// freshID is an id no job has: UUID-shaped, because an engine may store
// ids in a uuid column and must answer for a missing one like for any
// other missing job.
func freshID() string { return uuid.NewString() }

// env is one subtest's isolated store and its fault hooks.
type env struct {
	t   *testing.T
	h   Harness
	s   store.Store
	f   *faults
	ctx context.Context
}

// setup opens an isolated store whose hooks are wired to a fresh faults.
func setup(t *testing.T, h Harness) *env {
	t.Helper()
	f := newFaults()
	s := h.New(t, f.options())
	if s == nil {
		t.Fatal("Harness.New returned a nil store")
	}
	return &env{t: t, h: h, s: s, f: f, ctx: t.Context()}
}

// shared opens a second store on the same database, sharing the fault hooks.
func (e *env) shared() store.Store {
	e.t.Helper()
	s := e.h.NewShared(e.t, e.s, e.f.options())
	if s == nil {
		e.t.Fatal("Harness.NewShared returned a nil store")
	}
	return s
}

// rows calls Harness.Rows, failing the test when the harness lacks it.
func (e *env) rows(kind RowKind, jobID string) int {
	e.t.Helper()
	if e.h.Rows == nil {
		e.t.Fatalf("Harness.Rows is nil: the %s engine's harness must count rows for this invariant to be checked", e.h.Engine)
	}
	return e.h.Rows(e.t, e.s, kind, jobID)
}

// spec is a valid job spec on queue.
func spec(queue string) store.JobSpec {
	return store.JobSpec{
		Queue:    queue,
		Kind:     "email.send",
		Payload:  []byte(`{"to":"ada@example.com"}`),
		Metadata: map[string]string{"origin": "storetest"},
	}
}

// createIn creates one job through s and returns it.
func (e *env) createIn(s store.Store, tenant string, sp store.JobSpec, requestID string, now time.Time) *store.Job {
	e.t.Helper()
	res, err := s.CreateJobs(e.ctx, store.CreateJobsParams{
		Tenant:   tenant,
		Requests: []store.CreateRequest{{Spec: sp, RequestID: requestID}},
		Now:      now,
	})
	if err != nil {
		e.t.Fatalf("create a job in queue %q: %v", sp.Queue, err)
	}
	if len(res) != 1 || res[0].Job == nil {
		e.t.Fatalf("create returned %d results, want 1 with a job", len(res))
	}
	if res[0].Replayed {
		e.t.Fatalf("a first create (request id %q) was reported as a replay", requestID)
	}
	return res[0].Job
}

// mustCreate creates one job without an idempotency key.
func (e *env) mustCreate(tenant string, sp store.JobSpec, now time.Time) *store.Job {
	e.t.Helper()
	return e.createIn(e.s, tenant, sp, "", now)
}

// claim claims up to n jobs from queue.
func (e *env) claim(tenant, worker, queue string, n int, leaseFor time.Duration, now time.Time) []store.ClaimedJob {
	e.t.Helper()
	got, err := e.s.Claim(e.ctx, store.ClaimParams{
		Tenant: tenant, Worker: worker, Queues: []string{queue}, Max: n,
		LeaseDuration: leaseFor, Now: now,
	})
	if err != nil {
		e.t.Fatalf("claim from %q at %s: %v", queue, now.Format(time.RFC3339), err)
	}
	return got
}

// mustClaim claims exactly one job from queue and checks that it is jobID
// (when jobID is not empty).
func (e *env) mustClaim(tenant, worker, queue, jobID string, now time.Time) store.ClaimedJob {
	e.t.Helper()
	got := e.claim(tenant, worker, queue, 1, lease, now)
	if len(got) != 1 {
		e.t.Fatalf("claim from %q at %s returned %d jobs, want 1", queue, now.Format(time.RFC3339), len(got))
	}
	c := got[0]
	if jobID != "" && c.Job.ID != jobID {
		e.t.Fatalf("claim returned job %s, want %s", c.Job.ID, jobID)
	}
	if c.Token.JobID != c.Job.ID || c.Token.WorkerID != worker || c.Token.Generation != c.Job.LeaseGeneration {
		e.t.Fatalf("claim returned token %+v for job %s (generation %d, worker %s)", c.Token, c.Job.ID, c.Job.LeaseGeneration, worker)
	}
	return c
}

// claimNothing asserts that nothing in queue is claimable at now.
func (e *env) claimNothing(tenant, queue string, now time.Time, why string) {
	e.t.Helper()
	if got := e.claim(tenant, "worker-probe", queue, 10, lease, now); len(got) != 0 {
		ids := make([]string, len(got))
		for i, c := range got {
			ids[i] = c.Job.ID
		}
		e.t.Fatalf("%s: claim from %q returned %v, want nothing", why, queue, ids)
	}
}

// get reads a job that must exist.
func (e *env) get(tenant, id string) *store.Job {
	e.t.Helper()
	j, err := e.s.GetJob(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("get job %s: %v", id, err)
	}
	return j
}

// events reads every event of a job that must exist and checks that the
// sequence is gapless from 1.
func (e *env) events(tenant, id string) []store.Event {
	e.t.Helper()
	evs, err := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenant, JobID: id, Limit: store.ListLimitMax})
	if err != nil {
		e.t.Fatalf("list events of %s: %v", id, err)
	}
	checkGapless(e.t, id, evs)
	return evs
}

// attempts reads a job's attempt history.
func (e *env) attempts(tenant, id string) []store.Attempt {
	e.t.Helper()
	as, err := e.s.ListAttempts(e.ctx, tenant, id)
	if err != nil {
		e.t.Fatalf("list attempts of %s: %v", id, err)
	}
	return as
}

// complete completes a job that must still be held by tok.
func (e *env) complete(tenant string, tok store.LeaseToken, now time.Time) *store.Job {
	e.t.Helper()
	j, err := e.s.Complete(e.ctx, store.CompleteParams{Tenant: tenant, Token: tok, Result: []byte(`"ok"`), Now: now})
	if err != nil {
		e.t.Fatalf("complete %s (generation %d): %v", tok.JobID, tok.Generation, err)
	}
	return j
}

// retry reports a failed attempt that must be accepted.
func (e *env) retry(tenant string, tok store.LeaseToken, jerr store.JobError, retryAfter time.Duration, now time.Time) *store.Job {
	e.t.Helper()
	j, err := e.s.Retry(e.ctx, store.RetryParams{Tenant: tenant, Token: tok, Error: jerr, RetryAfter: retryAfter, Now: now})
	if err != nil {
		e.t.Fatalf("retry %s (generation %d): %v", tok.JobID, tok.Generation, err)
	}
	return j
}

// setPolicy stores a queue policy that must be valid.
func (e *env) setPolicy(tenant string, p store.QueuePolicy) *store.QueuePolicy {
	e.t.Helper()
	got, err := e.s.UpdateQueuePolicy(e.ctx, tenant, p)
	if err != nil {
		e.t.Fatalf("update policy of %q: %v", p.Queue, err)
	}
	return got
}

// deadJob creates a job with a budget of one attempt and fails it, so it is
// DEAD. It returns the dead job.
func (e *env) deadJob(tenant, queue string, now time.Time) *store.Job {
	e.t.Helper()
	sp := spec(queue)
	sp.MaxAttempts = 1
	j := e.mustCreate(tenant, sp, now)
	c := e.mustClaim(tenant, workerA, queue, j.ID, now.Add(time.Second))
	dead := e.retry(tenant, c.Token, store.JobError{Code: "upstream_503", Message: "upstream unavailable", Retryable: true}, 0, now.Add(2*time.Second))
	if dead.State != store.JobStateDead {
		e.t.Fatalf("a job with max attempts 1 failed retryably is %s, want dead", dead.State)
	}
	return dead
}

// checkGapless fails unless evs are events of jobID numbered 1..n.
func checkGapless(t *testing.T, jobID string, evs []store.Event) {
	t.Helper()
	for i, ev := range evs {
		if ev.Sequence != int64(i+1) {
			t.Fatalf("events of %s: event %d has sequence %d, want %d (sequences %v)", jobID, i, ev.Sequence, i+1, sequences(evs))
		}
		if ev.JobID != jobID {
			t.Fatalf("events of %s: event %d belongs to job %q", jobID, ev.Sequence, ev.JobID)
		}
	}
	if len(evs) > 0 && evs[0].Type != store.EventQueued {
		t.Fatalf("events of %s start with %q, want %q", jobID, evs[0].Type, store.EventQueued)
	}
}

func sequences(evs []store.Event) []int64 {
	out := make([]int64, len(evs))
	for i, ev := range evs {
		out[i] = ev.Sequence
	}
	return out
}

func eventTypes(evs []store.Event) []store.EventType {
	out := make([]store.EventType, len(evs))
	for i, ev := range evs {
		out[i] = ev.Type
	}
	return out
}

// wantEvents fails unless the event types are exactly want, in order.
func wantEvents(t *testing.T, evs []store.Event, want ...store.EventType) {
	t.Helper()
	if got := eventTypes(evs); !slices.Equal(got, want) {
		t.Fatalf("events are %v, want %v", got, want)
	}
}

// countEvents counts events of type typ.
func countEvents(evs []store.Event, typ store.EventType) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// terminalEvents counts terminal events; a job must have at most one.
func terminalEvents(evs []store.Event) int {
	n := 0
	for _, ev := range evs {
		switch ev.Type {
		case store.EventSucceeded, store.EventFailed, store.EventCancelled, store.EventDead:
			n++
		default:
			// not terminal
		}
	}
	return n
}

// wantErr fails unless err matches target.
func wantErr(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want %v", what, err, target)
	}
}

// wantRejected fails unless err refuses a lease-bound report on a job that
// is no longer the caller's: ErrLeaseLost, or ErrAlreadyFinal for an engine
// that says why.
func wantRejected(t *testing.T, err error, what string) {
	t.Helper()
	if !errors.Is(err, store.ErrLeaseLost) && !errors.Is(err, store.ErrAlreadyFinal) {
		t.Errorf("%s: got error %v, want %v or %v", what, err, store.ErrLeaseLost, store.ErrAlreadyFinal)
	}
}

// sentinels are the store's error classes, for comparing how two calls
// answered.
var sentinels = []error{
	store.ErrNotFound, store.ErrLeaseLost, store.ErrIdempotencyConflict, store.ErrInvalid,
	store.ErrAlreadyFinal, store.ErrNotDead, store.ErrAbandoned, store.ErrAlreadyReplayed,
	store.ErrUnavailable,
}

// errClass names the sentinel err matches: "nil", a sentinel's text, or
// "unclassified: ..." for an error that matches none.
func errClass(err error) string {
	if err == nil {
		return "nil"
	}
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return s.Error()
		}
	}
	return "unclassified: " + err.Error()
}

// sameTime reports whether a and b are the same instant to the microsecond,
// the precision both engines store.
func sameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d < time.Microsecond && d > -time.Microsecond
}

// wantTime fails unless got is want to the microsecond.
func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !sameTime(got, want) {
		t.Errorf("%s is %s, want %s", what, got.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
	}
}

// noEvents fails unless jobID has no events: ListEvents answers ErrNotFound
// or an empty list.
func (e *env) noEvents(tenant, jobID, why string) {
	e.t.Helper()
	evs, err := e.s.ListEvents(e.ctx, store.ListEventsParams{Tenant: tenant, JobID: jobID, Limit: store.ListLimitMax})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("%s: list events of %s: %v", why, jobID, err)
	}
	if len(evs) != 0 {
		e.t.Errorf("%s: job %s has orphan events %v", why, jobID, eventTypes(evs))
	}
}

// missing fails unless jobID does not exist for tenant.
func (e *env) missing(tenant, jobID, why string) {
	e.t.Helper()
	_, err := e.s.GetJob(e.ctx, tenant, jobID)
	if !errors.Is(err, store.ErrNotFound) {
		e.t.Errorf("%s: get job %s: got %v, want %v", why, jobID, err, store.ErrNotFound)
	}
}

// allJobs pages through every job of a tenant.
func (e *env) allJobs(p store.ListJobsParams) []*store.Job {
	e.t.Helper()
	var out []*store.Job
	for page := 0; ; page++ {
		if page > 10_000 {
			e.t.Fatal("ListJobs cursor never ends")
		}
		res, err := e.s.ListJobs(e.ctx, p)
		if err != nil {
			e.t.Fatalf("list jobs: %v", err)
		}
		out = append(out, res.Jobs...)
		if res.NextCursor == "" {
			return out
		}
		if res.NextCursor == p.Cursor {
			e.t.Fatalf("ListJobs returned the same cursor %q twice", p.Cursor)
		}
		p.Cursor = res.NextCursor
	}
}

// barrier releases every goroutine waiting on it at once.
type barrier chan struct{}

func (b barrier) wait() { <-b }

func (b barrier) open() { close(b) }

// eventData decodes an event's JSON data. Numbers come back as float64.
func eventData(t *testing.T, ev store.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
		t.Fatalf("event %d (%s) of %s has data %q that is not a JSON object: %v", ev.Sequence, ev.Type, ev.JobID, ev.Data, err)
	}
	return m
}

// wantData fails unless the event's data has every key of want with that
// value (numbers as float64). Other keys are allowed.
func wantData(t *testing.T, ev store.Event, want map[string]any) {
	t.Helper()
	got := eventData(t, ev)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("event %d (%s): data[%q] = %#v, want %#v (data %s)", ev.Sequence, ev.Type, k, got[k], v, ev.Data)
		}
	}
}

// reap ends the leases that expired at now, as the coordinator's reaper
// does, and returns what it did.
func (e *env) reap(now time.Time) store.ReapResult {
	e.t.Helper()
	res, err := e.s.ReapExpired(e.ctx, store.ReapParams{Now: now})
	if err != nil {
		e.t.Fatalf("reap expired leases at %s: %v", now.Format(time.RFC3339), err)
	}
	return res
}
