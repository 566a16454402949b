package coordinator

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// consoleProof is the metadata value a console sends at t.
func consoleProof(key []byte, t time.Time) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ConsoleProofMessage(t.Unix())))
	return fmt.Sprintf("%d:%s", t.Unix(), hex.EncodeToString(m.Sum(nil)))
}

// TestRecordConsoleSignIn, over a real socket with --auth api-key: without
// a valid, recent console proof the call is UNAUTHENTICATED whatever key
// it carries; with one, a refused sign-in is recorded in the
// coordinator's tenant as the console, a succeeded one with the signed-in
// key in the principal's tenant as that principal, and a succeeded one
// without a key is refused. ListAuditEvents shows both.
func TestRecordConsoleSignIn(t *testing.T) {
	t.Parallel()
	e := newAuthEnv(t, nil)
	key := e.c.ConsoleSessionKey()
	adminKey, _ := e.key(tenantA, store.RoleAdmin)
	readerKey, reader := e.key(tenantA, store.RoleReader)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	with := func(proof string) context.Context {
		if proof == "" {
			return ctx
		}
		return metadata.AppendToOutgoingContext(ctx, ConsoleProofHeader, proof)
	}
	refused := &leaseholdv1.RecordConsoleSignInRequest{Outcome: leaseholdv1.ConsoleSignInOutcome_CONSOLE_SIGN_IN_OUTCOME_REFUSED,
		RemoteAddress: "192.0.2.7:5123", Reason: "rate_limited", Refused: 4}
	succeeded := &leaseholdv1.RecordConsoleSignInRequest{Outcome: leaseholdv1.ConsoleSignInOutcome_CONSOLE_SIGN_IN_OUTCOME_SUCCEEDED,
		RemoteAddress: "192.0.2.8:6000"}
	wrongKey := make([]byte, len(key))
	for name, proof := range map[string]string{
		"no proof":               "",
		"a proof of another key": consoleProof(wrongKey, time.Now()),
		"a proof 2 min old":      consoleProof(key, time.Now().Add(-2*time.Minute)),
		"a garbled proof":        "123:zz",
	} {
		for _, k := range []string{"", adminKey} {
			_, err := leaseholdv1.NewAdminServiceClient(e.dial(k)).RecordConsoleSignIn(with(proof), refused)
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s (key %v): %v, want UNAUTHENTICATED", name, k != "", err)
			}
		}
	}
	proof := consoleProof(key, time.Now())
	if _, err := leaseholdv1.NewAdminServiceClient(e.dial("")).RecordConsoleSignIn(with(proof), refused); err != nil {
		t.Fatalf("a refused sign-in with a valid proof: %v", err)
	}
	if _, err := leaseholdv1.NewAdminServiceClient(e.dial("")).RecordConsoleSignIn(with(proof), succeeded); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a succeeded sign-in without the key: %v, want INVALID_ARGUMENT", err)
	}
	if _, err := leaseholdv1.NewAdminServiceClient(e.dial(readerKey)).RecordConsoleSignIn(with(proof), succeeded); err != nil {
		t.Fatalf("a succeeded sign-in with the reader's key: %v", err)
	}
	long := &leaseholdv1.RecordConsoleSignInRequest{Outcome: refused.GetOutcome(), Reason: strings.Repeat("x", 65)}
	if _, err := leaseholdv1.NewAdminServiceClient(e.dial("")).RecordConsoleSignIn(with(proof), long); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("a reason of 65 bytes: %v, want INVALID_ARGUMENT", err)
	}

	// The refused one is in the coordinator's tenant, the succeeded one in
	// the reader's (tenant A).
	find := func(tenant string, action leaseholdv1.AuditAction) *leaseholdv1.AuditEvent {
		t.Helper()
		evs, err := e.st.ListAudit(ctx, store.ListAuditParams{Tenant: tenant, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		var found *leaseholdv1.AuditEvent
		for _, ev := range evs.Events {
			if auditActions[ev.Action] == action {
				if found != nil {
					t.Fatalf("two %s events in %s", action, tenant)
				}
				found = toAuditEvent(ev)
			}
		}
		if found == nil {
			t.Fatalf("no %s event in tenant %s", action, tenant)
		}
		return found
	}
	r := find(e.c.cfg.Tenant, leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN_REFUSED)
	var data map[string]any
	if err := json.Unmarshal([]byte(r.GetDataJson()), &data); err != nil {
		t.Fatal(err)
	}
	if r.GetActor() != "console" || data["reason"] != "rate_limited" || data["remote_address"] != "192.0.2.7:5123" || data["refused"] != float64(4) {
		t.Errorf("the refused sign-in's event: %v", r)
	}
	s := find(tenantA, leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN)
	if s.GetActor() != reader.Identity() || s.GetTarget() != reader.ID || !strings.Contains(s.GetDataJson(), "192.0.2.8:6000") {
		t.Errorf("the succeeded sign-in's event: %v (reader %s)", s, reader.Identity())
	}
	// And the API lists it to an admin of tenant A.
	list, err := leaseholdv1.NewAdminServiceClient(e.dial(adminKey)).ListAuditEvents(ctx, &leaseholdv1.ListAuditEventsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed bool
	for _, ev := range list.GetEvents() {
		listed = listed || ev.GetAction() == leaseholdv1.AuditAction_AUDIT_ACTION_CONSOLE_SIGN_IN
	}
	if !listed {
		t.Errorf("ListAuditEvents of tenant A lacks the sign-in: %v", list.GetEvents())
	}
}
