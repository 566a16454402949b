package measure

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestResult(t *testing.T) {
	t.Parallel()

	t.Run("a line round-trips through String and ParseResult in order", func(t *testing.T) {
		t.Parallel()
		r := NewResult("leasehold", "postgres", ModeDrain)
		r.SetInt("jobs", 20000)
		r.SetFloat("drain_jobs_per_s", 558.25, 1)
		r.SetMillis("start_p50_ms", 2700*time.Microsecond)
		r.SetInt("jobs", 200) // replaces in place
		line := r.String()
		want := "RESULT system=leasehold engine=postgres mode=drain jobs=200 drain_jobs_per_s=558.2 start_p50_ms=2.700"
		if line != want {
			t.Fatalf("String() = %q, want %q", line, want)
		}
		back, err := ParseResult(line)
		if err != nil {
			t.Fatal(err)
		}
		if back.String() != line {
			t.Fatalf("round trip gave %q", back.String())
		}
		if v, ok := back.Float("start_p50_ms"); !ok || v != 2.7 {
			t.Fatalf("Float(start_p50_ms) = %v, %v", v, ok)
		}
		if _, ok := back.Float(KeySystem); ok {
			t.Fatal("a word parsed as a number")
		}
	})

	t.Run("malformed lines are refused with the reason", func(t *testing.T) {
		t.Parallel()
		for line, want := range map[string]string{
			"":                                   "not a RESULT line",
			"RESULTS system=x mode=drain":        "not a RESULT line",
			"RESULT system=x":                    "no mode",
			"RESULT mode=drain":                  "no system",
			"RESULT system=x mode=drain jobs":    "malformed",
			"RESULT system=x mode=drain =3":      "malformed",
			"RESULT system=x mode=drain Jobs=3":  "malformed",
			"RESULT system=x mode=drain a=1=2":   "malformed",
			"RESULT system=x mode=drain a=1 a=2": "repeated",
		} {
			_, err := ParseResult(line)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("ParseResult(%q) = %v, want an error containing %q", line, err, want)
			}
		}
	})

	t.Run("FindResult takes the last RESULT line of a run's output", func(t *testing.T) {
		t.Parallel()
		out := "leasehold postgres drain: ...\nRESULT system=a mode=drain\n  RESULT system=b mode=drain x=1  \nbye\n"
		r, err := FindResult(out)
		if err != nil {
			t.Fatal(err)
		}
		if s, _ := r.Get(KeySystem); s != "b" {
			t.Fatalf("system = %q, want b", s)
		}
		if _, err := FindResult("no result here\n"); !errors.Is(err, ErrNoResult) {
			t.Fatalf("FindResult without a line: %v", err)
		}
	})
}
