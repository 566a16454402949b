package main

import (
	"context"

	"github.com/leasehold/leasehold/internal/benchmark"
)

// runBench is `leasehold bench`: the side-by-side benchmark lives in
// internal/benchmark, independent of the command framework.
func (c *cli) runBench(ctx context.Context, args []string) int {
	return benchmark.Main(ctx, args, c.stdout, c.stderr)
}
