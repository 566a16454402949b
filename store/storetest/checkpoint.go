package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// checkpointTests cover the checkpoint pillar: progress saved under the
// lease reaches the next attempt, with lineage, and stale writers are fenced.
func checkpointTests() group {
	return group{name: "Checkpoint", cases: []testCase{
		{"a checkpoint saved by generation 1 reaches generation 2 with lineage", testCheckpointReachesNextGeneration},
		{"a stale generation's checkpoint is rejected", testCheckpointStale},
		{"the checkpoint history is bounded", testCheckpointHistoryBounded},
		{"a job's checkpoints are listed newest first", testListCheckpoints},
	}}
}

func testCheckpointReachesNextGeneration(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	a := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	if a.Job.Checkpoint != nil {
		t.Fatalf("a first claim carries checkpoint %+v", a.Job.Checkpoint)
	}
	cp1, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: a.Token, Phase: "fetched", State: []byte(`{"page":1}`), Now: at(2 * time.Second)})
	if err != nil {
		t.Fatalf("save checkpoint: %v", err)
	}
	if cp1.ID == "" || cp1.JobID != j.ID || cp1.Phase != "fetched" || string(cp1.State) != `{"page":1}` || cp1.LeaseGeneration != 1 || cp1.ParentID != "" {
		t.Fatalf("first checkpoint %+v", cp1)
	}
	wantTime(t, "checkpoint created_at", cp1.CreatedAt, at(2*time.Second))
	cp2, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: a.Token, Phase: "parsed", State: []byte(`{"page":2}`), Now: at(3 * time.Second)})
	if err != nil || cp2.ParentID != cp1.ID {
		t.Fatalf("second checkpoint %+v, %v; want parent %s", cp2, err, cp1.ID)
	}
	evs := e.events(tenantA, j.ID)
	if n := countEvents(evs, store.EventCheckpointSaved); n != 2 {
		t.Fatalf("%d checkpoint_saved events, want 2: %v", n, eventTypes(evs))
	}
	if got := e.get(tenantA, j.ID).Checkpoint; got == nil || got.ID != cp2.ID {
		t.Fatalf("GetJob's checkpoint %+v, want %s", got, cp2.ID)
	}

	// A's lease expires; the reaper requeues the job and B's claim
	// carries A's latest checkpoint.
	e.reap(at(time.Minute))
	b := e.mustClaim(tenantA, workerB, "default", j.ID, at(time.Minute))
	got := b.Job.Checkpoint
	if got == nil || got.ID != cp2.ID || got.Phase != "parsed" || string(got.State) != `{"page":2}` || got.LeaseGeneration != 1 || got.ParentID != cp1.ID {
		t.Fatalf("generation 2's claim carries checkpoint %+v, want %+v", got, cp2)
	}
	cp3, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: b.Token, Phase: "stored", Now: at(time.Minute + time.Second)})
	if err != nil {
		t.Fatalf("generation 2's checkpoint: %v", err)
	}
	if cp3.ParentID != cp2.ID || cp3.LeaseGeneration != 2 {
		t.Fatalf("generation 2's checkpoint %+v, want parent %s and generation 2", cp3, cp2.ID)
	}
	// The checkpoint survives the end of the job.
	e.complete(tenantA, b.Token, at(time.Minute+2*time.Second))
	if got := e.get(tenantA, j.ID).Checkpoint; got == nil || got.ID != cp3.ID {
		t.Fatalf("checkpoint of the finished job: %+v, want %s", got, cp3.ID)
	}
}

