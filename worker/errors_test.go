package worker

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	base := errors.New("boom")
	cases := []struct {
		name string
		err  error
		want failure
	}{
		{"a plain error is retryable with the default code", base,
			failure{code: codeDefault, message: "boom", retryable: true}},
		{"a wrapped plain error keeps its message", fmt.Errorf("call api: %w", base),
			failure{code: codeDefault, message: "call api: boom", retryable: true}},
		{"NonRetryable ends the job", NonRetryable(base),
			failure{code: codeDefault, message: "boom", retryable: false}},
		{"RetryAfter carries the delay", RetryAfter(base, time.Minute),
			failure{code: codeDefault, message: "boom", retryable: true, retryAfter: time.Minute}},
		{"RetryAfter is capped at seven days", RetryAfter(base, 30*24*time.Hour),
			failure{code: codeDefault, message: "boom", retryable: true, retryAfter: retryAfterMax}},
		{"a code survives classification helpers around it", NonRetryable(WithCode("BAD_INPUT", base)),
			failure{code: "BAD_INPUT", message: "boom", retryable: false}},
		{"the outermost classification wins", Retryable(fmt.Errorf("outer: %w", NonRetryable(base))),
			failure{code: codeDefault, message: "outer: boom", retryable: true}},
		{"the outermost code wins", WithCode("OUTER", WithCode("INNER", base)),
			failure{code: "OUTER", message: "boom", retryable: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := classify(tc.err); got != tc.want {
				t.Fatalf("classify = %+v, want %+v", got, tc.want)
			}
			if !errors.Is(tc.err, base) {
				t.Fatal("helpers must keep the error chain for errors.Is")
			}
		})
	}

	t.Run("long codes and messages are truncated on a rune boundary", func(t *testing.T) {
		t.Parallel()
		f := classify(WithCode(strings.Repeat("C", 500), errors.New(strings.Repeat("é", errorMessageMaxLen))))
		if len(f.code) != errorCodeMaxLen {
			t.Fatalf("code length %d, want %d", len(f.code), errorCodeMaxLen)
		}
		if len(f.message) > errorMessageMaxLen || !utf8.ValidString(f.message) {
			t.Fatalf("message length %d valid=%v", len(f.message), utf8.ValidString(f.message))
		}
	})
}

func TestUnknownEffectErrorNamesTheOperation(t *testing.T) {
	t.Parallel()
	err := error(&UnknownEffectError{Effect: Effect{Key: "charge", Status: EffectUnknown, Generation: 2, ProviderOperationID: "pi_1"}})
	var u *UnknownEffectError
	if !errors.As(fmt.Errorf("wrapped: %w", err), &u) || u.Effect.Key != "charge" {
		t.Fatal("errors.As does not find the UnknownEffectError")
	}
	for _, want := range []string{`"charge"`, "unknown", "generation 2", "pi_1", "reconcile"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err.Error(), want)
		}
	}
}
