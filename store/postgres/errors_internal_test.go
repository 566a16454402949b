package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasehold/leasehold/store"
)

func TestInterpretError(t *testing.T) {
	t.Parallel()
	syntax := &pgconn.PgError{Code: "42601", Message: `syntax error at or near "SELECT secret_column"`}
	for _, c := range []struct {
		name   string
		in     error
		want   error // sentinel the result must match; nil: none
		absent string
	}{
		{"no rows is not found", pgx.ErrNoRows, store.ErrNotFound, ""},
		{"serialization failure is unavailable", fmt.Errorf("claim: %w", &pgconn.PgError{Code: "40001"}), store.ErrUnavailable, ""},
		{"deadlock is unavailable", &pgconn.PgError{Code: "40P01"}, store.ErrUnavailable, ""},
		{"admin shutdown is unavailable", &pgconn.PgError{Code: "57P01"}, store.ErrUnavailable, ""},
		{"connection exception is unavailable", &pgconn.PgError{Code: "08006"}, store.ErrUnavailable, ""},
		{"NUL in text is invalid", &pgconn.PgError{Code: "22021"}, store.ErrInvalid, ""},
		{"a lost lease passes through", fmt.Errorf("job x: %w", store.ErrLeaseLost), store.ErrLeaseLost, ""},
		{"a context error passes through", fmt.Errorf("query: %w", context.Canceled), context.Canceled, ""},
		{"other errors do not quote SQL", syntax, nil, "secret_column"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := interpretError(c.in)
			if got == nil {
				t.Fatal("interpretError returned nil")
			}
			if c.want != nil && !errors.Is(got, c.want) {
				t.Errorf("interpretError(%v) = %v, want %v", c.in, got, c.want)
			}
			if c.absent != "" && strings.Contains(got.Error(), c.absent) {
				t.Errorf("interpretError(%v) = %q leaks %q", c.in, got, c.absent)
			}
			if errors.Is(got, pgx.ErrNoRows) {
				t.Errorf("interpretError(%v) still matches pgx.ErrNoRows", c.in)
			}
		})
	}
	if interpretError(nil) != nil {
		t.Error("interpretError(nil) is not nil")
	}
	hook := interpretError(&hookError{op: "complete", err: errors.New("injected")})
	if !strings.Contains(hook.Error(), "complete") || !strings.Contains(hook.Error(), "injected") {
		t.Errorf("a BeforeCommit failure reads %q, want the op and the cause", hook)
	}
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "40001"}, true},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40P01"}), true},
		{&pgconn.PgError{Code: "23505", ConstraintName: idempotencyKeyConstraint}, true},
		{&pgconn.PgError{Code: "23505", ConstraintName: jobsPrimaryKey}, false},
		{&pgconn.PgError{Code: "42601"}, false},
		{store.ErrLeaseLost, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
