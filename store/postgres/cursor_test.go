package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
	"github.com/leasehold/leasehold/store/postgres"
)

// FuzzDecodeCursor: any page token either decodes to a cursor that encodes
// and decodes back to itself, or is refused with an *InvalidError on
// "cursor" (store.ErrInvalid). Never a panic, never another error.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(postgres.EncodeCursor(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), "0191b0f6-7c2e-7a55-9c55-2b1f3c1d9e10"))
	f.Add(postgres.EncodeCursor(time.Unix(0, 0), "a"))
	f.Add("")
	f.Add("not base64!")
	f.Add("AQ")             // version only
	f.Add("AQAAAAAAAAAA")   // no id
	f.Add("AgAAAAAAAAAAYQ") // unknown version
	f.Add("Af__________YQ") // time -1µs
	f.Add("AX__________YQ") // time far beyond year 9999
	f.Add("AQAAAAAAAAAAAA") // NUL id
	f.Add("AQAAAAAAAAAA_w") // invalid UTF-8 id
	f.Fuzz(func(t *testing.T, token string) {
		at, id, err := postgres.DecodeCursor(token)
		if err != nil {
			var inv *store.InvalidError
			if !errors.As(err, &inv) || !errors.Is(err, store.ErrInvalid) || inv.Field != "cursor" {
				t.Fatalf("decode %q: got %v, want an *InvalidError on cursor", token, err)
			}
			return
		}
		if err := store.ValidateText("id", id, store.NameMaxLen, true); err != nil {
			t.Fatalf("decode %q accepted an invalid id %q: %v", token, id, err)
		}
		at2, id2, err := postgres.DecodeCursor(postgres.EncodeCursor(at, id))
		if err != nil || !at2.Equal(at) || id2 != id {
			t.Fatalf("decode %q = (%s, %q); re-encoded it decodes to (%s, %q, %v)", token, at, id, at2, id2, err)
		}
	})
}

// TestListRejectsForeignCursors: a page token the store did not issue is
// ErrInvalid from both lists, not a database error.
func TestListRejectsForeignCursors(t *testing.T) {
	t.Parallel()
	s := open(t, migrated(t), store.EngineOptions{})
	for _, tok := range []string{"garbage", "AX__________YQ", "AQAAAAAAAAAAAA"} {
		if _, err := s.ListJobs(t.Context(), store.ListJobsParams{Tenant: "t", Cursor: tok}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListJobs with cursor %q: got %v, want ErrInvalid", tok, err)
		}
		if _, err := s.ListDeadJobs(t.Context(), store.ListDeadJobsParams{Tenant: "t", Cursor: tok}); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ListDeadJobs with cursor %q: got %v, want ErrInvalid", tok, err)
		}
	}
}
