package store_test

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func TestFingerprintIsVersionedAndStable(t *testing.T) {
	t.Parallel()
	fp := store.Fingerprint(validSpec())
	if !strings.HasPrefix(fp, "v1:") || len(fp) != len("v1:")+64 {
		t.Fatalf("fingerprint %q is not a versioned sha256", fp)
	}
	for range 20 {
		if again := store.Fingerprint(validSpec()); again != fp {
			t.Fatalf("fingerprint changed between calls: %q then %q", fp, again)
		}
	}
}

func TestFingerprintCanonicalForm(t *testing.T) {
	t.Parallel()
	base := validSpec()
	base.Metadata = map[string]string{"a": "1", "b": "2", "c": "3"}
	base.RunAt = time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)

	same := map[string]func(*store.JobSpec){
		"metadata inserted in another order": func(s *store.JobSpec) {
			s.Metadata = map[string]string{}
			for _, k := range []string{"c", "a", "b"} {
				s.Metadata[k] = base.Metadata[k]
			}
		},
		"run_at in another time zone": func(s *store.JobSpec) { s.RunAt = s.RunAt.In(time.FixedZone("UTC+5", 5*3600)) },
		"run_at with sub-microsecond noise": func(s *store.JobSpec) {
			s.RunAt = s.RunAt.Add(999 * time.Nanosecond)
		},
		"a copied payload": func(s *store.JobSpec) { s.Payload = append([]byte(nil), s.Payload...) },
	}
	for name, change := range same {
		s := base
		s.Metadata = maps.Clone(base.Metadata)
		change(&s)
		if store.Fingerprint(s) != store.Fingerprint(base) {
			t.Errorf("%s changed the fingerprint", name)
		}
	}

	different := map[string]func(*store.JobSpec){
		"queue":           func(s *store.JobSpec) { s.Queue = "other" },
		"kind":            func(s *store.JobSpec) { s.Kind = "other" },
		"payload":         func(s *store.JobSpec) { s.Payload = []byte(`{"x":1}`) },
		"no payload":      func(s *store.JobSpec) { s.Payload = nil },
		"a metadata key":  func(s *store.JobSpec) { s.Metadata["d"] = "4" },
		"a metadata val":  func(s *store.JobSpec) { s.Metadata["a"] = "changed" },
		"no metadata":     func(s *store.JobSpec) { s.Metadata = nil },
		"priority":        func(s *store.JobSpec) { s.Priority = 1 },
		"run_at":          func(s *store.JobSpec) { s.RunAt = s.RunAt.Add(time.Microsecond) },
		"zero run_at":     func(s *store.JobSpec) { s.RunAt = time.Time{} },
		"run_after":       func(s *store.JobSpec) { s.RunAfter = time.Second },
		"max attempts":    func(s *store.JobSpec) { s.MaxAttempts = 3 },
		"dependency":      func(s *store.JobSpec) { s.Dependency = "payments" },
		"key/value shift": func(s *store.JobSpec) { s.Metadata = map[string]string{"a1": "", "b": "2", "c": "3"} },
	}
	seen := map[string]string{store.Fingerprint(base): "the base"}
	for name, change := range different {
		s := base
		s.Metadata = maps.Clone(base.Metadata)
		change(&s)
		fp := store.Fingerprint(s)
		if prev, dup := seen[fp]; dup {
			t.Errorf("changing the %s gives the same fingerprint as %s", name, prev)
		}
		seen[fp] = name
	}
}

func TestFingerprintFieldBoundaries(t *testing.T) {
	t.Parallel()
	// Length prefixes keep adjacent fields apart: moving bytes from one
	// field to the next must change the hash.
	a := store.JobSpec{Queue: "ab", Kind: "c"}
	b := store.JobSpec{Queue: "a", Kind: "bc"}
	if store.Fingerprint(a) == store.Fingerprint(b) {
		t.Fatal("queue/kind boundary is ambiguous")
	}
	c := store.JobSpec{Queue: "q", Kind: "k", Metadata: map[string]string{"ab": "c"}}
	d := store.JobSpec{Queue: "q", Kind: "k", Metadata: map[string]string{"a": "bc"}}
	if store.Fingerprint(c) == store.Fingerprint(d) {
		t.Fatal("metadata key/value boundary is ambiguous")
	}
	// Empty and absent payloads are the same request.
	e := store.JobSpec{Queue: "q", Kind: "k", Payload: []byte{}}
	f := store.JobSpec{Queue: "q", Kind: "k"}
	if store.Fingerprint(e) != store.Fingerprint(f) {
		t.Fatal("an empty payload and no payload hash differently")
	}
}

func TestFingerprintIgnoresTraceContext(t *testing.T) {
	t.Parallel()
	// A producer retrying from another span sends other trace headers but
	// the same request: it must replay, not conflict.
	plain := validSpec()
	traced := validSpec()
	traced.Metadata = map[string]string{"k": "v", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "tracestate": "x=1", "baggage": "user=1"}
	if store.Fingerprint(plain) != store.Fingerprint(traced) {
		t.Fatal("trace-context metadata changed the fingerprint")
	}
	other := validSpec()
	other.Metadata = map[string]string{"k": "v", "traceparentx": "1"}
	if store.Fingerprint(plain) == store.Fingerprint(other) {
		t.Fatal("a key that merely starts like a trace key was ignored")
	}
}
