package main

// The operator commands share one shape: "leasehold GROUP SUB [flags] [args]".
// Every subcommand gets the same connection flags (--addr, --timeout,
// --output, each with a LEASEHOLD_* override), parses flags and positional
// arguments in any order, and ends through finish, which maps the outcome
// to the exit codes defined in main.go.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// Connection defaults and the environment variables that override them. A
// flag given on the command line wins over the environment.
const (
	addrDefault    = "127.0.0.1:7400"
	timeoutDefault = 30 * time.Second
	outputTable    = "table"
	outputJSON     = "json"

	envAddr    = "LEASEHOLD_ADDR"
	envTimeout = "LEASEHOLD_TIMEOUT"
	envOutput  = "LEASEHOLD_OUTPUT"
)

// usageError is a mistake on the command line: exit 2, with the command's
// usage hint.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// errHelpShown means -h was asked for and the usage has been printed: exit 0.
var errHelpShown = errors.New("help shown")

// subcommand is one "GROUP SUB" entry: its synopsis (the arguments after
// the name), a one-line summary, and the function that runs it.
type subcommand struct {
	name     string
	synopsis string
	summary  string
	run      func(ctx context.Context, cmd *command, args []string) error
}

// command is one invocation of a subcommand: its flag set (connection flags
// already registered) and where its output goes.
type command struct {
	c        *cli
	name     string // "job create"
	synopsis string
	summary  string
	fs       *flag.FlagSet

	addr    string
	timeout time.Duration
	output  string

	// commandTail makes the first positional argument end flag parsing:
	// it and everything after it are a command line to run (worker exec),
	// whose own flags must not be taken for ours.
	commandTail bool

	// envErr is a bad LEASEHOLD_* value, reported as a usage error once the
	// flags are parsed (a flag may still override it).
	envErr error
}

// dispatch runs the subcommand of group named by args[0].
func (c *cli) dispatch(ctx context.Context, group string, args []string, subs []subcommand) int {
	groupUsage := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		for _, s := range subs {
			fmt.Fprintf(w, "  leasehold %s %s %s\n", group, s.name, s.synopsis)
		}
		fmt.Fprintf(w, "\nRun \"leasehold %s SUBCOMMAND -h\" for its flags.\n", group)
	}
	if len(args) == 0 {
		fmt.Fprintf(c.stderr, "leasehold %s: missing subcommand\n\n", group)
		groupUsage(c.stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		groupUsage(c.stdout)
		return exitOK
	}
	for _, s := range subs {
		if s.name == args[0] {
			cmd := c.newCommand(group+" "+s.name, s.synopsis, s.summary)
			return cmd.finish(s.run(ctx, cmd, args[1:]))
		}
	}
	fmt.Fprintf(c.stderr, "leasehold %s: unknown subcommand %q\n\n", group, args[0])
	groupUsage(c.stderr)
	return exitUsage
}

// newCommand prepares a flag set with the shared connection flags, their
// defaults taken from the environment.
func (c *cli) newCommand(name, synopsis, summary string) *command {
	cmd := &command{c: c, name: name, synopsis: synopsis, summary: summary}
	fs := flag.NewFlagSet("leasehold "+name, flag.ContinueOnError)
	// Parse errors are printed by parse with the right stream and exit code,
	// so the flag package itself stays silent.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	cmd.fs = fs

	addr := cmp.Or(c.getenv(envAddr), addrDefault)
	output := cmp.Or(strings.ToLower(c.getenv(envOutput)), outputTable)
	timeout := timeoutDefault
	if v := c.getenv(envTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			cmd.envErr = fmt.Errorf("%s=%q is not a duration (e.g. 10s)", envTimeout, v)
		} else {
			timeout = d
		}
	}
	fs.StringVar(&cmd.addr, "addr", addr, "coordinator address host:port (env "+envAddr+")")
	fs.DurationVar(&cmd.timeout, "timeout", timeout, "deadline for each call; 0 = none (env "+envTimeout+")")
	fs.StringVar(&cmd.output, "output", output, "output format: table or json (env "+envOutput+")")
	return cmd
}

