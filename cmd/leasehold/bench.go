package main

import (
	"github.com/spf13/cobra"

	"github.com/leasehold/leasehold/internal/benchmark"
)

// benchCommand is `leasehold bench`: the side-by-side benchmark lives in
// internal/benchmark with its own flags, independent of the command
// framework, so this command passes its arguments through.
func (c *cli) benchCommand() *cobra.Command {
	return &cobra.Command{
		Use:                "bench drain|combined|latency|idle|recovery|compare [flags]",
		Short:              "Benchmark runs (drain, combined, latency; idle streams, recovery after a kill); compare with River",
		DisableFlagParsing: true,
		RunE: func(cmd *cobra.Command, args []string) error {
			return exitStatus(benchmark.Main(cmd.Context(), args, c.stdout, c.stderr))
		},
	}
}
