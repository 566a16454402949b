package storetest

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

// identityTests cover principals, worker id owners, the audit log and the
// actor recorded in the events of a principal's calls.
func identityTests() group {
	return group{name: "Identity", cases: []testCase{
		{"an API key principal is found by its hash in any tenant and listed in its own", testPrincipalByKeyHash},
		{"revoking is tenant scoped, recorded once and idempotent, and a revoked key is still found as revoked", testRevokePrincipal},
		{"one valid principal per certificate subject, free again once revoked", testCertSubjectUnique},
		{"creating a principal and its audit event commit together or not at all", testCreatePrincipalAtomic},
		{"invalid principals are refused before anything is written", testPrincipalValidation},
		{"last used is refreshed at most once per interval", testTouchPrincipal},
		{"a worker id belongs to the principal that bound it first until that one is revoked", testBindWorker},
		{"reading a worker id's owner binds nothing; a released id binds to the next principal", testWorkerOwnerRelease},
		{"the audit log pages newest first, per tenant", testAuditPaging},
		{"cancel, replay and abandon record the acting principal in their events", testActorInEvents},
		{"the lease key is the first candidate stored, the same for every later caller", testLeaseKey},
	}}
}

func keyHashOf(secret string) []byte { return store.KeyHash(secret) }

func (e *env) createPrincipal(p store.CreatePrincipalParams) *store.Principal {
	e.t.Helper()
	pr, err := e.s.CreatePrincipal(e.ctx, p)
	if err != nil {
		e.t.Fatalf("create principal %+v: %v", p, err)
	}
	return pr
}

