package main

import (
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/bench"
)

// benchCommand is `leasehold bench`: the side-by-side benchmark lives in
// package bench with its own flags, independent of the command framework,
// so this command passes its arguments through. It stays in this binary
// because a run re-executes the binary as its coordinator (`leasehold
// serve`) and its worker processes (the hidden `bench worker` mode): one
// build measures itself.
func (c *cli) benchCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "bench drain|combined|latency|idle|recovery|compare [flags]",
		Short:              "Benchmark runs (drain, combined, latency; idle streams, recovery after a kill); compare with River",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitStatus(bench.Main(cmd.Context(), args, c.stdout, c.stderr))
		},
	}
}
