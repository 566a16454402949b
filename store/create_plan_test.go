package store

import (
	"errors"
	"testing"
	"time"
)

func TestPlanCreate(t *testing.T) {
	a, b := JobSpec{Queue: "q", Kind: "a"}, JobSpec{Queue: "q", Kind: "b"}
	steps, err := PlanCreate([]CreateRequest{
		{RequestID: "r1", Spec: a},
		{Spec: a},
		{RequestID: "r1", Spec: a},
		{RequestID: "r2", Spec: b},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []int{-1, -1, 0, -1}
	for i, st := range steps {
		if st.RepeatOf != want[i] || st.Unique.First != -1 {
			t.Errorf("request %d: %+v, want a repeat of %d", i, st, want[i])
		}
	}
	if steps[0].Fingerprint != Fingerprint(a) || steps[1].Fingerprint != "" || steps[3].Fingerprint != Fingerprint(b) {
		t.Errorf("fingerprints %+v", steps)
	}
	_, err = PlanCreate([]CreateRequest{{RequestID: "r1", Spec: a}, {RequestID: "r1", Spec: b}})
	if !errors.Is(err, ErrIdempotencyConflict) || err.Error() != "requests[1].request_id: "+ErrIdempotencyConflict.Error() {
		t.Errorf("a request id reused for another spec: %v, want ErrIdempotencyConflict naming requests[1]", err)
	}
	u := &UniqueOptions{OnConflict: UniqueFail}
	if _, err := PlanCreate([]CreateRequest{{Spec: a, Unique: u}, {Spec: a, Unique: u}}); !errors.Is(err, ErrUniqueConflict) {
		t.Errorf("a unique key repeated with fail: %v, want ErrUniqueConflict", err)
	}
}

func TestDecideRequestID(t *testing.T) {
	job := &Job{ID: "j1"}
	live := t0.Add(time.Hour)
	cases := []struct {
		name string
		rec  *IdempotencyRecord
		want KeyDecision
	}{
		{"no record", nil, KeyTake},
		{"expired", &IdempotencyRecord{Fingerprint: "fp", ExpiresAt: t0, Job: job}, KeyTake},
		{"job pruned", &IdempotencyRecord{Fingerprint: "fp", ExpiresAt: live}, KeyTake},
		{"same spec", &IdempotencyRecord{Fingerprint: "fp", ExpiresAt: live, Job: job}, KeyReplay},
		{"other spec", &IdempotencyRecord{Fingerprint: "other", ExpiresAt: live, Job: job}, KeyConflict},
	}
	for _, tc := range cases {
		if got := DecideRequestID("fp", tc.rec, t0); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
