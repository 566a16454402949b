package postgres

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/leasehold/leasehold/store"
)

func TestDecodeNotification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		payload string
		want    *store.QueueRef // nil: not a job wake-up
		ok      bool
	}{
		{encodeNotification("t", "emails"), &store.QueueRef{Tenant: "t", Queue: "emails"}, true},
		// A tenant may hold the separator and the kind mark; the queue,
		// after the last separator, decides.
		{encodeNotification("a\x1fb\x1ec", "q.1"), &store.QueueRef{Tenant: "a\x1fb\x1ec", Queue: "q.1"}, true},
		{"\x1e" + encodeNotification("t", "q"), &store.QueueRef{Tenant: "\x1et", Queue: "q"}, true},
		{"no separator", nil, false},
		{encodeNotification("", "q"), nil, false},
		{encodeNotification("t", "not a queue"), nil, false},
		// Another kind: body, separator, mark, kind. Unknown ones are
		// ignored, so a newer coordinator's payloads wake nothing here.
		{"t\x1fq" + notifySeparator + notifyKindMark + "from-the-future", nil, false},
	} {
		got, ok := decodeNotification(tc.payload)
		if ok != tc.ok || (tc.want == nil) != (got.jobs == nil) || (tc.want != nil && *got.jobs != *tc.want) {
			t.Errorf("decodeNotification(%q) = %+v, %v; want jobs %+v, %v", tc.payload, got.jobs, ok, tc.want, tc.ok)
		}
	}
}

// TestListenerReportsTheFirstFailure: before LISTEN ever succeeded, a
// failed attempt is handed to SubscribeJobs (which returns it) instead of
// being retried silently; Stop ends the retry loop and closes the
// subscriber's channel.
func TestListenerReportsTheFirstFailure(t *testing.T) {
	t.Parallel()
	refused := errors.New("connection refused")
	l := &listener{
		channel:   "c",
		connect:   func(context.Context) (*pgx.Conn, error) { return nil, refused },
		log:       slog.New(slog.DiscardHandler),
		jobs:      make(chan store.QueueRef, 1),
		listening: make(chan struct{}),
		firstErr:  make(chan error, 1),
		onStop:    func() {},
	}
	l.Start(t.Context())
	select {
	case err := <-l.firstErr:
		if !errors.Is(err, refused) {
			t.Fatalf("first error %v, want the connect error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no error reported within 30s")
	}
	l.Stop()
	if _, open := <-l.jobs; open {
		t.Fatal("the subscriber's channel is open after Stop")
	}
}

// FuzzDecodeChange: a change payload as the trigger writes it (tenant,
// 0x1f, job id) decodes to its tenant and job whatever the tenant holds,
// and anything decoded has both.
func FuzzDecodeChange(f *testing.F) {
	f.Add("acme", store.NewID())
	f.Add("a\x1fb", store.NewID())
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, tenant, id string) {
		if tenant != "" && id != "" && !strings.Contains(id, notifySeparator) {
			ref, ok := decodeChange(tenant + notifySeparator + id)
			if !ok || ref.Tenant != tenant || ref.ID != id {
				t.Fatalf("decodeChange(%q + sep + %q) = %+v, %v", tenant, id, ref, ok)
			}
		}
		if ref, ok := decodeChange(tenant + id); ok && (ref.Tenant == "" || ref.ID == "") {
			t.Fatalf("decodeChange(%q) = %+v with an empty part", tenant+id, ref)
		}
	})
}
