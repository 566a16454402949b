package store

import (
	"errors"
	"testing"
	"time"
)

func jobIn(state JobState) *Job {
	j := leasedJob(1, 5)
	j.State = state
	if state != JobStateLeased {
		j.LeaseOwner, j.LeaseGeneration = "", 0
	}
	return j
}

func TestDecideRequestCancel(t *testing.T) {
	requested := jobIn(JobStateLeased)
	requested.CancelRequested = true
	c := ClientChange{Actor: "key:ops", Reason: "stop"}
	cases := []struct {
		name   string
		job    *Job
		action RowAction
		event  EventType
		err    error
	}{
		{"queued ends at once", jobIn(JobStateQueued), ActCancelQueued, EventCancelled, nil},
		{"leased is asked to stop", jobIn(JobStateLeased), ActRequestCancel, EventCancelRequested, nil},
		{"a repeated request changes nothing", requested, ActNone, "", nil},
		{"succeeded is final", jobIn(JobStateSucceeded), ActNone, "", ErrAlreadyFinal},
		{"dead is final", jobIn(JobStateDead), ActNone, "", ErrAlreadyFinal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecideRequestCancel(tc.job, c)
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tc.err)
			}
			if got.Action != tc.action || got.Event.Type != tc.event {
				t.Fatalf("got %+v, want action %v event %q", got, tc.action, tc.event)
			}
			if tc.event == "" {
				return
			}
			d := data(t, got.Event)
			if d["reason"] != "stop" || d["actor"] != "key:ops" {
				t.Fatalf("event data %v lacks the reason or the actor", d)
			}
			if _, ok := d["operation"]; ok {
				t.Fatalf("a single-job cancel names an operation: %v", d)
			}
		})
	}
	// The leased job's request names the lease it asks to stop.
	got, _ := DecideRequestCancel(jobIn(JobStateLeased), c)
	if d := data(t, got.Event); d["worker_id"] != "w1" || d["lease_generation"] != 3.0 {
		t.Fatalf("cancel request data %v, want the lease w1/3", d)
	}
	if d := data(t, CancelEvent(jobIn(JobStateQueued), ClientChange{Reason: "r", Operation: "op1"})); d["by"] != "client" ||
		d["operation"] != "op1" || d["actor"] != nil {
		t.Fatalf("a bulk cancel's data %v, want by client, the operation and no actor", d)
	}
}

func TestDecideReplayAndAbandon(t *testing.T) {
	dead := jobIn(JobStateDead)
	cases := []struct {
		name          string
		job           *Job
		abandoned     bool
		replayedAs    string
		again         bool
		replayErr     error
		abandonChange bool
		abandonErr    error
	}{
		{"a dead job", dead, false, "", false, nil, true, nil},
		{"a replayed job", dead, false, "job-2", true, nil, false, ErrAlreadyReplayed},
		{"an abandoned job", dead, true, "", false, ErrAbandoned, false, nil},
		{"a job that is not dead", jobIn(JobStateFailed), false, "", false, ErrNotDead, false, ErrNotDead},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			again, err := DecideReplay(tc.job, tc.abandoned, tc.replayedAs)
			if again != tc.again || !errors.Is(err, tc.replayErr) || (tc.replayErr == nil && err != nil) {
				t.Fatalf("replay: again %v, err %v; want %v, %v", again, err, tc.again, tc.replayErr)
			}
			change, err := DecideAbandon(tc.job, tc.abandoned, tc.replayedAs)
			if change != tc.abandonChange || !errors.Is(err, tc.abandonErr) || (tc.abandonErr == nil && err != nil) {
				t.Fatalf("abandon: change %v, err %v; want %v, %v", change, err, tc.abandonChange, tc.abandonErr)
			}
		})
	}
	if err := ReplayGone("job-1", "job-2"); !errors.Is(err, ErrAlreadyReplayed) {
		t.Fatalf("a pruned replay answers %v, want ErrAlreadyReplayed", err)
	}
	if d := data(t, AbandonEvent(ClientChange{Reason: "junk", Actor: "key:ops"})); d["reason"] != "junk" || d["actor"] != "key:ops" {
		t.Fatalf("abandon data %v", d)
	}
}