// parse parses flags and positional arguments, which may be mixed in any
// order ("job get ID --output json"); everything after "--" is positional.
// It returns errHelpShown after printing the usage for -h, and a
// *usageError for bad flags.
func (cmd *command) parse(args []string) ([]string, error) {
	flagArgs, pos := splitArgs(cmd.fs, args, !cmd.commandTail)
	if err := cmd.fs.Parse(flagArgs); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			cmd.printUsage(cmd.c.stdout)
			return nil, errHelpShown
		}
		return nil, &usageError{msg: err.Error()}
	}
	if cmd.envErr != nil && !cmd.isSet("timeout") {
		return nil, &usageError{msg: cmd.envErr.Error()}
	}
	switch cmd.output {
	case outputTable, outputJSON:
	default:
		return nil, &usageError{msg: fmt.Sprintf("--output must be table or json, not %q", cmd.output)}
	}
	if cmd.timeout < 0 {
		return nil, &usageError{msg: "--timeout must not be negative"}
	}
	return pos, nil
}

// splitArgs separates flag tokens (with their values) from positional
// arguments so that the flag package, which stops at the first positional,
// sees every flag. A token takes the next one as its value exactly when the
// flag package would: a known, non-boolean flag written without "=".
// Unknown flags are passed on for the flag package to reject. Without
// interspersed, the first positional argument ends the flags.
func splitArgs(fs *flag.FlagSet, args []string, interspersed bool) (flagArgs, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flagArgs, append(pos, args[i+1:]...)
		}
		if len(a) < 2 || a[0] != '-' {
			if !interspersed {
				return flagArgs, append(pos, args[i:]...)
			}
			pos = append(pos, a)
			continue
		}
		flagArgs = append(flagArgs, a)
		name := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flagArgs = append(flagArgs, args[i+1])
			i++
		}
	}
	return flagArgs, pos
}

// isSet reports whether the flag was given on the command line.
func (cmd *command) isSet(name string) bool {
	set := false
	cmd.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// printUsage writes the synopsis and the flags, command-specific first.
func (cmd *command) printUsage(w io.Writer) {
	fmt.Fprintf(w, "Usage: leasehold %s %s\n\n%s\n\nFlags:\n", cmd.name, cmd.synopsis, cmd.summary)
	common := map[string]bool{"addr": true, "timeout": true, "output": true}
	var own, shared []*flag.Flag
	cmd.fs.VisitAll(func(f *flag.Flag) {
		if common[f.Name] {
			shared = append(shared, f)
		} else {
			own = append(own, f)
		}
	})
	printFlags := func(flags []*flag.Flag) {
		for _, f := range flags {
			name, help := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if name != "" {
				line += " " + name
			}
			fmt.Fprintf(w, "%-30s %s", line, help)
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" {
				fmt.Fprintf(w, " (default %s)", f.DefValue)
			}
			fmt.Fprintln(w)
		}
	}
	printFlags(own)
	if len(own) > 0 {
		fmt.Fprintln(w)
	}
	printFlags(shared)
}

// usagef builds a usage error for a bad argument.
func (cmd *command) usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// parseArgs parses the flags and checks the positional arguments against
// want, as every subcommand does first.
func (cmd *command) parseArgs(args []string, want ...string) ([]string, error) {
	pos, err := cmd.parse(args)
	if err != nil {
		return nil, err
	}
	return pos, cmd.args(pos, want...)
}

// args checks the number of positional arguments.
func (cmd *command) args(pos []string, want ...string) error {
	if len(pos) < len(want) {
		return cmd.usagef("missing %s", strings.Join(want[len(pos):], " "))
	}
	if len(pos) > len(want) {
		return cmd.usagef("unexpected argument %q", pos[len(want)])
	}
	for i, p := range pos {
		if p == "" {
			return cmd.usagef("%s must not be empty", want[i])
		}
	}
	return nil
}

// dial opens a client connection. grpc.NewClient does not connect until
// the first call, so an unreachable coordinator surfaces as UNAVAILABLE
// from that call and is reported by finish.
func (cmd *command) dial() (*grpc.ClientConn, error) {
	conn, err := grpc.NewClient(cmd.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", cmd.addr, err)
	}
	return conn, nil
}

// connect dials the coordinator and returns a context bounded by
// --timeout for the calls to make; done releases both.
func (cmd *command) connect(ctx context.Context) (context.Context, *grpc.ClientConn, func(), error) {
	conn, err := cmd.dial()
	if err != nil {
		return nil, nil, nil, err
	}
	callCtx, cancel := cmd.callCtx(ctx)
	return callCtx, conn, func() { cancel(); conn.Close() }, nil
}

// callCtx bounds one unary call by --timeout.
func (cmd *command) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if cmd.timeout == 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, cmd.timeout)
}

