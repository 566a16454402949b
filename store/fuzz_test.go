package store_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/leasehold/leasehold/store"
)

// nameOracle is ValidName's rule written independently as a regexp.
var nameOracle = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$`)

func FuzzValidName(f *testing.F) {
	for _, s := range []string{"", "a", "-a", "a-b.c_d:e", "a b", "a\x00", "é", strings.Repeat("x", 128), strings.Repeat("x", 129)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := store.ValidName(s), nameOracle.MatchString(s); got != want {
			t.Fatalf("ValidName(%q) = %v, the rule says %v", s, got, want)
		}
	})
}

func FuzzValidateSpec(f *testing.F) {
	f.Add("emails", "email.send", []byte(`{}`), "k", "v", int32(0), int64(0), int32(0), "")
	f.Add("", "k", []byte(nil), "", "", int32(-1001), int64(-1), int32(-1), "-dep")
	f.Add("q", "k\x00", []byte("x"), "a\x00", "\xff", int32(1000), int64(365*24*time.Hour), int32(1000), "dep")
	f.Fuzz(func(t *testing.T, queue, kind string, payload []byte, mk, mv string, prio int32, runAfter int64, maxAttempts int32, dep string) {
		s := store.JobSpec{
			Queue: queue, Kind: kind, Payload: payload, Metadata: map[string]string{mk: mv},
			Priority: prio, RunAfter: time.Duration(runAfter), MaxAttempts: maxAttempts, Dependency: dep,
		}
		err := store.ValidateSpec("spec", s)
		if err != nil {
			var inv *store.InvalidError
			if !errors.Is(err, store.ErrInvalid) || !errors.As(err, &inv) || !strings.HasPrefix(inv.Field, "spec.") {
				t.Fatalf("ValidateSpec returned %v, not an InvalidError on a spec field", err)
			}
			return
		}
		// Accepted: every bound holds, so both engines can store it as is.
		switch {
		case !store.ValidName(queue) || !store.ValidName(kind) || (dep != "" && !store.ValidName(dep)):
			t.Fatalf("accepted bad names %q %q %q", queue, kind, dep)
		case len(payload) > store.PayloadMaxBytes:
			t.Fatal("accepted an oversize payload")
		case mk == "" || strings.ContainsRune(mk, 0) || strings.ContainsRune(mv, 0) || !utf8.ValidString(mk) || !utf8.ValidString(mv):
			t.Fatalf("accepted metadata %q=%q", mk, mv)
		case len(mk) > store.MetadataKeyMaxLen || len(mv) > store.MetadataValueMaxLen:
			t.Fatal("accepted over-long metadata")
		case prio < store.PriorityMin || prio > store.PriorityMax:
			t.Fatalf("accepted priority %d", prio)
		case runAfter < 0 || time.Duration(runAfter) > store.RunAfterMax:
			t.Fatalf("accepted run_after %d", runAfter)
		case maxAttempts < 0 || maxAttempts > store.MaxAttemptsMax:
			t.Fatalf("accepted max attempts %d", maxAttempts)
		}
		if fp := store.Fingerprint(s); !strings.HasPrefix(fp, "v1:") {
			t.Fatalf("fingerprint %q", fp)
		}
	})
}

func FuzzFingerprint(f *testing.F) {
	f.Add("q", "k", []byte("p"), "a\x00b\x00c", "1\x002\x003", int32(0), int64(0))
	f.Add("", "", []byte(nil), "", "", int32(5), int64(1_900_000_000_000_000))
	f.Add("q", "k", []byte{0, 1}, "x\x00x", "1\x002", int32(-3), int64(-1))
	f.Fuzz(func(t *testing.T, queue, kind string, payload []byte, keys, values string, prio int32, runAtMicros int64) {
		// Metadata from NUL-separated lists; later duplicates win, as in a
		// map literal.
		ks, vs := strings.Split(keys, "\x00"), strings.Split(values, "\x00")
		type kv struct{ k, v string }
		var pairs []kv
		for i, k := range ks {
			v := ""
			if i < len(vs) {
				v = vs[i]
			}
			pairs = append(pairs, kv{k, v})
		}
		final := map[string]string{}
		for _, p := range pairs {
			final[p.k] = p.v
		}
		// The same map built forwards and backwards, from the final values.
		forward, backward := map[string]string{}, map[string]string{}
		for _, p := range pairs {
			forward[p.k] = final[p.k]
		}
		for i := len(pairs) - 1; i >= 0; i-- {
			backward[pairs[i].k] = final[pairs[i].k]
		}
		var runAt time.Time
		if runAtMicros != 0 {
			runAt = time.UnixMicro(runAtMicros)
		}
		mk := func(md map[string]string, p []byte) store.JobSpec {
			return store.JobSpec{Queue: queue, Kind: kind, Payload: p, Metadata: md, Priority: prio, RunAt: runAt}
		}
		a := store.Fingerprint(mk(forward, payload))
		b := store.Fingerprint(mk(backward, append([]byte(nil), payload...)))
		if a != b {
			t.Fatalf("equal requests hash differently: metadata order or payload identity leaked into the fingerprint")
		}
		if c := store.Fingerprint(mk(forward, payload)); c != a {
			t.Fatal("the fingerprint is not deterministic")
		}
		// A different priority is a different request.
		if prio != 0 {
			other := mk(forward, payload)
			other.Priority = 0
			if store.Fingerprint(other) == a {
				t.Fatalf("priority %d and 0 hash alike", prio)
			}
		}
	})
}

// eventDataOracle is EventData's rule as json.Marshal states it: a map of
// the pairs, times as RFC 3339 strings in UTC.
func eventDataOracle(kv ...any) string {
	m := map[string]any{}
	for i := 0; i+1 < len(kv); i += 2 {
		if t, ok := kv[i+1].(time.Time); ok {
			m[kv[i].(string)] = t.UTC().Format(time.RFC3339Nano)
			continue
		}
		m[kv[i].(string)] = kv[i+1]
	}
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func FuzzEventData(f *testing.F) {
	f.Add("worker_id", "w-1", "attempt", int64(3), "retryable", true, "error_message", "x", int64(0))
	f.Add("b", "<a href=\"x\">&</a>", "a", int64(-9), "b", false, "é\u2028", "\x00\xff\\", int64(1700000000123456789))
	f.Add("", "", "", int64(0), "", true, "", "", int64(0))
	f.Fuzz(func(t *testing.T, k1, s1, k2 string, n int64, k3 string, ok bool, k4, s4 string, nanos int64) {
		kv := []any{k1, s1, k2, n, k3, ok, k4, s4, "at", time.Unix(0, nanos).In(time.FixedZone("x", 3600)),
			"n32", int32(n), "int", int(n), "f", 0.5, "list", []string{s1, s4}}
		got, want := store.EventData(kv...), eventDataOracle(kv...)
		if got != want {
			t.Fatalf("EventData(%q)\n got %s\nwant %s", kv, got, want)
		}
		if !json.Valid([]byte(got)) {
			t.Fatalf("EventData(%q) = %s: not JSON", kv, got)
		}
	})
}
