package store_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func TestMatchQueue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		patterns []string
		queue    string
		want     bool
	}{
		{nil, "anything", true},
		{[]string{"emails"}, "emails", true},
		{[]string{"emails"}, "emails2", false},
		{[]string{"billing.*"}, "billing.invoices", true},
		{[]string{"billing.*"}, "billing", false},
		{[]string{"billing.*"}, "billingx.a", false},
		{[]string{"*"}, "x", true},
		{[]string{"a*z"}, "abcz", true},
		{[]string{"emails", "billing.*"}, "billing.a.b", true},
		{[]string{"emails", "billing.*"}, "reports", false},
	} {
		if got := store.MatchQueue(c.patterns, c.queue); got != c.want {
			t.Errorf("MatchQueue(%q, %q) = %v, want %v", c.patterns, c.queue, got, c.want)
		}
	}
}

func TestValidQueuePattern(t *testing.T) {
	t.Parallel()
	for p, want := range map[string]bool{
		"emails": true, "billing.*": true, "*": true, "a*b*": true,
		"": false, "a b": false, "a?": false, "[ab]": false, `a\*`: false, "a/b": false,
	} {
		if got := store.ValidQueuePattern(p); got != want {
			t.Errorf("ValidQueuePattern(%q) = %v, want %v", p, got, want)
		}
	}
}

func TestAuditCursorRoundTrip(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 6000, time.UTC)
	c := store.EncodeAuditCursor(store.AuditEvent{ID: "0190-abc", At: at})
	gotAt, gotID, err := store.DecodeAuditCursor(c)
	if err != nil || !gotAt.Equal(at) || gotID != "0190-abc" {
		t.Fatalf("decode(encode) = %v, %q, %v", gotAt, gotID, err)
	}
	for _, bad := range []string{"", "!!", "bm8tY29sb24", "MTI6"} {
		if _, _, err := store.DecodeAuditCursor(bad); err == nil {
			t.Errorf("cursor %q decoded", bad)
		}
	}
}

func TestKeyHashIsSHA256(t *testing.T) {
	t.Parallel()
	h := store.KeyHash("lh_x")
	if len(h) != store.KeyHashLen || bytes.Equal(h, store.KeyHash("lh_y")) {
		t.Fatalf("KeyHash: %x", h)
	}
}