func testPrincipalByKeyHash(t *testing.T, h Harness) {
	e := setup(t, h)
	pr := e.createPrincipal(store.CreatePrincipalParams{
		Tenant: tenantA, Name: "billing workers", Role: store.RoleWorker, Queues: []string{"billing.*", "emails"},
		KeyHash: keyHashOf("lh_secret-a"), Actor: "key:creator", ActorName: "root", Now: base,
	})
	if pr.ID == "" || pr.Tenant != tenantA || pr.Role != store.RoleWorker || pr.Name != "billing workers" ||
		pr.CreatedBy != "key:creator" || pr.CertSubject != "" || pr.Revoked() || !pr.LastUsedAt.IsZero() {
		t.Fatalf("created principal %+v", pr)
	}
	wantTime(t, "created_at", pr.CreatedAt, base)
	if got := pr.Identity(); got != "key:"+pr.ID {
		t.Errorf("identity %q, want key:%s", got, pr.ID)
	}
	got, err := e.s.PrincipalByKeyHash(e.ctx, keyHashOf("lh_secret-a"))
	if err != nil {
		t.Fatalf("find by hash: %v", err)
	}
	if got.ID != pr.ID || got.Tenant != tenantA || !bytes.Equal(got.KeyHash, keyHashOf("lh_secret-a")) ||
		len(got.Queues) != 2 || got.Queues[0] != "billing.*" || got.Queues[1] != "emails" {
		t.Errorf("found %+v, want %+v", got, pr)
	}
	_, err = e.s.PrincipalByKeyHash(e.ctx, keyHashOf("lh_other"))
	wantErr(t, err, store.ErrNotFound, "an unknown key")

	e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantB, Role: store.RoleAdmin, KeyHash: keyHashOf("lh_secret-b"), Now: at(time.Second)})
	second := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleReader, KeyHash: keyHashOf("lh_secret-c"), Now: at(2 * time.Second)})
	if second.CreatedBy != store.ActorOffline {
		t.Errorf("created by %q without an actor, want %q", second.CreatedBy, store.ActorOffline)
	}
	list, err := e.s.ListPrincipals(e.ctx, tenantA, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].ID != pr.ID || list[1].ID != second.ID {
		t.Errorf("tenant A lists %+v, want its two principals oldest first", list)
	}
	if list, _ := e.s.ListPrincipals(e.ctx, "tenant-c", true); len(list) != 0 {
		t.Errorf("an empty tenant lists %d principals", len(list))
	}

	// Every tenant's valid principals, bounded by the limit; a revoked
	// one is left out.
	if _, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: second.ID, Actor: "key:a", Now: at(3 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	valid, err := e.s.ValidPrincipals(e.ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	tenants := map[string]int{}
	for _, p := range valid {
		tenants[p.Tenant]++
		if p.ID == second.ID {
			t.Errorf("ValidPrincipals lists the revoked %s", p.ID)
		}
	}
	if len(valid) != 2 || tenants[tenantA] != 1 || tenants[tenantB] != 1 {
		t.Errorf("ValidPrincipals = %+v; want one of tenant A and one of tenant B", valid)
	}
	if valid, _ := e.s.ValidPrincipals(e.ctx, 1); len(valid) != 1 {
		t.Errorf("ValidPrincipals with limit 1 listed %d", len(valid))
	}
}

func testRevokePrincipal(t *testing.T, h Harness) {
	e := setup(t, h)
	pr := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleProducer, KeyHash: keyHashOf("lh_r"), Now: base})

	_, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantB, ID: pr.ID, Actor: "key:b", Now: at(time.Second)})
	wantErr(t, err, store.ErrPrincipalNotFound, "tenant B revokes A's principal")
	_, err = e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: freshID(), Actor: "key:a", Now: at(time.Second)})
	wantErr(t, err, store.ErrPrincipalNotFound, "revoke a missing principal")

	rev, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: pr.ID, Actor: "key:admin", ActorName: "ops", Now: at(2 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	wantTime(t, "revoked_at", rev.RevokedAt, at(2*time.Second))
	again, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: pr.ID, Actor: "key:admin", Now: at(3 * time.Second)})
	if err != nil {
		t.Fatalf("revoke again: %v", err)
	}
	wantTime(t, "revoked_at after a second revoke", again.RevokedAt, at(2*time.Second))

	found, err := e.s.PrincipalByKeyHash(e.ctx, keyHashOf("lh_r"))
	if err != nil || !found.Revoked() {
		t.Errorf("a revoked key is found as %+v, %v; want it, revoked", found, err)
	}
	if list, _ := e.s.ListPrincipals(e.ctx, tenantA, false); len(list) != 0 {
		t.Errorf("valid principals after revoke: %+v", list)
	}
	if list, _ := e.s.ListPrincipals(e.ctx, tenantA, true); len(list) != 1 || !list[0].Revoked() {
		t.Errorf("all principals after revoke: %+v", list)
	}
	page, err := e.s.ListAudit(e.ctx, store.ListAuditParams{Tenant: tenantA})
	if err != nil {
		t.Fatal(err)
	}
	var actions []store.AuditAction
	for _, ev := range page.Events {
		actions = append(actions, ev.Action)
	}
	if len(page.Events) != 2 || actions[0] != store.AuditAPIKeyRevoked || actions[1] != store.AuditAPIKeyCreated {
		t.Fatalf("audit %v, want one revoke after one create", actions)
	}
	ev := page.Events[0]
	if ev.Actor != "key:admin" || ev.ActorName != "ops" || ev.Target != pr.ID {
		t.Errorf("revoke audit event %+v", ev)
	}
	var data map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &data); err != nil || data["role"] != "producer" || data["identity"] != pr.Identity() {
		t.Errorf("revoke audit data %s (%v)", ev.Data, err)
	}
	if page, _ := e.s.ListAudit(e.ctx, store.ListAuditParams{Tenant: tenantB}); len(page.Events) != 0 {
		t.Errorf("tenant B sees %d audit events of A", len(page.Events))
	}
}

func testCertSubjectUnique(t *testing.T, h Harness) {
	e := setup(t, h)
	subject := store.CertSubjectFor("worker-1.example")
	pr := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, CertSubject: subject, Now: base})
	if pr.Identity() != "cert:CN=worker-1.example" || pr.KeyHash != nil {
		t.Fatalf("certificate principal %+v", pr)
	}
	_, err := e.s.CreatePrincipal(e.ctx, store.CreatePrincipalParams{Tenant: tenantB, Role: store.RoleAdmin, CertSubject: subject, Now: base})
	wantErr(t, err, store.ErrAlreadyExists, "a second principal for the same subject, in another tenant")
	found, err := e.s.PrincipalByCertSubject(e.ctx, subject)
	if err != nil || found.ID != pr.ID || found.Tenant != tenantA {
		t.Fatalf("find by subject: %+v, %v", found, err)
	}
	if _, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: pr.ID, Actor: "key:x", Now: at(time.Second)}); err != nil {
		t.Fatal(err)
	}
	_, err = e.s.PrincipalByCertSubject(e.ctx, subject)
	wantErr(t, err, store.ErrNotFound, "the subject of a revoked principal")
	next := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantB, Role: store.RoleReader, CertSubject: subject, Now: at(2 * time.Second)})
	if found, err := e.s.PrincipalByCertSubject(e.ctx, subject); err != nil || found.ID != next.ID {
		t.Errorf("after revoke and re-create, the subject finds %+v, %v; want %s", found, err, next.ID)
	}
}

