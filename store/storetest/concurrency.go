package storetest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// concurrencyTests run operations at once through two independent stores
// (two coordinators on one database) and check the invariants afterwards.
func concurrencyTests() group {
	return group{name: "Concurrency", cases: []testCase{
		{"concurrent event appends to one job get unique gapless sequences", testConcurrentEventAppends},
		{"concurrent creates each start their own event sequence at 1", testConcurrentCreates},
		{"two stores claiming 2000 jobs concurrently claim each exactly once", testConcurrentClaims},
	}}
}

func testConcurrentEventAppends(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	j := e.mustCreate(tenantA, spec("default"), base)
	got := e.claim(tenantA, workerA, "default", 1, time.Hour, at(time.Second))
	if len(got) != 1 {
		t.Fatal("claim failed")
	}
	tok := got[0].Token
	const (
		savers        = 4 // per store
		savesEach     = 5
		renewers      = 2 // per store
		renewsEach    = 5
		cancellers    = 2 // per store
		cancelsEach   = 2
		wantSaves     = 2 * savers * savesEach
		wantCancelReq = 1
	)
	var (
		wg    sync.WaitGroup
		start = make(barrier)
		mu    sync.Mutex
		errs  []error
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	now := at(2 * time.Second)
	for _, s := range []store.Store{e.s, other} {
		for g := range savers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.wait()
				for i := range savesEach {
					if _, err := s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: tok, Phase: fmt.Sprintf("g%d-%d", g, i), Now: now}); err != nil {
						fail(fmt.Errorf("checkpoint: %w", err))
					}
				}
			}()
		}
		for range renewers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.wait()
				for range renewsEach {
					res, err := s.Renew(e.ctx, store.RenewParams{Tenant: tenantA, Tokens: []store.LeaseToken{tok}, LeaseDuration: time.Hour, Now: now})
					if err != nil {
						fail(fmt.Errorf("renew: %w", err))
					} else if res[0].Status == store.RenewLost {
						fail(fmt.Errorf("renew of the current lease reported lost"))
					}
				}
			}()
		}
		for range cancellers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.wait()
				for range cancelsEach {
					if _, err := e.requestCancel(s, tenantA, j.ID, now); err != nil {
						fail(fmt.Errorf("request cancel: %w", err))
					}
				}
			}()
		}
	}
	start.open()
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	evs := e.events(tenantA, j.ID) // fails unless 1..n without gaps
	seen := map[int64]bool{}
	for _, ev := range evs {
		if seen[ev.Sequence] {
			t.Fatalf("sequence %d appears twice", ev.Sequence)
		}
		seen[ev.Sequence] = true
	}
	if n := countEvents(evs, store.EventCheckpointSaved); n != wantSaves {
		t.Fatalf("%d checkpoint_saved events for %d saves", n, wantSaves)
	}
	if n := countEvents(evs, store.EventCancelRequested); n != wantCancelReq {
		t.Fatalf("%d cancel_requested events for repeated requests, want %d", n, wantCancelReq)
	}
	// The job ends cleanly after the storm.
	if _, err := e.s.CancelByHolder(e.ctx, store.CancelByHolderParams{Tenant: tenantA, Token: tok, Now: at(3 * time.Second)}); err != nil {
		t.Fatalf("holder's cancel after the storm: %v", err)
	}
	evs = e.events(tenantA, j.ID)
	if terminalEvents(evs) != 1 || evs[len(evs)-1].Type != store.EventCancelled {
		t.Fatalf("events end with %v", eventTypes(evs[len(evs)-3:]))
	}
	if e.h.Rows != nil {
		if n := e.rows(RowsCheckpoints, j.ID); n > store.CheckpointHistoryLimit {
			t.Fatalf("%d checkpoints kept after concurrent saves, limit %d", n, store.CheckpointHistoryLimit)
		}
	}
}

