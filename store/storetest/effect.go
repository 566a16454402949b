package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// effectTests cover the effect ledger: what one generation did is visible
// to the next, so "exactly once" is checkable per scoped effect.
func effectTests() group {
	return group{name: "Effect", cases: []testCase{
		{"effects of generation 1 are seen by generation 2 for skip or reconciliation", testEffectsAcrossGenerations},
		{"reserving an existing key returns the record instead of reserving again", testEffectReserveTwice},
		{"recording a key that was never reserved fails with ErrEffectNotFound (an ErrNotFound)", testEffectRecordUnknown},
	}}
}

func (e *env) reserve(tok store.LeaseToken, key string, now time.Time) (*store.Effect, bool) {
	e.t.Helper()
	eff, reserved, err := e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: tok, Key: key, Now: now})
	if err != nil {
		e.t.Fatalf("reserve %q at generation %d: %v", key, tok.Generation, err)
	}
	if eff == nil || eff.Key != key || eff.JobID != tok.JobID {
		e.t.Fatalf("reserve %q returned %+v", key, eff)
	}
	return eff, reserved
}

func (e *env) record(tok store.LeaseToken, key string, status store.EffectStatus, op, result string, now time.Time) *store.Effect {
	e.t.Helper()
	eff, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: tok, Key: key, Status: status, ProviderOperationID: op, Result: []byte(result), Now: now})
	if err != nil {
		e.t.Fatalf("record %q as %s at generation %d: %v", key, status, tok.Generation, err)
	}
	if eff.Status != status || eff.ProviderOperationID != op || string(eff.Result) != result {
		e.t.Fatalf("record %q returned %+v", key, eff)
	}
	return eff
}

func testEffectsAcrossGenerations(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	a := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	if len(a.Effects) != 0 {
		t.Fatalf("a first claim carries effects %+v", a.Effects)
	}
	now := at(2 * time.Second)
	for _, key := range []string{"charge", "email", "sms", "refund"} {
		eff, reserved := e.reserve(a.Token, key, now)
		if !reserved || eff.Status != store.EffectReserved || eff.LeaseGeneration != 1 {
			t.Fatalf("first reserve of %q: %+v, reserved %v", key, eff, reserved)
		}
	}
	e.record(a.Token, "charge", store.EffectSucceeded, "ch_123", `{"amount":100}`, at(3*time.Second))
	e.record(a.Token, "sms", store.EffectUnknown, "sms_9", "", at(3*time.Second))
	e.record(a.Token, "refund", store.EffectFailed, "", `{"error":"declined"}`, at(3*time.Second))
	// "email" stays reserved: A crashed mid-call.

	e.reap(at(time.Minute))
	b := e.mustClaim(tenantA, workerB, "default", j.ID, at(time.Minute))
	byKey := map[string]store.Effect{}
	for _, eff := range b.Effects {
		byKey[eff.Key] = eff
	}
	if len(byKey) != 4 {
		t.Fatalf("generation 2's claim carries %d effects, want 4: %+v", len(byKey), b.Effects)
	}
	if eff := byKey["charge"]; eff.Status != store.EffectSucceeded || eff.ProviderOperationID != "ch_123" || string(eff.Result) != `{"amount":100}` {
		t.Fatalf("claimed effect charge: %+v", eff)
	}
	if byKey["email"].Status != store.EffectReserved || byKey["sms"].Status != store.EffectUnknown || byKey["refund"].Status != store.EffectFailed {
		t.Fatalf("claimed effects: %+v", byKey)
	}

	now = at(time.Minute + time.Second)
	// Succeeded: skip it, with the original outcome.
	eff, reserved := e.reserve(b.Token, "charge", now)
	if reserved || eff.Status != store.EffectSucceeded || eff.ProviderOperationID != "ch_123" || string(eff.Result) != `{"amount":100}` || eff.LeaseGeneration != 1 {
		t.Fatalf("generation 2 reserving a succeeded effect: %+v, reserved %v; want generation 1's success, not reserved", eff, reserved)
	}
	// Left reserved or unknown: returned as is, to reconcile first.
	eff, reserved = e.reserve(b.Token, "email", now)
	if reserved || eff.Status != store.EffectReserved || eff.LeaseGeneration != 1 {
		t.Fatalf("generation 2 reserving an effect left reserved: %+v, reserved %v", eff, reserved)
	}
	eff, reserved = e.reserve(b.Token, "sms", now)
	if reserved || eff.Status != store.EffectUnknown || eff.ProviderOperationID != "sms_9" {
		t.Fatalf("generation 2 reserving an unknown effect: %+v, reserved %v", eff, reserved)
	}
	// Failed: the new generation may try again.
	eff, reserved = e.reserve(b.Token, "refund", now)
	if !reserved || eff.Status != store.EffectReserved || eff.LeaseGeneration != 2 {
		t.Fatalf("generation 2 reserving a failed effect: %+v, reserved %v; want re-reserved at generation 2", eff, reserved)
	}
	// After reconciling, generation 2 records the outcome it found.
	e.record(b.Token, "email", store.EffectSucceeded, "msg_1", "", at(time.Minute+2*time.Second))
	e.record(b.Token, "refund", store.EffectSucceeded, "rf_1", "", at(time.Minute+2*time.Second))

	effs, err := e.s.ListEffects(e.ctx, tenantA, j.ID)
	if err != nil || len(effs) != 4 {
		t.Fatalf("list effects: %d, %v", len(effs), err)
	}
	want := map[string]store.EffectStatus{"charge": store.EffectSucceeded, "email": store.EffectSucceeded, "refund": store.EffectSucceeded, "sms": store.EffectUnknown}
	for i, eff := range effs {
		if i > 0 && effs[i-1].Key >= eff.Key {
			t.Fatalf("effects are not ordered by key: %q before %q", effs[i-1].Key, eff.Key)
		}
		if eff.Status != want[eff.Key] {
			t.Errorf("effect %q is %s, want %s", eff.Key, eff.Status, want[eff.Key])
		}
	}
	// A's reports on the ledger are fenced.
	_, err = e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: a.Token, Key: "sms", Status: store.EffectSucceeded, Now: at(time.Minute + 3*time.Second)})
	wantErr(t, err, store.ErrLeaseLost, "generation 1 recording after generation 2 claimed")
	_, _, err = e.s.ReserveEffect(e.ctx, store.ReserveEffectParams{Tenant: tenantA, Token: a.Token, Key: "new", Now: at(time.Minute + 3*time.Second)})
	wantErr(t, err, store.ErrLeaseLost, "generation 1 reserving after generation 2 claimed")
	if effs, _ := e.s.ListEffects(e.ctx, tenantA, j.ID); len(effs) != 4 {
		t.Fatalf("fenced reports changed the ledger: %+v", effs)
	}
}

