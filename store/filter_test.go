package store_test

import (
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasehold/leasehold/store"
)

func TestParseJobFilter(t *testing.T) {
	d := func(s string) time.Time {
		t.Helper()
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v.UTC()
	}
	cases := []struct {
		in   string
		want store.JobFilter
	}{
		{"", store.JobFilter{}},
		{"   \t\n", store.JobFilter{}},
		{`queue = "emails"`, store.JobFilter{Queues: []string{"emails"}}},
		{`queue = emails`, store.JobFilter{Queues: []string{"emails"}}},
		{`queue:emails`, store.JobFilter{Queues: []string{"emails"}}},
		{`queue:("a", "b")`, store.JobFilter{Queues: []string{"a", "b"}}},
		{`queue : ( a ,b )`, store.JobFilter{Queues: []string{"a", "b"}}},
		{`state:(QUEUED,LEASED)`, store.JobFilter{States: []store.JobState{store.JobStateQueued, store.JobStateLeased}}},
		{`state = dead`, store.JobFilter{States: []store.JobState{store.JobStateDead}}},
		{`state = JOB_STATE_FAILED`, store.JobFilter{States: []store.JobState{store.JobStateFailed}}},
		{
			`queue = "emails" AND state = DEAD AND kind = "send" AND metadata.customer = "42" AND created >= "2026-12-01T00:00:00Z" AND error_code = "TIMEOUT"`,
			store.JobFilter{
				Queues: []string{"emails"}, States: []store.JobState{store.JobStateDead}, Kinds: []string{"send"},
				Metadata: map[string]string{"customer": "42"}, CreatedAfter: d("2026-12-01T00:00:00Z"), ErrorCodes: []string{"TIMEOUT"},
			},
		},
		{`metadata."team name" = "a \"b\" \\ c\n"`, store.JobFilter{Metadata: map[string]string{"team name": "a \"b\" \\ c\n"}}},
		{`metadata.a/b-c.d = ""`, store.JobFilter{Metadata: map[string]string{"a/b-c.d": ""}}},
		{`metadata.x = "\u00e9"`, store.JobFilter{Metadata: map[string]string{"x": "é"}}},
		{`created >= 2026-12-01T00:00:00+01:00 AND created < "2026-12-02T00:00:00Z"`, store.JobFilter{CreatedAfter: d("2026-11-30T23:00:00Z"), CreatedBefore: d("2026-12-02T00:00:00Z")}},
		{`created > "2026-12-01T00:00:00Z"`, store.JobFilter{CreatedAfter: d("2026-12-01T00:00:00.000000001Z")}},
		{`created_at <= "2026-12-01T00:00:00Z"`, store.JobFilter{CreatedBefore: d("2026-12-01T00:00:00.000000001Z")}},
		{`finished >= "2026-12-01T00:00:00Z" AND finished < "2026-12-01T01:00:00Z"`, store.JobFilter{FinishedAfter: d("2026-12-01T00:00:00Z"), FinishedBefore: d("2026-12-01T01:00:00Z")}},
		{`error_code:(TIMEOUT, "upstream_503")`, store.JobFilter{ErrorCodes: []string{"TIMEOUT", "upstream_503"}}},
		{`dependency = pay-api AND concurrency_key = "cust 42" AND schedule = nightly`, store.JobFilter{Dependency: "pay-api", ConcurrencyKey: "cust 42", Schedule: "nightly"}},
		{`id:("j1", "j2")`, store.JobFilter{IDs: []string{"j1", "j2"}}},
		{`job_id = j1`, store.JobFilter{IDs: []string{"j1"}}},
		{"queue = a\tAND\nkind = b", store.JobFilter{Queues: []string{"a"}, Kinds: []string{"b"}}},
	}
	for _, c := range cases {
		got, err := store.ParseJobFilter(c.in)
		if err != nil {
			t.Errorf("ParseJobFilter(%q): %v", c.in, err)
			continue
		}
		if !sameFilter(got, c.want) {
			t.Errorf("ParseJobFilter(%q) = %#v, want %#v", c.in, got, c.want)
		}
		if got.IsZero() != (c.want.String() == "") {
			t.Errorf("ParseJobFilter(%q).IsZero() = %v", c.in, got.IsZero())
		}
		back, err := store.ParseJobFilter(got.String())
		if err != nil || !sameFilter(back, got) {
			t.Errorf("ParseJobFilter(%q).String() = %q reads back as %#v, %v", c.in, got.String(), back, err)
		}
	}
}

