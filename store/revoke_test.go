package store

import (
	"errors"
	"testing"
)

func TestDecideRevoke(t *testing.T) {
	if _, err := DecideRevoke(nil, "p1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoking a missing principal: %v, want ErrNotFound", err)
	}
	valid := &Principal{ID: "p1", Name: "ops", Role: RoleAdmin}
	if revoke, err := DecideRevoke(valid, "p1"); !revoke || err != nil {
		t.Fatalf("revoking a valid principal: %v, %v; want a revoke", revoke, err)
	}
	revoked := *valid
	revoked.RevokedAt = t0
	if revoke, err := DecideRevoke(&revoked, "p1"); revoke || err != nil {
		t.Fatalf("revoking a revoked principal: %v, %v; want no change", revoke, err)
	}
	a := RevokeAudit(RevokePrincipalParams{Tenant: "t", ID: "p1", Actor: "key:root", ActorName: "root"}, &revoked)
	if a.Action != AuditAPIKeyRevoked || a.Target != "p1" || a.Actor != "key:root" || a.ActorName != "root" || a.Tenant != "t" ||
		a.Data != PrincipalAuditData(&revoked) {
		t.Fatalf("revoke audit %+v", a)
	}
}