// out returns the printer for --output.
func (cmd *command) out() *printer {
	return &printer{w: cmd.c.stdout, json: cmd.output == outputJSON}
}

// finish prints err, if any, and returns the exit code.
func (cmd *command) finish(err error) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelpShown) {
		return exitOK
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(cmd.c.stderr, "leasehold %s: %s\nUsage: leasehold %s %s (-h for help)\n", cmd.name, ue.msg, cmd.name, cmd.synopsis)
		return exitUsage
	}
	fmt.Fprintf(cmd.c.stderr, "leasehold %s: %s\n", cmd.name, describeError(err, cmd.addr))
	return exitFail
}

// describeError renders an error for an operator: for a gRPC status, the
// canonical code name, the message, the ErrorInfo reason and any field
// violations, plus a hint for the two failures that are about the client's
// own setup (unreachable address, deadline).
func describeError(err error, addr string) string {
	var se interface{ GRPCStatus() *status.Status }
	if !errors.As(err, &se) {
		return err.Error()
	}
	st := se.GRPCStatus()
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", codeName(st.Code()), st.Message())
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			fmt.Fprintf(&b, "\n  reason: %s", d.GetReason())
			if len(d.GetMetadata()) > 0 {
				keys := make([]string, 0, len(d.GetMetadata()))
				for k := range d.GetMetadata() {
					keys = append(keys, k)
				}
				sort.Strings(keys)
				for _, k := range keys {
					fmt.Fprintf(&b, "\n  %s: %s", k, d.GetMetadata()[k])
				}
			}
		case *errdetails.BadRequest:
			for _, v := range d.GetFieldViolations() {
				fmt.Fprintf(&b, "\n  field %s: %s", v.GetField(), v.GetDescription())
			}
		case *errdetails.RetryInfo:
			if d.GetRetryDelay() != nil {
				fmt.Fprintf(&b, "\n  retry after: %s", d.GetRetryDelay().AsDuration())
			}
		}
	}
	var he *hintedError
	if errors.As(err, &he) && !strings.Contains(st.Message(), he.hint) {
		fmt.Fprintf(&b, "\n  %s", he.hint)
	}
	switch st.Code() {
	case codes.Unavailable:
		fmt.Fprintf(&b, "\n  is the coordinator running at %s? (set --addr or %s)", addr, envAddr)
	case codes.DeadlineExceeded:
		fmt.Fprintf(&b, "\n  the call took longer than --timeout")
	}
	return b.String()
}

// hintedError adds an explanation for the operator to a server's error
// while keeping the status (and so the printed code) reachable.
type hintedError struct {
	err  error
	hint string
}

func (e *hintedError) Error() string { return e.err.Error() + " (" + e.hint + ")" }
func (e *hintedError) Unwrap() error { return e.err }

// codeName is the canonical upper-case name of a gRPC code ("NOT_FOUND"),
// the spelling in the gRPC docs and in grpcurl's output.
func codeName(c codes.Code) string {
	if name, ok := code.Code_name[int32(c)]; ok {
		return name
	}
	return "CODE_" + strconv.Itoa(int(c))
}

// stringList is a repeatable string flag; each use may also hold a
// comma-separated list when split is set.
type stringList struct {
	values []string
	split  bool
}

func (l *stringList) String() string { return strings.Join(l.values, ",") }

func (l *stringList) Set(v string) error {
	if !l.split {
		l.values = append(l.values, v)
		return nil
	}
	for _, p := range strings.Split(v, ",") {
		if p = strings.TrimSpace(p); p != "" {
			l.values = append(l.values, p)
		}
	}
	return nil
}

// parseKeyValues parses repeated "key=value" flags (--meta). The value may
// contain "="; the key may not be empty and may not repeat.
func parseKeyValues(flagName string, pairs []string) (map[string]string, error) {
	if len(pairs) == 0 {
		return nil, nil
	}
	m := make(map[string]string, len(pairs))
	for _, p := range pairs {
		k, v, ok := strings.Cut(p, "=")
		if !ok {
			return nil, fmt.Errorf("--%s %q: want key=value", flagName, p)
		}
		if k == "" {
			return nil, fmt.Errorf("--%s %q: the key is empty", flagName, p)
		}
		if _, dup := m[k]; dup {
			return nil, fmt.Errorf("--%s: key %q given twice", flagName, k)
		}
		m[k] = v
	}
	return m, nil
}