func TestParseJobFilterErrors(t *testing.T) {
	cases := []struct {
		in, field, says string
	}{
		{`queue`, "queue", "operator"},
		{`queue =`, "queue", "expected a value"},
		{`queue = "a`, "queue", "unterminated"},
		{`queue = "a\q"`, "queue", "unknown escape"},
		{`queue = "bad name"`, "queue", "must be"},
		{`queue = a OR queue = b`, "", "OR is not supported"},
		{`queue = a and kind = b`, "", "capitals"},
		{`queue = a kind = b`, "", "expected AND"},
		{`queue = a AND`, "", "expected a term"},
		{`queue = a ANDkind = b`, "", "expected AND"},
		{`queue = a AND(kind = b)`, "", "space after AND"},
		{`queue = a AND queue = b`, "queue", "given twice"},
		{`queue != a`, "queue", "not supported"},
		{`queue > a`, "queue", "compare with"},
		{`queue:(a, b`, "queue", "close the list"},
		{`queue:(a b)`, "queue", "expected , or )"},
		{`queue:()`, "queue", "expected a value"},
		{`state = SLEEPING`, "state", "unknown state"},
		{`metadata = x`, "metadata", "metadata.<key>"},
		{`metadata. = x`, "metadata", "expected a key"},
		{`metadata."" = x`, "metadata", "must not be empty"},
		{`metadata.k:(a, b)`, "metadata.k", "one value"},
		{`metadata.k = a AND metadata.k = b`, "metadata.k", "given twice"},
		{`queue.x = a`, "queue", "only metadata"},
		{`colour = red`, "colour", "unknown field"},
		{`created = "2026-12-01T00:00:00Z"`, "created", "compare a time"},
		{`created >= yesterday`, "created", "RFC 3339"},
		{`created >= "2026-12-01T00:00:00Z" AND created > "2026-12-02T00:00:00Z"`, "created", "two lower"},
		{`created >= "2026-12-02T00:00:00Z" AND created < "2026-12-01T00:00:00Z"`, "created", "empty"},
		{`finished:(a, b)`, "finished", "one time"},
		{`dependency = ""`, "dependency", "must not be empty"},
		{`error_code = ""`, "error_code", "must not be empty"},
		{`(queue = a)`, "", "parentheses"},
		{`NOT queue = a`, "", "NOT"},
		{`-queue = a`, "", "negation"},
		{`= a`, "", "field name"},
		{"queue = \xff", "", "UTF-8"},
		{"queue = \"a\x00\"", "", "NUL"},
		{strings.Repeat(" ", store.FilterMaxLen+1), "", "at most"},
		{manyTerms(store.FilterMaxTerms + 1), "", "terms"},
		{"queue:(" + strings.Repeat("a,", store.FilterMaxValues) + "a)", "queue", "at most"},
	}
	for _, c := range cases {
		_, err := store.ParseJobFilter(c.in)
		var fe *store.FilterError
		if !errors.As(err, &fe) || !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ParseJobFilter(%.60q): got %v, want a *store.FilterError", c.in, err)
			continue
		}
		if fe.Field != c.field || !strings.Contains(fe.Description, c.says) {
			t.Errorf("ParseJobFilter(%.60q): field %q, %q; want field %q saying %q", c.in, fe.Field, fe.Description, c.field, c.says)
		}
	}
}

