package coordinator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasehold/leasehold/store"
)

func TestToStatusMapsEverySentinelWithItsReason(t *testing.T) {
	for _, tc := range []struct {
		err    error
		code   codes.Code
		reason string
	}{
		{fmt.Errorf("complete: %w", store.ErrLeaseLost), codes.FailedPrecondition, ReasonLeaseLost},
		{fmt.Errorf("create: %w", store.ErrIdempotencyConflict), codes.AlreadyExists, ReasonIdempotencyConflict},
		{store.ErrNotFound, codes.NotFound, ReasonJobNotFound},
		{store.ErrAlreadyFinal, codes.FailedPrecondition, ReasonJobAlreadyFinal},
		{store.ErrNotDead, codes.FailedPrecondition, ReasonJobNotDead},
		{store.ErrAbandoned, codes.FailedPrecondition, ReasonJobAbandoned},
		{store.ErrAlreadyReplayed, codes.FailedPrecondition, ReasonJobAlreadyReplayed},
		{fmt.Errorf("claim: %w", store.ErrUnavailable), codes.Unavailable, ReasonStoreUnavailable},
		{store.Invalid("job.queue", "bad"), codes.InvalidArgument, ReasonInvalidArgument},
		{&store.FilterError{Field: "state", Description: "bad"}, codes.InvalidArgument, ReasonInvalidFilter},
	} {
		st := status.Convert(toStatus(context.Background(), slog.New(slog.DiscardHandler), tc.err))
		var reason string
		for _, d := range st.Details() {
			if info, ok := d.(*errdetails.ErrorInfo); ok {
				reason = info.GetReason()
				if info.GetDomain() != ErrorDomain {
					t.Errorf("%v: domain %q", tc.err, info.GetDomain())
				}
			}
		}
		if st.Code() != tc.code || reason != tc.reason {
			t.Errorf("toStatus(%v) = %v %q; want %v %s", tc.err, st.Code(), reason, tc.code, tc.reason)
		}
	}
}

func TestToStatusNeverLeaksInternalErrors(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	secret := errors.New(`ERROR: relation "jobs" does not exist (SQLSTATE 42P01) at SELECT * FROM jobs`)
	st := status.Convert(toStatus(context.Background(), log, secret))
	if st.Code() != codes.Internal || strings.Contains(st.Message(), "SELECT") || strings.Contains(st.Message(), "jobs") {
		t.Fatalf("internal error answered as %v %q", st.Code(), st.Message())
	}
	if !strings.Contains(logs.String(), "SQLSTATE") {
		t.Fatalf("the internal error was not logged: %s", logs.String())
	}
}

func TestToStatusHandsContextErrorsToGRPC(t *testing.T) {
	log := slog.New(slog.DiscardHandler)
	if c := status.Code(toStatus(context.Background(), log, fmt.Errorf("x: %w", context.Canceled))); c != codes.Canceled {
		t.Errorf("canceled → %v", c)
	}
	if c := status.Code(toStatus(context.Background(), log, context.DeadlineExceeded)); c != codes.DeadlineExceeded {
		t.Errorf("deadline → %v", c)
	}
}

func TestInvalidErrorBecomesABadRequestFieldViolation(t *testing.T) {
	st := status.Convert(toStatus(context.Background(), slog.New(slog.DiscardHandler), store.Invalid("requests[2].job.kind", "is required")))
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			v := br.GetFieldViolations()
			if len(v) == 1 && v[0].GetField() == "requests[2].job.kind" && v[0].GetDescription() == "is required" {
				return
			}
		}
	}
	t.Fatalf("no matching field violation in %v", st.Details())
}

func TestFilterErrorBecomesAFieldViolationOnFilter(t *testing.T) {
	_, perr := store.ParseJobFilter(`state = SLEEPING`)
	st := status.Convert(toStatus(context.Background(), slog.New(slog.DiscardHandler), fmt.Errorf("list: %w", perr)))
	if st.Code() != codes.InvalidArgument {
		t.Fatalf("a bad filter answered %v", st.Code())
	}
	var fv []*errdetails.BadRequest_FieldViolation
	var reason string
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.BadRequest:
			fv = append(fv, d.GetFieldViolations()...)
		case *errdetails.ErrorInfo:
			reason = d.GetReason()
		}
	}
	if reason != ReasonInvalidFilter {
		t.Errorf("reason %q, want %s", reason, ReasonInvalidFilter)
	}
	if len(fv) != 1 || fv[0].GetField() != "filter" || !strings.HasPrefix(fv[0].GetDescription(), "state: ") || !strings.Contains(fv[0].GetDescription(), "SLEEPING") {
		t.Errorf("field violations %v, want one on filter naming state and the value", fv)
	}
	if !strings.Contains(st.Message(), "SLEEPING") {
		t.Errorf("message %q does not say what is wrong", st.Message())
	}
}
