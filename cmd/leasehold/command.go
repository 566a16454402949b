package main

// The command tree. Every command is a *cobra.Command built by a method of
// cli, so it writes to the cli's streams and reads its environment; errors
// go back to run, which prints them and picks the exit code (main.go).
//
// A command that parses its own arguments (say, a benchmark runner with
// its own flag set) is one more entry in rootCommand:
//
//	&cobra.Command{
//		Use: "bench [flags]", Short: "…", DisableFlagParsing: true,
//		RunE: func(cmd *cobra.Command, args []string) error {
//			return exitStatus(benchmark.Main(cmd.Context(), args, c.stdout, c.stderr))
//		},
//	}

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// rootCommand builds the whole command tree for one run.
func (c *cli) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "leasehold",
		Short: "Durable jobs over gRPC",
		Long: "leasehold: durable jobs over gRPC.\n\n" +
			"Run the coordinator with \"leasehold serve\", then drive it with the other commands.",
		Version: Version,
		// Only subcommands do something; run alone or with an unknown
		// name it is a usage error.
		Args:                       cobra.ArbitraryArgs,
		RunE:                       noSubcommand,
		SuggestionsMinimumDistance: suggestionDistance,
		SilenceErrors:              true, // run prints errors, with the exit code it chooses
		SilenceUsage:               true,
	}
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	root.SetVersionTemplate("leasehold {{.Version}}\n")
	root.SetUsageTemplate(usageTemplate)
	root.SetFlagErrorFunc(flagError)
	c.global.register(root, c.getenv)
	root.AddCommand(
		c.serveCommand(),
		c.migrateCommand(),
		c.jobCommand(),
		c.dlqCommand(),
		c.queueCommand(),
		c.breakerCommand(),
		c.scheduleCommand(),
		c.opCommand(),
		c.workerCommand(),
		c.keyCommand(),
		c.auditCommand(),
		c.outboxCommand(),
		c.relayCommand(),
		c.benchCommand(),
		versionCommand(),
	)
	return root
}

// group is a command that only holds subcommands, all of which talk to a
// coordinator: the global flags are checked here once for all of them.
func (c *cli) group(use, short string, subs ...*cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.ArbitraryArgs,
		RunE:  noSubcommand,
		// Cobra's own default, which it applies only to the root command.
		SuggestionsMinimumDistance: suggestionDistance,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return c.global.check(cmd)
		},
	}
	cmd.AddCommand(subs...)
	return cmd
}

// suggestionDistance is how far (in edits) an unknown command name may be
// from a real one to be suggested.
const suggestionDistance = 2

// noSubcommand is the RunE of a command that only holds subcommands: cobra
// runs it when none of them was named.
func noSubcommand(cmd *cobra.Command, args []string) error {
	what := "subcommand"
	if !cmd.HasParent() {
		what = "command"
	}
	if len(args) == 0 {
		return usagef("missing %s", what)
	}
	msg := fmt.Sprintf("unknown %s %q", what, args[0])
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", s[0])
	}
	return usagef("%s", msg)
}

// positional checks a command's positional arguments against their names:
// exactly these, none empty.
func positional(names ...string) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) < len(names) {
			return usagef("missing %s", strings.Join(names[len(args):], " "))
		}
		if len(args) > len(names) {
			return usagef("unexpected argument %q", args[len(names)])
		}
		for i, a := range args {
			if a == "" {
				return usagef("%s must not be empty", names[i])
			}
		}
		return nil
	}
}

// flagError makes a flag parsing error a usage error, worded as Go's flag
// package words it (as this CLI did before it moved to cobra).
func flagError(_ *cobra.Command, err error) error {
	var (
		unknown *pflag.NotExistError
		invalid *pflag.InvalidValueError
	)
	switch {
	case errors.As(err, &unknown):
		dash := "--"
		if unknown.GetSpecifiedShortnames() != "" {
			dash = "-"
		}
		return usagef("flag provided but not defined: %s%s", dash, unknown.GetSpecifiedName())
	case errors.As(err, &invalid):
		return usagef("invalid value %q for flag --%s: %v", invalid.GetValue(), invalid.GetFlag().Name, errors.Unwrap(invalid))
	}
	return usagef("%v", err)
}

// usageTemplate is cobra's default, except that subcommands are listed by
// their full path ("leasehold job create"), a command that only holds
// subcommands shows "COMMAND" rather than a usage line of its own, and the
// commands of withoutGlobalFlags do not list the global flags.
const usageTemplate = `Usage:{{if .HasAvailableSubCommands}}
  {{.CommandPath}} COMMAND{{else}}
  {{.UseLine}}{{end}}{{if .HasExample}}

Examples:
{{.Example}}{{end}}{{if .HasAvailableSubCommands}}

Commands:{{range .Commands}}{{if (or .IsAvailableCommand (eq .Name "help"))}}
  {{$.CommandPath}} {{rpad .Name .NamePadding}} {{.Short}}{{end}}{{end}}{{end}}{{if .HasAvailableLocalFlags}}

Flags:
{{.LocalFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if and .HasAvailableInheritedFlags (ne (index .Annotations "` + annotationGlobalFlags + `") "no")}}

Global Flags:
{{.InheritedFlags.FlagUsages | trimTrailingWhitespaces}}{{end}}{{if .HasAvailableSubCommands}}

Run "{{.CommandPath}} COMMAND -h" for a command's flags.{{end}}
`

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  positional(),
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintln(cmd.OutOrStdout(), "leasehold", Version)
		},
	}
}