func testCreatePrincipalAtomic(t *testing.T, h Harness) {
	e := setup(t, h)
	e.f.failCommits("*")
	_, err := e.s.CreatePrincipal(e.ctx, store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleAdmin, KeyHash: keyHashOf("lh_atomic"), Now: base})
	wantErr(t, err, errInjected, "create with a failing commit")
	e.f.healCommits()
	if _, err := e.s.PrincipalByKeyHash(e.ctx, keyHashOf("lh_atomic")); err == nil {
		t.Error("the principal of a failed commit exists")
	}
	if page, _ := e.s.ListAudit(e.ctx, store.ListAuditParams{Tenant: tenantA}); len(page.Events) != 0 {
		t.Errorf("a failed create left %d audit events", len(page.Events))
	}
}

func testPrincipalValidation(t *testing.T, h Harness) {
	e := setup(t, h)
	hash := keyHashOf("lh_v")
	for _, c := range []struct {
		name  string
		p     store.CreatePrincipalParams
		field string
	}{
		{"no role", store.CreatePrincipalParams{Tenant: tenantA, KeyHash: hash}, "role"},
		{"unknown role", store.CreatePrincipalParams{Tenant: tenantA, Role: "root", KeyHash: hash}, "role"},
		{"bad tenant", store.CreatePrincipalParams{Tenant: "a b", Role: store.RoleAdmin, KeyHash: hash}, "tenant"},
		{"bad queue pattern", store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, Queues: []string{"bad queue"}, KeyHash: hash}, "queues[0]"},
		{"no credential", store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker}, "key_hash"},
		{"both credentials", store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, KeyHash: hash, CertSubject: "CN=x"}, "key_hash"},
		{"short hash", store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, KeyHash: hash[:8]}, "key_hash"},
		{"subject without CN=", store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, CertSubject: "x"}, "cert_subject"},
	} {
		_, err := e.s.CreatePrincipal(e.ctx, c.p)
		var inv *store.InvalidError
		if !errors.As(err, &inv) || inv.Field != c.field {
			t.Errorf("%s: got %v, want an invalid %s", c.name, err, c.field)
		}
	}
	if list, _ := e.s.ListPrincipals(e.ctx, tenantA, true); len(list) != 0 {
		t.Errorf("invalid creates stored %d principals", len(list))
	}
}

func testTouchPrincipal(t *testing.T, h Harness) {
	e := setup(t, h)
	pr := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleReader, KeyHash: keyHashOf("lh_t"), Now: base})
	touch := func(now time.Time) time.Time {
		t.Helper()
		if err := e.s.TouchPrincipal(e.ctx, tenantA, pr.ID, now); err != nil {
			t.Fatal(err)
		}
		got, err := e.s.PrincipalByKeyHash(e.ctx, keyHashOf("lh_t"))
		if err != nil {
			t.Fatal(err)
		}
		return got.LastUsedAt
	}
	wantTime(t, "first use", touch(at(time.Second)), at(time.Second))
	wantTime(t, "a use within the interval", touch(at(30*time.Second)), at(time.Second))
	wantTime(t, "a use after the interval", touch(at(time.Second+store.PrincipalTouchInterval+time.Second)), at(time.Second+store.PrincipalTouchInterval+time.Second))
	if err := e.s.TouchPrincipal(e.ctx, tenantB, pr.ID, at(time.Hour)); err != nil {
		t.Fatalf("touch by another tenant must be a no-op, got %v", err)
	}
}

func testBindWorker(t *testing.T, h Harness) {
	e := setup(t, h)
	first := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, KeyHash: keyHashOf("lh_w1"), Now: base})
	second := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, KeyHash: keyHashOf("lh_w2"), Now: base})
	bind := func(tenant, worker, principal string) string {
		t.Helper()
		owner, err := e.s.BindWorker(e.ctx, store.BindWorkerParams{Tenant: tenant, WorkerID: worker, PrincipalID: principal, Now: at(time.Second)})
		if err != nil {
			t.Fatalf("bind %s to %s: %v", worker, principal, err)
		}
		return owner
	}
	if got := bind(tenantA, workerA, first.ID); got != first.ID {
		t.Errorf("first bind: owner %s, want %s", got, first.ID)
	}
	if got := bind(tenantA, workerA, first.ID); got != first.ID {
		t.Errorf("the owner binding again: owner %s", got)
	}
	if got := bind(tenantA, workerA, second.ID); got != first.ID {
		t.Errorf("another principal binds a taken id: owner %s, want %s", got, first.ID)
	}
	if got := bind(tenantB, workerA, second.ID); got != second.ID {
		t.Errorf("the same worker id in another tenant: owner %s, want %s", got, second.ID)
	}
	if _, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: first.ID, Actor: "key:x", Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := bind(tenantA, workerA, second.ID); got != second.ID {
		t.Errorf("after its owner was revoked: owner %s, want %s", got, second.ID)
	}
	_, err := e.s.BindWorker(e.ctx, store.BindWorkerParams{Tenant: tenantA, WorkerID: "bad worker", PrincipalID: second.ID})
	wantErr(t, err, store.ErrInvalid, "bind an invalid worker id")
}

