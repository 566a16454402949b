package coordinator

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/store"
)

// Refused authentications reach the audit log as a summary: one
// AUTHENTICATION_FAILURES event per audit interval at most, in the
// coordinator's tenant, counting the failures by reason and address, and
// naming no key. An admin reads it with ListAuditEvents.
func TestAuthenticationFailuresReachTheAuditLogAsASummary(t *testing.T) {
	const every = 300 * time.Millisecond
	e := newAuthEnv(t, func(cfg *Config) {
		cfg.OverloadLogInterval = 100 * time.Millisecond
		cfg.AuthFailureAuditInterval = every
	})
	admin, _ := e.key(TenantDefault, store.RoleAdmin)
	const wrong, missing = 30, 5
	keys := make([]string, wrong)
	start := time.Now()
	var wg sync.WaitGroup
	for i := range keys {
		var secret [32]byte
		_, _ = rand.Read(secret[:])
		keys[i] = APIKeyPrefix + base64.RawURLEncoding.EncodeToString(secret[:])
		conn := e.dial(keys[i])
		// At once: an unknown key is answered after the directory's next
		// reload.
		wg.Go(func() {
			_, err := leaseholdv1.NewJobServiceClient(conn).GetJob(t.Context(), &leaseholdv1.GetJobRequest{JobId: "01J00000000000000000000000"})
			if err == nil {
				t.Error("a random key was accepted")
			}
		})
	}
	wg.Wait()
	anon := leaseholdv1.NewJobServiceClient(e.dial(""))
	for range missing {
		if _, err := anon.GetJob(t.Context(), &leaseholdv1.GetJobRequest{JobId: "01J00000000000000000000000"}); err == nil {
			t.Fatal("a call with no key was accepted")
		}
	}

	admins := leaseholdv1.NewAdminServiceClient(e.dial(admin))
	var events []*leaseholdv1.AuditEvent
	var total int64
	reasons := map[string]int64{}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		page, err := admins.ListAuditEvents(t.Context(), &leaseholdv1.ListAuditEventsRequest{PageSize: 100})
		if err != nil {
			t.Fatal(err)
		}
		events, total, reasons = nil, 0, map[string]int64{}
		for _, ev := range page.GetEvents() {
			if ev.GetAction() != leaseholdv1.AuditAction_AUDIT_ACTION_AUTHENTICATION_FAILURES {
				continue
			}
			events = append(events, ev)
			var data struct {
				Failures     int64            `json:"failures"`
				Reasons      map[string]int64 `json:"reasons"`
				TopAddresses map[string]int64 `json:"top_addresses"`
			}
			if err := json.Unmarshal([]byte(ev.GetDataJson()), &data); err != nil {
				t.Fatalf("event data %q: %v", ev.GetDataJson(), err)
			}
			total += data.Failures
			for k, v := range data.Reasons {
				reasons[k] += v
			}
			if len(data.TopAddresses) == 0 {
				t.Errorf("event %q names no address", ev.GetDataJson())
			}
		}
		if total >= wrong+missing {
			break
		}
	}
	took := time.Since(start)
	if total != wrong+missing || reasons["invalid_key"] != wrong || reasons["missing_credentials"] != missing {
		t.Fatalf("audit summaries count %d failures %v in %d events; want %d (%d invalid_key, %d missing_credentials)",
			total, reasons, len(events), wrong+missing, wrong, missing)
	}
	if most := int(took/every) + 1; len(events) > most {
		t.Errorf("%d audit events in %v; want at most one per %v (%d)", len(events), took, every, most)
	}
	for _, ev := range events {
		if !strings.HasPrefix(ev.GetActor(), "coordinator:") || ev.GetTarget() != "authentication" {
			t.Errorf("event actor %q target %q; want coordinator:<id>, authentication", ev.GetActor(), ev.GetTarget())
		}
		for _, k := range keys {
			if strings.Contains(ev.GetDataJson(), k[len(APIKeyPrefix):len(APIKeyPrefix)+8]) {
				t.Errorf("event data %q holds part of a key", ev.GetDataJson())
			}
		}
		if strings.Contains(ev.GetDataJson(), APIKeyPrefix) {
			t.Errorf("event data %q holds a key prefix", ev.GetDataJson())
		}
	}
	t.Logf("%d refused authentications: %d audit event(s) in %v (interval %v): %v", wrong+missing, len(events), took.Round(time.Millisecond), every, events[0].GetDataJson())
}