func testEffectReserveTwice(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	first, reserved := e.reserve(c.Token, "charge", at(2*time.Second))
	if !reserved {
		t.Fatal("first reserve did not reserve")
	}
	again, reserved := e.reserve(c.Token, "charge", at(3*time.Second))
	if reserved || again.Status != store.EffectReserved || again.LeaseGeneration != 1 {
		t.Fatalf("second reserve: %+v, reserved %v; want the existing record, not reserved", again, reserved)
	}
	wantTime(t, "the existing record's created_at", again.CreatedAt, first.CreatedAt)
	e.record(c.Token, "charge", store.EffectSucceeded, "ch_1", "ok", at(4*time.Second))
	done, reserved := e.reserve(c.Token, "charge", at(5*time.Second))
	if reserved || done.Status != store.EffectSucceeded {
		t.Fatalf("reserve after success: %+v, reserved %v", done, reserved)
	}
}

func testEffectRecordUnknown(t *testing.T, h Harness) {
	e := setup(t, h)
	j := e.mustCreate(tenantA, spec("default"), base)
	c := e.mustClaim(tenantA, workerA, "default", j.ID, at(time.Second))
	_, err := e.s.RecordEffect(e.ctx, store.RecordEffectParams{Tenant: tenantA, Token: c.Token, Key: "never", Status: store.EffectSucceeded, Now: at(2 * time.Second)})
	if !errors.Is(err, store.ErrEffectNotFound) {
		t.Fatalf("record of an unreserved key: %v, want %v", err, store.ErrEffectNotFound)
	}
	if effs, err := e.s.ListEffects(e.ctx, tenantA, j.ID); err != nil || len(effs) != 0 {
		t.Fatalf("recording an unreserved key wrote %+v, %v", effs, err)
	}
}
