package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// roundTrips counts the round trips of a pool: every statement sent alone
// and every batch (pipeline) is one.
type roundTrips struct {
	mu   sync.Mutex
	sent []string
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, strings.Join(strings.Fields(d.SQL), " "))
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var qs []string
	for _, q := range d.Batch.QueuedQueries {
		f := strings.Fields(q.SQL)
		qs = append(qs, strings.Join(f[:min(len(f), 3)], " "))
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, "batch["+strings.Join(qs, "; ")+"]")
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// during is what fn sent.
func (r *roundTrips) during(fn func()) []string {
	r.mu.Lock()
	r.sent = nil
	r.mu.Unlock()
	fn()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sent
}

func openTraced(t *testing.T) (*postgres.Store, *roundTrips) {
	t.Helper()
	rt := &roundTrips{}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := postgres.Open(ctx, postgres.WithTracer(postgres.Config{DatabaseURL: migrated(t), MaxConns: 8}, rt))
	if err != nil {
		t.Fatalf("open postgres store: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s, rt
}

// TestCreateIsOneRoundTrip: a create without request ids or unique keys
// — one job, fifty jobs, or one job handed off to a waiting worker —
// sends BEGIN, its statements and COMMIT in one round trip (the queue's
// policy is cached by a first create).
func TestCreateIsOneRoundTrip(t *testing.T) {
	t.Parallel()
	s, rt := openTraced(t)
	ctx := t.Context()
	if _, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t", Requests: oneRequest("q", "")}); err != nil {
		t.Fatal(err)
	}
	var fifty []store.CreateRequest
	for range 50 {
		fifty = append(fifty, oneRequest("q", "")...)
	}
	for _, tc := range []struct {
		name  string
		reqs  []store.CreateRequest
		claim []store.ClaimManyParams
		want  int // leased
	}{
		{name: "one job", reqs: oneRequest("q", "")},
		{name: "fifty jobs", reqs: fifty},
		{name: "handoff", reqs: oneRequest("q", ""), claim: handoffClaim("q", "w1"), want: 1},
	} {
		var (
			res    []store.CreateResult
			leased []store.ClaimedJob
			err    error
		)
		sent := rt.during(func() {
			if tc.claim == nil {
				res, err = s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t", Requests: tc.reqs})
			} else {
				res, leased, err = s.CreateJobsHandoff(ctx, store.CreateJobsParams{Tenant: "t", Requests: tc.reqs}, tc.claim)
			}
		})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(res) != len(tc.reqs) || len(leased) != tc.want {
			t.Fatalf("%s: %d results and %d leased, want %d and %d", tc.name, len(res), len(leased), len(tc.reqs), tc.want)
		}
		t.Logf("%s: %d round trips: %s", tc.name, len(sent), strings.Join(sent, " | "))
		if len(sent) != 1 {
			t.Errorf("%s: %d round trips, want 1: %s", tc.name, len(sent), strings.Join(sent, " | "))
		}
		for _, r := range res {
			if r.Job.CreatedAt.IsZero() || r.Job.AvailableAt.Before(r.Job.CreatedAt) {
				t.Errorf("%s: job %s created %v, available %v", tc.name, r.Job.ID, r.Job.CreatedAt, r.Job.AvailableAt)
			}
			got, err := s.GetJob(ctx, "t", r.Job.ID)
			if err != nil {
				t.Fatal(err)
			}
			if !got.CreatedAt.Equal(r.Job.CreatedAt) || !got.AvailableAt.Equal(r.Job.AvailableAt) {
				t.Errorf("%s: answered created %v available %v, stored %v %v", tc.name,
					r.Job.CreatedAt, r.Job.AvailableAt, got.CreatedAt, got.AvailableAt)
			}
		}
	}
}

// TestCreateMixedCallsInOneBatch: calls of every kind at once — plain,
// handed off, with a fresh request id, repeating a request id (the same
// spec replays, another conflicts), unique (a repeat within the call
// answers the first as a duplicate) and a plain call with a run_after —
// each get the answer they get alone, whichever batches the committer
// made of them, and nothing else is created.
func TestCreateMixedCallsInOneBatch(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	ctx := t.Context()
	spec := store.JobSpec{Queue: "q", Kind: "k"}
	first, err := s.CreateJobs(ctx, store.CreateJobsParams{Tenant: "t", Requests: []store.CreateRequest{{Spec: spec, RequestID: "held"}}})
	if err != nil {
		t.Fatal(err)
	}
	type answer struct {
		res    []store.CreateResult
		leased []store.ClaimedJob
		err    error
	}
	kinds := []string{"plain", "handoff", "fresh-id", "replay", "conflict", "unique", "delayed"}
	var wg sync.WaitGroup
	for round := range 5 {
		answers := make([]answer, len(kinds))
		for i, kind := range kinds {
			wg.Go(func() {
				p := store.CreateJobsParams{Tenant: "t"}
				var claim []store.ClaimManyParams
				switch kind {
				case "plain":
					p.Requests = []store.CreateRequest{{Spec: spec}, {Spec: spec}}
				case "handoff":
					p.Requests = []store.CreateRequest{{Spec: store.JobSpec{Queue: "h", Kind: "k"}}}
					claim = handoffClaim("h", fmt.Sprintf("w%d", round))
				case "fresh-id":
					p.Requests = []store.CreateRequest{{Spec: spec, RequestID: fmt.Sprintf("fresh-%d", round)}}
				case "replay":
					p.Requests = []store.CreateRequest{{Spec: spec, RequestID: "held"}}
				case "conflict":
					p.Requests = []store.CreateRequest{{Spec: spec}, {Spec: store.JobSpec{Queue: "q", Kind: "other"}, RequestID: "held"}}
				case "unique":
					u := &store.UniqueOptions{Key: fmt.Sprintf("u-%d", round)}
					p.Requests = []store.CreateRequest{{Spec: spec, Unique: u}, {Spec: spec, Unique: u}}
				case "delayed":
					p.Requests = []store.CreateRequest{{Spec: store.JobSpec{Queue: "q", Kind: "k", RunAfter: time.Hour}}}
				}
				var a answer
				if claim != nil {
					a.res, a.leased, a.err = s.CreateJobsHandoff(ctx, p, claim)
				} else {
					a.res, a.err = s.CreateJobs(ctx, p)
				}
				answers[i] = a
			})
		}
		wg.Wait()
		for i, kind := range kinds {
			a := answers[i]
			if kind == "conflict" {
				if !errors.Is(a.err, store.ErrIdempotencyConflict) || a.res != nil {
					t.Fatalf("round %d %s: %v, %+v; want ErrIdempotencyConflict and no results", round, kind, a.err, a.res)
				}
				continue
			}
			if a.err != nil {
				t.Fatalf("round %d %s: %v", round, kind, a.err)
			}
			switch kind {
			case "plain":
				if len(a.res) != 2 || a.res[0].Replayed || a.res[0].Job.ID == a.res[1].Job.ID {
					t.Fatalf("round %d plain: %+v", round, a.res)
				}
			case "handoff":
				if len(a.leased) != 1 || a.leased[0].Job.ID != a.res[0].Job.ID {
					t.Fatalf("round %d handoff: leased %+v", round, a.leased)
				}
			case "fresh-id":
				if a.res[0].Replayed || a.res[0].Duplicate {
					t.Fatalf("round %d fresh-id: %+v", round, a.res[0])
				}
			case "replay":
				if !a.res[0].Replayed || a.res[0].Job.ID != first[0].Job.ID {
					t.Fatalf("round %d replay: %+v, want a replay of %s", round, a.res[0], first[0].Job.ID)
				}
			case "unique":
				if a.res[0].Duplicate || !a.res[1].Duplicate || a.res[1].Job.ID != a.res[0].Job.ID {
					t.Fatalf("round %d unique: %+v", round, a.res)
				}
			case "delayed":
				if got := a.res[0].Job.AvailableAt.Sub(a.res[0].Job.CreatedAt); got != time.Hour {
					t.Fatalf("round %d delayed: available %v after creation, want 1h", round, got)
				}
			}
			for _, r := range a.res {
				got, err := s.GetJob(ctx, "t", r.Job.ID)
				if err != nil {
					t.Fatalf("round %d %s: %v", round, kind, err)
				}
				if !got.CreatedAt.Equal(r.Job.CreatedAt) || !got.AvailableAt.Equal(r.Job.AvailableAt) {
					t.Fatalf("round %d %s: answered %v/%v, stored %v/%v", round, kind, r.Job.CreatedAt, r.Job.AvailableAt, got.CreatedAt, got.AvailableAt)
				}
			}
		}
	}
	// 1 held + per round: 2 plain, 1 handoff, 1 fresh, 1 unique, 1 delayed.
	var n int
	if err := postgres.Pool(s).QueryRow(ctx, `SELECT count(*) FROM jobs`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if want := 1 + 5*6; n != want {
		t.Fatalf("%d jobs, want %d", n, want)
	}
}