func testCheckpointStale(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	a := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	cp1, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: a.Token, Phase: "one", Now: at(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	e.reap(at(time.Minute))
	b := e.mustClaim(tenantA, workerB, "default", j.ID, at(time.Minute))
	before := e.events(tenantA, j.ID)
	_, err = e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: a.Token, Phase: "late", State: []byte("stale"), Now: at(time.Minute + time.Second)})
	wantErr(t, err, store.ErrLeaseLost, "generation 1 saving after generation 2 claimed")
	if got := e.get(tenantA, j.ID).Checkpoint; got == nil || got.ID != cp1.ID {
		t.Fatalf("a stale save replaced the checkpoint: %+v", got)
	}
	if after := e.events(tenantA, j.ID); len(after) != len(before) {
		t.Fatalf("a stale save added events: %v", eventTypes(after))
	}
	// The stale save did not become B's parent either.
	cp, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: b.Token, Phase: "two", Now: at(time.Minute + 2*time.Second)})
	if err != nil || cp.ParentID != cp1.ID {
		t.Fatalf("generation 2's checkpoint %+v, %v; want parent %s", cp, err, cp1.ID)
	}
	// An expired holder is fenced even before anyone else claims.
	_, err = e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: b.Token, Phase: "three", Now: at(time.Hour)})
	wantErr(t, err, store.ErrLeaseLost, "saving after the lease expired")
}

func testCheckpointHistoryBounded(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	const saves = store.CheckpointHistoryLimit + 5
	var prev *store.Checkpoint
	for i := range saves {
		cp, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c.Token, Phase: fmt.Sprintf("phase-%02d", i), Now: at(2*time.Second + time.Duration(i)*time.Millisecond)})
		if err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		if prev != nil && cp.ParentID != prev.ID {
			t.Fatalf("save %d has parent %q, want %q", i, cp.ParentID, prev.ID)
		}
		prev = cp
	}
	if got := e.get(tenantA, j.ID).Checkpoint; got == nil || got.ID != prev.ID || got.Phase != fmt.Sprintf("phase-%02d", saves-1) {
		t.Fatalf("latest checkpoint %+v, want %s", got, prev.ID)
	}
	if n := e.rows(RowsCheckpoints, j.ID); n != store.CheckpointHistoryLimit {
		t.Fatalf("%d checkpoints stored after %d saves, want the newest %d", n, saves, store.CheckpointHistoryLimit)
	}
}

func testListCheckpoints(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	if cps, err := e.s.ListCheckpoints(e.ctx, tenantA, j.ID); err != nil || len(cps) != 0 {
		t.Fatalf("checkpoints of a new job: %+v, %v; want none", cps, err)
	}
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	const saves = store.CheckpointHistoryLimit + 2
	for i := range saves {
		if _, err := e.s.SaveCheckpoint(e.ctx, store.SaveCheckpointParams{Tenant: tenantA, Token: c.Token, Phase: fmt.Sprintf("phase-%02d", i),
			State: fmt.Appendf(nil, `{"i":%d}`, i), Now: at(2*time.Second + time.Duration(i)*time.Millisecond)}); err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
	}
	cps, err := e.s.ListCheckpoints(e.ctx, tenantA, j.ID)
	if err != nil || len(cps) != store.CheckpointHistoryLimit {
		t.Fatalf("list: %d checkpoints, %v; want the newest %d", len(cps), err, store.CheckpointHistoryLimit)
	}
	for k, cp := range cps {
		i := saves - 1 - k
		if cp.Phase != fmt.Sprintf("phase-%02d", i) || string(cp.State) != fmt.Sprintf(`{"i":%d}`, i) || cp.JobID != j.ID || cp.LeaseGeneration != 1 {
			t.Fatalf("checkpoint %d: %+v; want phase-%02d", k, cp, i)
		}
		wantTime(t, "checkpoint created_at", cp.CreatedAt, at(2*time.Second+time.Duration(i)*time.Millisecond))
		if k+1 < len(cps) && cp.ParentID != cps[k+1].ID {
			t.Fatalf("checkpoint %d's parent is %q, want %q", k, cp.ParentID, cps[k+1].ID)
		}
	}
	if _, err := e.s.ListCheckpoints(e.ctx, tenantB, j.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("another tenant's job: %v; want ErrNotFound", err)
	}
	if _, err := e.s.ListCheckpoints(e.ctx, tenantA, store.NewID()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("a missing job: %v; want ErrNotFound", err)
	}
}
