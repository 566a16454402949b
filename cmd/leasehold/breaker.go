package main

import (
	"context"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func (c *cli) runBreaker(ctx context.Context, args []string) int {
	return c.dispatch(ctx, "breaker", args, []subcommand{
		{"list", "", "List circuit breakers per dependency.", c.breakerList},
		{"reset", "DEP", "Close a dependency's breaker by hand.", c.breakerReset},
	})
}

// errBreakersUnavailable explains an UNIMPLEMENTED answer: the coordinator
// predates circuit breakers. The status is kept so the exit code and the
// printed gRPC code stay those of the server's answer.
func errBreakersUnavailable(err error) error {
	if status.Code(err) != codes.Unimplemented {
		return err
	}
	return &hintedError{err: err, hint: "circuit breakers are not available in this version of the coordinator"}
}

func (c *cli) breakerList(ctx context.Context, cmd *command, args []string) error {
	_, err := cmd.parseArgs(args)
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).ListBreakers(callCtx, &leaseholdv1.ListBreakersRequest{})
	if err != nil {
		return errBreakersUnavailable(err)
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	if len(resp.GetBreakers()) == 0 {
		fmt.Fprintln(out.w, "no circuit breakers")
		return nil
	}
	rows := make([][]string, len(resp.GetBreakers()))
	for i, b := range resp.GetBreakers() {
		rows[i] = breakerRow(b)
	}
	return out.table(breakerHeader, rows)
}

func (c *cli) breakerReset(ctx context.Context, cmd *command, args []string) error {
	pos, err := cmd.parseArgs(args, "DEP")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).ResetBreaker(callCtx, &leaseholdv1.ResetBreakerRequest{Dependency: pos[0]})
	if err != nil {
		return errBreakersUnavailable(err)
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	fmt.Fprintf(out.w, "breaker %s is %s\n", pos[0], breakerRow(resp.GetBreaker())[1])
	return nil
}
