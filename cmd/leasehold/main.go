// Command leasehold is the Leasehold binary: the coordinator (serve,
// migrate) and the operator and worker commands (job, dlq, queue, breaker,
// worker).
//
// Every command is a cobra command built in command.go. The global flags
// (--addr, --timeout, --output, each with a LEASEHOLD_* default) may come
// before or after the command; "leasehold completion bash|zsh|fish" prints
// a completion script.
//
// Exit codes: 0 success, 1 the operation failed (the server said no, or
// could not be reached), 2 usage error (bad flags or arguments).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	// The image is built FROM scratch, with no zoneinfo: schedules' time
	// zones come from the tables embedded here.
	_ "time/tzdata"

	"github.com/spf13/cobra"
)

// Exit codes shared by every command.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// cli carries the process's streams and environment so that tests can run
// commands in-process, and the global flags of one run.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// kubeServiceAccountDir replaces kubesecret.ServiceAccountDir when set
	// (tests).
	kubeServiceAccountDir string

	global globalFlags // set by the root command's flags
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	code := c.run(ctx, os.Args[1:])
	stop() // os.Exit skips deferred calls
	os.Exit(code)
}

// run runs one command line and returns the process's exit code.
func (c *cli) run(ctx context.Context, args []string) int {
	root := c.rootCommand() //nolint:contextcheck // cobra hands ctx to every command as cmd.Context() (ExecuteContextC below)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	return c.exitCode(cmd, err)
}

// usageError is a mistake on the command line: exit 2, with the command's
// usage.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// exitStatus ends a command with that exit code and prints nothing more:
// the command has reported the failure itself (serve in its log; a
// pass-through command, such as a benchmark runner, on its own stderr).
type exitStatus int

func (e exitStatus) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// exitCode prints err, if any, for cmd and maps it to an exit code.
func (c *cli) exitCode(cmd *cobra.Command, err error) int {
	var (
		status exitStatus
		usage  *usageError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &status):
		return int(status)
	case errors.As(err, &usage):
		fmt.Fprintf(c.stderr, "%s: %s\n", cmd.CommandPath(), usage.msg)
		if cmd.HasAvailableSubCommands() {
			fmt.Fprintf(c.stderr, "\n%s", cmd.UsageString())
		} else {
			fmt.Fprintf(c.stderr, "Usage: %s (-h for help)\n", cmd.UseLine())
		}
		return exitUsage
	default:
		fmt.Fprintf(c.stderr, "%s: %s\n", cmd.CommandPath(), describeError(err, c.global.addr))
		return exitFail
	}
}