func testWorkerOwnerRelease(t *testing.T, h Harness) {
	e := setup(t, h)
	first := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, KeyHash: keyHashOf("lh_o1"), Now: base})
	second := e.createPrincipal(store.CreatePrincipalParams{Tenant: tenantA, Role: store.RoleWorker, KeyHash: keyHashOf("lh_o2"), Now: base})
	owner := func(tenant string) string {
		t.Helper()
		o, err := e.s.WorkerOwner(e.ctx, tenant, workerA)
		if err != nil {
			t.Fatalf("owner of %s: %v", workerA, err)
		}
		return o
	}
	bind := func(principal string) string {
		t.Helper()
		o, err := e.s.BindWorker(e.ctx, store.BindWorkerParams{Tenant: tenantA, WorkerID: workerA, PrincipalID: principal, Now: at(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		return o
	}
	if got := owner(tenantA); got != "" {
		t.Fatalf("unbound id: owner %q", got)
	}
	if got := owner(tenantA); got != "" {
		t.Fatalf("reading the owner bound the id to %q", got)
	}
	if got := bind(first.ID); got != first.ID {
		t.Fatalf("first bind: %s", got)
	}
	if got := owner(tenantA); got != first.ID {
		t.Errorf("bound id: owner %q, want %s", got, first.ID)
	}
	if got := owner(tenantB); got != "" {
		t.Errorf("another tenant's id: owner %q", got)
	}
	if got, err := e.s.ReleaseWorker(e.ctx, tenantB, workerA); err != nil || got != "" {
		t.Errorf("release in another tenant: %q, %v", got, err)
	}
	if got, err := e.s.ReleaseWorker(e.ctx, tenantA, workerA); err != nil || got != first.ID {
		t.Fatalf("release: %q, %v; want %s", got, err, first.ID)
	}
	if got := owner(tenantA); got != "" {
		t.Errorf("released id: owner %q", got)
	}
	if got, err := e.s.ReleaseWorker(e.ctx, tenantA, workerA); err != nil || got != "" {
		t.Errorf("release again: %q, %v", got, err)
	}
	if got := bind(second.ID); got != second.ID {
		t.Errorf("after release the next principal binds: owner %s", got)
	}
	if _, err := e.s.RevokePrincipal(e.ctx, store.RevokePrincipalParams{Tenant: tenantA, ID: second.ID, Actor: "key:x", Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if got := owner(tenantA); got != "" {
		t.Errorf("a revoked owner is no owner: %q", got)
	}
	_, err := e.s.WorkerOwner(e.ctx, tenantA, "bad worker")
	wantErr(t, err, store.ErrInvalid, "owner of an invalid worker id")
	_, err = e.s.ReleaseWorker(e.ctx, tenantA, "bad worker")
	wantErr(t, err, store.ErrInvalid, "release an invalid worker id")
}

func testAuditPaging(t *testing.T, h Harness) {
	e := setup(t, h)
	const n = 7
	for i := range n {
		if _, err := e.s.AppendAudit(e.ctx, store.AppendAuditParams{
			Tenant: tenantA, Actor: "key:op", Action: store.AuditQueuePaused, Target: "q" + string(rune('a'+i)),
			Data: `{"i":` + string(rune('0'+i)) + `}`, Now: at(time.Duration(i/2) * time.Second), // pairs share a time
		}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.s.AppendAudit(e.ctx, store.AppendAuditParams{Tenant: tenantB, Actor: "key:b", Action: store.AuditQueueResumed, Now: base}); err != nil {
		t.Fatal(err)
	}
	var (
		got    []store.AuditEvent
		cursor string
	)
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("paging does not end")
		}
		page, err := e.s.ListAudit(e.ctx, store.ListAuditParams{Tenant: tenantA, Limit: 3, Cursor: cursor})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page.Events...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
	}
	if len(got) != n {
		t.Fatalf("paged %d events, want %d", len(got), n)
	}
	seen := map[string]bool{}
	for i, ev := range got {
		if seen[ev.ID] {
			t.Errorf("event %s listed twice", ev.ID)
		}
		seen[ev.ID] = true
		if ev.Tenant != tenantA || ev.Actor != "key:op" || ev.Action != store.AuditQueuePaused {
			t.Errorf("event %+v", ev)
		}
		if i > 0 && (ev.At.After(got[i-1].At) || (ev.At.Equal(got[i-1].At) && ev.ID > got[i-1].ID)) {
			t.Errorf("event %d (%s, %s) is not older than the one before (%s, %s)", i, ev.At, ev.ID, got[i-1].At, got[i-1].ID)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			t.Errorf("data %q: %v", ev.Data, err)
		}
	}
	_, err := e.s.ListAudit(e.ctx, store.ListAuditParams{Tenant: tenantA, Cursor: "not-a-cursor"})
	wantErr(t, err, store.ErrInvalid, "a forged cursor")
	_, err = e.s.AppendAudit(e.ctx, store.AppendAuditParams{Tenant: tenantA, Actor: "key:op"})
	wantErr(t, err, store.ErrInvalid, "an event without an action")
}

func testActorInEvents(t *testing.T, h Harness) {
	e := setup(t, h)
	actorOf := func(ev store.Event) string {
		var m map[string]any
		if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
			t.Fatalf("event data %q: %v", ev.Data, err)
		}
		s, _ := m["actor"].(string)
		return s
	}
	last := func(id string) store.Event {
		evs := e.events(tenantA, id)
		return evs[len(evs)-1]
	}

	queued := e.mustCreate(tenantA, spec("q"), base)
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: queued.ID, Reason: "r", Actor: "key:p1", Now: at(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if ev := last(queued.ID); ev.Type != store.EventCancelled || actorOf(ev) != "key:p1" {
		t.Errorf("cancel of a queued job: last event %s %s", ev.Type, ev.Data)
	}

	leased := e.mustCreate(tenantA, spec("l"), base)
	e.mustClaim(tenantA, workerA, "l", leased.ID, at(time.Second))
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: leased.ID, Actor: "cert:CN=ops", Now: at(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	if ev := last(leased.ID); ev.Type != store.EventCancelRequested || actorOf(ev) != "cert:CN=ops" {
		t.Errorf("cancel of a leased job: last event %s %s", ev.Type, ev.Data)
	}

	dead := e.deadJob(tenantA, "d", base)
	replay, _, err := e.s.ReplayDeadJob(e.ctx, store.ReplayDeadJobParams{Tenant: tenantA, JobID: dead.ID, Reason: "fixed", Actor: "key:op", Now: at(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if ev := last(dead.ID); ev.Type != store.EventReplayed || actorOf(ev) != "key:op" {
		t.Errorf("replay: last event of the dead job %s %s", ev.Type, ev.Data)
	}
	if evs := e.events(tenantA, replay.ID); actorOf(evs[0]) != "key:op" {
		t.Errorf("replay: first event of the new job %s", evs[0].Data)
	}
	dead2 := e.deadJob(tenantA, "d", base)
	if _, err := e.s.AbandonDeadJob(e.ctx, store.AbandonDeadJobParams{Tenant: tenantA, JobID: dead2.ID, Actor: "key:op2", Now: at(time.Minute)}); err != nil {
		t.Fatal(err)
	}
	if ev := last(dead2.ID); ev.Type != store.EventAbandoned || actorOf(ev) != "key:op2" {
		t.Errorf("abandon: last event %s %s", ev.Type, ev.Data)
	}

	plain := e.mustCreate(tenantA, spec("q"), base)
	if _, err := e.s.RequestCancel(e.ctx, store.RequestCancelParams{Tenant: tenantA, JobID: plain.ID, Now: at(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if ev := last(plain.ID); actorOf(ev) != "" {
		t.Errorf("a cancel without an actor records actor %q", actorOf(ev))
	}
}

func testLeaseKey(t *testing.T, h Harness) {
	e := setup(t, h)
	first := bytes.Repeat([]byte{1}, store.LeaseKeyLen)
	second := bytes.Repeat([]byte{2}, store.LeaseKeyLen)
	if _, err := e.s.LeaseKey(e.ctx, first[:16]); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a short candidate: %v, want ErrInvalid", err)
	}
	got, err := e.s.LeaseKey(e.ctx, first)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("first caller got %x, %v; want its candidate", got, err)
	}
	got, err = e.s.LeaseKey(e.ctx, second)
	if err != nil || !bytes.Equal(got, first) {
		t.Fatalf("second caller got %x, %v; want the stored key", got, err)
	}
}