func testConcurrentCreates(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	const perGoroutine = 10
	var (
		wg    sync.WaitGroup
		start = make(barrier)
		mu    sync.Mutex
		ids   []string
		errs  []error
	)
	for i, s := range []store.Store{e.s, e.s, other, other} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start.wait()
			for k := range perGoroutine {
				res, err := s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Now: base, Requests: []store.CreateRequest{
					{Spec: spec("default"), RequestID: fmt.Sprintf("g%d-%d", i, k)},
					{Spec: spec("default")},
				}})
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					for _, r := range res {
						ids = append(ids, r.Job.ID)
					}
				}
				mu.Unlock()
			}
		}()
	}
	start.open()
	wg.Wait()
	for _, err := range errs {
		t.Errorf("concurrent create: %v", err)
	}
	if len(ids) != 4*perGoroutine*2 {
		t.Fatalf("%d jobs created, want %d", len(ids), 4*perGoroutine*2)
	}
	for _, id := range ids {
		wantEvents(t, e.events(tenantA, id), store.EventQueued)
	}
}

func testConcurrentClaims(t *testing.T, h Harness) {
	e := setup(t, h)
	other := e.shared()
	const (
		jobs       = 2000
		goroutines = 8 // per store
		batch      = 10
	)
	for created := 0; created < jobs; {
		n := min(store.BatchMaxItems, jobs-created)
		reqs := make([]store.CreateRequest, n)
		for i := range reqs {
			reqs[i] = store.CreateRequest{Spec: spec("bulk")}
		}
		if _, err := e.s.CreateJobs(e.ctx, store.CreateJobsParams{Tenant: tenantA, Requests: reqs, Now: base}); err != nil {
			t.Fatalf("create %d jobs: %v", n, err)
		}
		created += n
	}

	// A deadlock shows up as this deadline passing, not as a hung test.
	ctx, cancel := context.WithTimeout(e.ctx, 3*time.Minute)
	defer cancel()
	var (
		wg      sync.WaitGroup
		start   = make(barrier)
		claimed atomic.Int64
		mu      sync.Mutex
		owners  = map[string]string{}
		dups    []string
		errs    []error
	)
	for si, s := range []store.Store{e.s, other} {
		for g := range goroutines {
			worker := fmt.Sprintf("worker-%d-%d", si, g)
			wg.Add(1)
			go func() {
				defer wg.Done()
				start.wait()
				for ctx.Err() == nil && claimed.Load() < jobs {
					got, err := s.Claim(ctx, store.ClaimParams{Tenant: tenantA, Worker: worker, Queues: []string{"bulk"}, Max: batch, LeaseDuration: time.Hour, Now: at(time.Second)})
					if err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("%s: %w", worker, err))
						mu.Unlock()
						return
					}
					claimed.Add(int64(len(got)))
					mu.Lock()
					for _, c := range got {
						if prev, ok := owners[c.Job.ID]; ok {
							dups = append(dups, fmt.Sprintf("%s by %s and %s", c.Job.ID, prev, worker))
						}
						owners[c.Job.ID] = worker
						if c.Token.Generation != 1 {
							errs = append(errs, fmt.Errorf("job %s claimed at generation %d", c.Job.ID, c.Token.Generation))
						}
					}
					mu.Unlock()
				}
			}()
		}
	}
	start.open()
	wg.Wait()
	for _, err := range errs {
		t.Errorf("concurrent claim: %v", err)
	}
	if len(dups) > 0 {
		t.Fatalf("%d jobs claimed twice, e.g. %s", len(dups), dups[0])
	}
	if ctx.Err() != nil {
		t.Fatalf("claiming did not finish in time (deadlock or starvation): %d of %d claimed", claimed.Load(), jobs)
	}
	if len(owners) != jobs || claimed.Load() != jobs {
		t.Fatalf("%d distinct jobs claimed (%d claims), want %d", len(owners), claimed.Load(), jobs)
	}
	e.claimNothing(tenantA, "bulk", at(2*time.Second), "every job is leased")
	st, err := e.s.QueueStats(e.ctx, store.QueueStatsParams{Tenant: tenantA, Queue: "bulk", Now: at(2 * time.Second)})
	if err != nil || st.Leased != jobs || st.Queued != 0 {
		t.Fatalf("stats after claiming everything: %+v, %v", st, err)
	}
}
