package main

import (
	"context"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func (c *cli) breakerCommand() *cobra.Command {
	return c.group("breaker", "List, reset circuit breakers",
		c.breakerListCommand(),
		c.breakerResetCommand(),
	)
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

func (c *cli) breakerListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List circuit breakers per dependency",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				breakers, err := client.ListBreakers(ctx)
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.list(page{
					resp:   &leaseholdv1.ListBreakersResponse{Breakers: breakers},
					header: breakerHeader, rows: rows(breakers, breakerRow),
					empty: "no circuit breakers",
				})
			})
		},
	}
}

func (c *cli) breakerResetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "reset DEP",
		Short: "Close a dependency's breaker by hand",
		Args:  positional("DEP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				b, err := client.ResetBreaker(ctx, args[0])
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.say(&leaseholdv1.ResetBreakerResponse{Breaker: b}, "breaker %s is %s", args[0], breakerRow(b)[1])
			})
		},
	}
}
