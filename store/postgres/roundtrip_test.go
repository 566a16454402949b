package postgres_test

import (
	"context"
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
	_ = fmt.Sprint
}
