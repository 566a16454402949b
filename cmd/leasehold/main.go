// Command leasehold is the Leasehold binary: the coordinator (serve,
// migrate) and the operator and worker commands (job, dlq, queue, breaker,
// worker).
//
// Exit codes: 0 success, 1 the operation failed (the server said no, or
// could not be reached), 2 usage error (bad flags or arguments).
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes shared by every subcommand.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// cli carries the process's streams and environment so that tests can run
// subcommands in-process.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	os.Exit(c.run(ctx, os.Args[1:]))
}

const usage = `leasehold: durable jobs over gRPC

Usage:
  leasehold serve    [flags]   run the coordinator (SQLite ./leasehold.db by default)
  leasehold migrate  [flags]   apply database migrations and exit
  leasehold job      ...       create, get, list, cancel, events, watch jobs
  leasehold dlq      ...       list, show, replay, abandon dead jobs
  leasehold queue    ...       list, get, set-policy, pause, resume queues
  leasehold breaker  ...       list, reset circuit breakers
  leasehold worker   ...       list workers; exec a program as a worker
  leasehold bench    ...       drain, combined, latency benchmarks; compare with River
  leasehold version            print the version

Run "leasehold COMMAND -h" for a command's flags.
`

func (c *cli) run(ctx context.Context, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(c.stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case "serve":
		return c.runServe(ctx, args[1:])
	case "migrate":
		return c.runMigrate(ctx, args[1:])
	case "job":
		return c.runJob(ctx, args[1:])
	case "dlq":
		return c.runDLQ(ctx, args[1:])
	case "queue":
		return c.runQueue(ctx, args[1:])
	case "breaker":
		return c.runBreaker(ctx, args[1:])
	case "worker":
		return c.runWorker(ctx, args[1:])
	case "bench":
		return c.runBench(ctx, args[1:])
	case "version", "--version":
		fmt.Fprintln(c.stdout, "leasehold", Version)
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(c.stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(c.stderr, "leasehold: unknown command %q\n\n%s", args[0], usage)
		return exitUsage
	}
}
