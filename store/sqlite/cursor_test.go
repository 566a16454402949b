package sqlite

import (
	"errors"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func TestCursorRoundTrips(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 2, 3, 4, 5, 123456000, time.UTC)
	for _, kind := range []string{cursorJobs, cursorDead} {
		tok := encodeCursor(kind, at, "0191b0f6-job:with:colons")
		c, err := decodeCursor(kind, tok)
		if err != nil {
			t.Fatalf("decode %s cursor %q: %v", kind, tok, err)
		}
		if !c.at.Equal(at) || c.id != "0191b0f6-job:with:colons" {
			t.Fatalf("decoded %+v, want %s and the same id", c, at)
		}
	}
}

func TestCursorOfOneListingIsRefusedByTheOther(t *testing.T) {
	t.Parallel()
	tok := encodeCursor(cursorJobs, time.Unix(1, 0), "job")
	if _, err := decodeCursor(cursorDead, tok); !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("a ListJobs cursor given to ListDeadJobs: got %v, want ErrInvalid", err)
	}
}

// FuzzDecodeCursor: any token either decodes to a cursor that encodes back
// to the same token, or is refused with store.ErrInvalid. Never a panic,
// never another error.
func FuzzDecodeCursor(f *testing.F) {
	f.Add(encodeCursor(cursorJobs, time.Unix(0, 0), "a"))
	f.Add(encodeCursor(cursorDead, time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), "0191b0f6-7c2e-7a55-9c55-2b1f3c1d9e10"))
	f.Add("")
	f.Add("not base64!")
	f.Add("ajE6OjE=")   // "j1::1"
	f.Add("ajE6eDp5")   // "j1:x:y"
	f.Add("ajE6MTow")   // "j1:1:0"
	f.Add("ajE6LTE6AA") // "j1:-1:\x00"
	f.Add("ajE6OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk6aWQ")
	f.Fuzz(func(t *testing.T, token string) {
		for _, kind := range []string{cursorJobs, cursorDead} {
			c, err := decodeCursor(kind, token)
			if err != nil {
				var inv *store.InvalidError
				if !errors.As(err, &inv) || !errors.Is(err, store.ErrInvalid) || inv.Field != "cursor" {
					t.Fatalf("decode %q: got %v, want an *InvalidError on cursor", token, err)
				}
				continue
			}
			if store.ValidateText("id", c.id, store.NameMaxLen, true) != nil {
				t.Fatalf("decode %q accepted an invalid id %q", token, c.id)
			}
			// Decoding is canonical up to the integer's spelling ("01" and
			// "1"): re-encoding must decode to the same cursor.
			again, err := decodeCursor(kind, encodeCursor(kind, c.at, c.id))
			if err != nil || !again.at.Equal(c.at) || again.id != c.id {
				t.Fatalf("decode %q = %+v, re-encoded decodes to %+v, %v", token, c, again, err)
			}
		}
	})
}
