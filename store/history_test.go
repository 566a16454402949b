package store

import (
	"slices"
	"testing"
	"time"
)

// TestAttemptRecordsMakeTheDecidedEvents holds AttemptEndEvents to the
// decisions: for every way an attempt ends, the record (through its JSON
// encoding) gives back exactly the events the decision made.
func TestAttemptRecordsMakeTheDecidedEvents(t *testing.T) {
	policy := DefaultQueuePolicy("q").Retry
	policy.JitterFraction = 0
	transient := JobError{Code: "http_503", Message: "busy \"quoted\" <é>", Retryable: true}
	cancelled := leasedJob(1, 5)
	cancelled.CancelRequested = true
	deadline := leasedJob(1, 5)
	deadline.RetryDeadline = t0.Add(500 * time.Millisecond)
	held := func(j *Job) Held {
		j.LeasedAt = t0.Add(-time.Second)
		return Held{Job: j, Now: t0, EventSeq: 7, CancelReason: "the reason", LeasedUntil: t0.Add(29 * time.Second), LeasedSeq: 5}
	}
	expTok := LeaseToken{JobID: "job-1", Generation: 3, WorkerID: "w1"}
	cases := []struct {
		name string
		h    Held
		t    Transition
	}{
		{"complete", held(leasedJob(1, 5)), DecideComplete(held(leasedJob(1, 5)), tok, []byte("r"))},
		{"retried", held(leasedJob(1, 5)), DecideFailure(policy, held(leasedJob(1, 5)), tok, transient, 0, 0)},
		{"non-retryable", held(leasedJob(1, 5)), DecideFailure(policy, held(leasedJob(1, 5)), tok, JobError{Code: "bad"}, 0, 0)},
		{"last attempt", held(leasedJob(5, 5)), DecideFailure(policy, held(leasedJob(5, 5)), tok, transient, 0, 0)},
		{"deadline", held(deadline), DecideFailure(policy, held(deadline), tok, transient, 0, 0)},
		{"failure of a cancel-requested job", held(cancelled), DecideFailure(policy, held(cancelled), tok, transient, 0, 0)},
		{"holder cancel", held(leasedJob(1, 5)), DecideCancelByHolder(tok, "stop")},
		{"release", held(leasedJob(1, 5)), DecideRelease(held(leasedJob(1, 5)), tok)},
		{"release of a cancel-requested job", held(cancelled), DecideRelease(held(cancelled), tok)},
		{"expiry", held(leasedJob(1, 5)), DecideExpiry(held(leasedJob(1, 5)))},
		{"expiry, budget spent", held(leasedJob(5, 5)), DecideExpiry(held(leasedJob(5, 5)))},
		{"expiry of a cancel-requested job", held(cancelled), DecideExpiry(held(cancelled))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := AttemptRecordOf(c.h, expTok, c.t)
			back, err := DecodeAttemptRecord(EncodeAttemptRecord(rec))
			if err != nil {
				t.Fatal(err)
			}
			if got := AttemptEndEvents(back); !slices.Equal(got, c.t.Events) {
				t.Errorf("derived %v\n decided %v", got, c.t.Events)
			}
			if back.EndSeq != 8 || back.LeasedSeq != 5 || !back.LeasedUntil.Equal(c.h.LeasedUntil) ||
				!back.ClaimedAt.Equal(c.h.Job.LeasedAt) || !back.FinishedAt.Equal(t0) || back.Outcome != c.t.Outcome {
				t.Errorf("record round trip %+v", back)
			}
			if (back.Error == nil) != (c.t.AttemptError == nil) || (back.Error != nil && *back.Error != *c.t.AttemptError) {
				t.Errorf("record error %+v, want %+v", back.Error, c.t.AttemptError)
			}
		})
	}
}

func TestDeriveEvents(t *testing.T) {
	j := &Job{ID: "j", Queue: "q", State: JobStateLeased, CreatedAt: t0, LeaseOwner: "w2", LeaseGeneration: 2,
		Attempts: 2, LeasedAt: t0.Add(3 * time.Second)}
	first := AttemptRecord{Attempt: 1, Generation: 1, WorkerID: "w1", ClaimedAt: t0.Add(time.Second),
		LeasedUntil: t0.Add(31 * time.Second), LeasedSeq: 2, FinishedAt: t0.Add(2 * time.Second),
		Outcome: AttemptFailed, State: JobStateQueued, EndSeq: 4, Error: &JobError{Code: "x"}, RetryAt: t0.Add(3 * time.Second)}
	stored := []Event{{JobID: "j", Sequence: 3, Type: EventCheckpointSaved, Time: t0, Data: "{}"}}
	row := HistoryRow{Job: j, LeasedUntil: t0.Add(33 * time.Second), LeasedSeq: 5, Attempts: []AttemptRecord{first}}
	evs := DeriveEvents(row, stored)
	want := []EventType{EventQueued, EventLeased, EventCheckpointSaved, EventRunFailed, EventLeased}
	var got []EventType
	for i, e := range evs {
		got = append(got, e.Type)
		if e.Sequence != int64(i+1) {
			t.Errorf("event %d has sequence %d", i, e.Sequence)
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	if page := PageEvents(evs, 2, 2); len(page) != 2 || page[0].Sequence != 3 || page[1].Sequence != 4 {
		t.Errorf("page after 2: %v", page)
	}
	if page := PageEvents(evs, 5, 10); len(page) != 0 {
		t.Errorf("page after the end: %v", page)
	}
	// A row written before migration 013 pinned at 4: derived events up to
	// 4 are the stored ones'.
	row.StoredThrough = 4
	legacy := []Event{{Sequence: 1, Type: EventQueued}, {Sequence: 2, Type: EventLeased}, stored[0], {Sequence: 4, Type: EventRunFailed}}
	evs = DeriveEvents(row, legacy)
	if len(evs) != 5 || evs[4].Sequence != 5 || evs[4].Type != EventLeased || evs[0].Data != "" {
		t.Errorf("legacy history %v", evs)
	}
}