// manyTerms is a filter of n metadata terms.
func manyTerms(n int) string {
	terms := make([]string, n)
	for i := range terms {
		terms[i] = "metadata.k" + strconv.Itoa(i) + " = v"
	}
	return strings.Join(terms, " AND ")
}

func TestFilterTime(t *testing.T) {
	base := time.Date(2026, 12, 1, 0, 0, 0, 0, time.FixedZone("x", 3600))
	for _, c := range []struct{ in, want time.Time }{
		{base, base.UTC()},
		{base.Add(time.Microsecond), base.Add(time.Microsecond).UTC()},
		{base.Add(time.Nanosecond), base.Add(time.Microsecond).UTC()},
		{base.Add(999 * time.Nanosecond), base.Add(time.Microsecond).UTC()},
		{base.Add(1001 * time.Nanosecond), base.Add(2 * time.Microsecond).UTC()},
	} {
		if got := store.FilterTime(c.in); !got.Equal(c.want) || got.Location() != time.UTC {
			t.Errorf("FilterTime(%s) = %s, want %s", c.in, got, c.want)
		}
	}
}

// sameFilter compares filters field by field, times by instant and nil and
// empty collections alike.
func sameFilter(a, b store.JobFilter) bool {
	return slices.Equal(a.Queues, b.Queues) && slices.Equal(a.States, b.States) && slices.Equal(a.Kinds, b.Kinds) &&
		maps.Equal(a.Metadata, b.Metadata) &&
		a.CreatedAfter.Equal(b.CreatedAfter) && a.CreatedBefore.Equal(b.CreatedBefore) &&
		a.FinishedAfter.Equal(b.FinishedAfter) && a.FinishedBefore.Equal(b.FinishedBefore) &&
		slices.Equal(a.ErrorCodes, b.ErrorCodes) && a.Dependency == b.Dependency &&
		a.ConcurrencyKey == b.ConcurrencyKey && a.Schedule == b.Schedule && slices.Equal(a.IDs, b.IDs)
}

// FuzzParseJobFilter: any input parses to a valid filter or fails with a
// *FilterError, never panics; a parsed filter prints as a string that
// parses back to it, and printing is stable.
func FuzzParseJobFilter(f *testing.F) {
	for _, s := range []string{
		"",
		`queue = "emails" AND state = DEAD AND kind = "send" AND metadata.customer = "42" AND created >= "2026-12-01T00:00:00Z" AND error_code = "TIMEOUT"`,
		`queue:("a","b")`,
		`state:(QUEUED,LEASED)`,
		`metadata."a \"b\"" = "\u0001\n"`,
		`created > 2026-12-01T00:00:00.123456789+05:30 AND created <= "2027-01-01T00:00:00Z"`,
		`finished >= "0001-01-01T00:00:00Z"`,
		`dependency = d AND concurrency_key = "k" AND schedule = s AND id:(x, y)`,
		`queue = a OR kind = b`,
		`(queue = a)`,
		`metadata.k = "\uZZZZ"`,
		"queue = \"\\",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, err := store.ParseJobFilter(s)
		if err != nil {
			var fe *store.FilterError
			if !errors.As(err, &fe) || !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("ParseJobFilter(%q): error %v (%T) is not a *store.FilterError", s, err, err)
			}
			return
		}
		if err := got.Validate(); err != nil {
			t.Fatalf("ParseJobFilter(%q) returned a filter that does not validate: %v", s, err)
		}
		str := got.String()
		back, err := store.ParseJobFilter(str)
		if err != nil {
			t.Fatalf("ParseJobFilter(%q).String() = %q does not parse: %v", s, str, err)
		}
		if !sameFilter(back, got) {
			t.Fatalf("ParseJobFilter(%q) = %#v; printed %q; read back %#v", s, got, str, back)
		}
		if back.String() != str {
			t.Fatalf("printing is not stable: %q then %q", str, back.String())
		}
		if got.IsZero() != (str == "") {
			t.Fatalf("ParseJobFilter(%q): IsZero %v but prints %q", s, got.IsZero(), str)
		}
	})
}
