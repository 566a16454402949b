package console

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestRateLimitedSignInsAreRecordedOncePerInterval: past the burst, the
// first refused attempt of an address is recorded at once, the next ones
// are counted and recorded together an interval later; another address
// has its own count.
func TestRateLimitedSignInsAreRecordedOncePerInterval(t *testing.T) {
	l := newSignInLimiter()
	r := httptest.NewRequest(http.MethodPost, "/ui/signin", nil)
	r.RemoteAddr = "192.0.2.1:4000"
	for n := range signInBurst {
		if ok, audit, _ := l.allow(r); !ok || audit {
			t.Fatalf("attempt %d: ok %v, audit %v; want allowed", n+1, ok, audit)
		}
	}
	if ok, audit, refused := l.allow(r); ok || !audit || refused != 1 {
		t.Fatalf("the first refused attempt: ok %v, audit %v, refused %d; want recorded with 1", ok, audit, refused)
	}
	for range 2 {
		if ok, audit, _ := l.allow(r); ok || audit {
			t.Fatalf("a refused attempt within the interval: ok %v, audit %v; want neither", ok, audit)
		}
	}
	other := httptest.NewRequest(http.MethodPost, "/ui/signin", nil)
	other.RemoteAddr = "192.0.2.2:4000"
	if ok, _, _ := l.allow(other); !ok {
		t.Fatal("another address is limited by the first one's attempts")
	}
	l.clients["192.0.2.1"].auditedAt = time.Now().Add(-refusedAuditEvery)
	if ok, audit, refused := l.allow(r); ok || !audit || refused != 3 {
		t.Fatalf("an interval later: ok %v, audit %v, refused %d; want recorded with 3", ok, audit, refused)
	}
}