func TestPlanReplay(t *testing.T) {
	dead := jobIn(JobStateDead)
	dead.Kind, dead.Payload, dead.Metadata, dead.Priority = "k", []byte("p"), map[string]string{"a": "b"}, 7
	dead.Dependency, dead.ConcurrencyKey, dead.Attempts = "dep", "ck", 5
	policy := DefaultQueuePolicy("q")
	now := t0.Add(123456789 * time.Nanosecond)

	plan := PlanReplay(policy, dead, "job-2", now, ClientChange{Reason: "again"})
	j := plan.Job
	at := now.Truncate(time.Microsecond)
	if j.ID != "job-2" || j.Tenant != "t" || j.Queue != "q" || j.Kind != "k" || string(j.Payload) != "p" ||
		j.Metadata["a"] != "b" || j.Priority != 7 || j.MaxAttempts != 5 || j.Attempts != 0 || j.Dependency != "dep" ||
		j.ConcurrencyKey != "ck" || j.ReplayOf != "job-1" || j.State != JobStateQueued {
		t.Fatalf("replay job %+v does not carry the dead job's spec", j)
	}
	if !j.CreatedAt.Equal(at) || !j.AvailableAt.Equal(at) || !j.RetryDeadline.IsZero() {
		t.Fatalf("replay times: created %v available %v deadline %v; want %v and no deadline", j.CreatedAt, j.AvailableAt, j.RetryDeadline, at)
	}
	if plan.Queued.Type != EventQueued || plan.Replayed.Type != EventReplayed {
		t.Fatalf("replay events %s, %s", plan.Queued.Type, plan.Replayed.Type)
	}
	if d := data(t, plan.Queued); d["replay_of"] != "job-1" || d["queue"] != "q" || d["reason"] != "again" || d["replay_key"] != nil {
		t.Fatalf("queued data %v", d)
	}
	if d := data(t, plan.Replayed); d["replayed_as"] != "job-2" || d["reason"] != "again" {
		t.Fatalf("replayed data %v", d)
	}

	policy.Retry.TotalRetryDeadline = time.Hour
	plan = PlanReplay(policy, dead, "job-3", now, ClientChange{Reason: "bulk", Operation: "op1", Actor: "key:ops"})
	if !plan.Job.RetryDeadline.Equal(at.Add(time.Hour)) {
		t.Fatalf("retry deadline %v, want %v", plan.Job.RetryDeadline, at.Add(time.Hour))
	}
	key := OperationReplayKey("op1", "job-1")
	for _, e := range []NewEvent{plan.Queued, plan.Replayed} {
		if d := data(t, e); d["replay_key"] != key || d["operation"] != "op1" || d["actor"] != "key:ops" {
			t.Fatalf("a bulk replay's %s data %v, want the replay key, operation and actor", e.Type, d)
		}
	}
}

func TestLedgerDecisions(t *testing.T) {
	eff := func(s EffectStatus) *Effect { return &Effect{Key: "k", Status: s} }
	reserve := []struct {
		existing *Effect
		want     EffectAction
	}{
		{nil, EffectInsert},
		{eff(EffectFailed), EffectTakeOver},
		{eff(EffectReserved), EffectKeep},
		{eff(EffectUnknown), EffectKeep},
		{eff(EffectSucceeded), EffectKeep},
	}
	for _, tc := range reserve {
		if got := DecideReserve(tc.existing); got != tc.want {
			t.Errorf("DecideReserve(%+v) = %v, want %v", tc.existing, got, tc.want)
		}
	}
	p := RecordEffectParams{Key: "k", Token: tok, Status: EffectSucceeded}
	if _, err := DecideRecord(nil, p); !errors.Is(err, ErrNotFound) {
		t.Errorf("recording an unreserved key: %v, want ErrNotFound", err)
	}
	for s, want := range map[EffectStatus]bool{EffectReserved: true, EffectUnknown: true, EffectFailed: true, EffectSucceeded: false} {
		if write, err := DecideRecord(eff(s), p); err != nil || write != want {
			t.Errorf("recording over %s: write %v, err %v; want %v", s, write, err, want)
		}
	}

	c, e := PlanCheckpoint(tok, "cp-2", "upload", []byte{}, "cp-1", t0)
	if c.ID != "cp-2" || c.JobID != "job-1" || c.ParentID != "cp-1" || c.LeaseGeneration != 3 || c.State != nil || !c.CreatedAt.Equal(t0) {
		t.Fatalf("checkpoint %+v", c)
	}
	if d := data(t, e); e.Type != EventCheckpointSaved || d["checkpoint_id"] != "cp-2" || d["parent_id"] != "cp-1" ||
		d["phase"] != "upload" || d["lease_generation"] != 3.0 {
		t.Fatalf("checkpoint event %s %v", e.Type, d)
	}
}
