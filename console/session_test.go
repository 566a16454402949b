package console

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func testKey(b byte) []byte { return bytes.Repeat([]byte{b}, SessionKeyLen) }

// A sealed session opens with the same key (as on another replica of the
// same database), and not with another key, after its expiry, or changed.
func TestSessionSealing(t *testing.T) {
	s, err := newSealer(testKey(1))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	v := session{ID: "abc", Key: "lh_secret", Expires: now.Add(time.Hour).Unix()}
	sealed, err := s.seal(v)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "lh_secret") {
		t.Fatalf("the sealed cookie shows the key: %s", sealed)
	}
	replica, _ := newSealer(testKey(1))
	got, err := replica.open(sealed, now)
	if err != nil || got != v {
		t.Fatalf("open on a replica = %+v, %v; want %+v", got, err, v)
	}
	other, _ := newSealer(testKey(2))
	if _, err := other.open(sealed, now); err == nil {
		t.Fatal("a session opened under another key")
	}
	if _, err := s.open(sealed, now.Add(2*time.Hour)); err == nil {
		t.Fatal("an expired session opened")
	}
	b := []byte(sealed)
	b[len(b)/2] ^= 1
	if _, err := s.open(string(b), now); err == nil {
		t.Fatal("a changed session opened")
	}
}

// A CSRF token is bound to its session and key.
func TestCSRFToken(t *testing.T) {
	s, _ := newSealer(testKey(1))
	tok := s.csrfToken("one")
	if !s.checkCSRF("one", tok) {
		t.Fatal("the session's own token was refused")
	}
	if s.checkCSRF("two", tok) || s.checkCSRF("one", "") {
		t.Fatal("another session's token, or none, was accepted")
	}
	other, _ := newSealer(testKey(2))
	if other.checkCSRF("one", tok) {
		t.Fatal("a token under another key was accepted")
	}
}

// Payloads are shown as indented JSON, text or hex, and capped.
func TestShow(t *testing.T) {
	if got := show([]byte(`{"a":1}`)); got.Kind != "json" || !strings.Contains(got.Text, "\n  \"a\": 1") {
		t.Fatalf("json: %+v", got)
	}
	if got := show([]byte{0xff, 0x00}); got.Kind != "binary" || got.Text != "ff00" {
		t.Fatalf("binary: %+v", got)
	}
	big := show(bytes.Repeat([]byte("x"), shownMaxBytes+10))
	if !big.Truncated || len(big.Text) != shownMaxBytes || big.Size != shownMaxBytes+10 {
		t.Fatalf("big: truncated %v, %d bytes of %d", big.Truncated, len(big.Text), big.Size)
	}
}
