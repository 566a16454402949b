package main

// "worker exec" turns any program into a worker. The Go SDK holds the
// lease (stream, credits, heartbeats, reconnects, graceful shutdown); the
// exec_*.go files only map one job onto one run of the program:
//
//   - the payload is the child's standard input, and the job's identity and
//     metadata are environment variables (exec_env.go);
//   - the child runs in its own process group, stopped with SIGTERM, then
//     SIGKILL after --kill-grace, when the handler's context ends: cancel
//     requested, lease lost, or the shutdown grace has passed
//     (exec_process.go). Being its own group also keeps a terminal's Ctrl-C
//     away from running jobs, so a graceful shutdown lets them finish;
//   - standard output (at most execResultMaxBytes) is the job's result,
//     standard error is passed through and its tail is the error message,
//     and the exit status is the outcome: 0 succeeded, execExitNonRetryable
//     (100) failed for good, anything else (a signal included) retryable,
//     reported with the code EXIT_<n> or SIGNAL_<NAME> so queue policies can
//     reclassify by code (exec_outcome.go, exec_output.go).

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// worker exec's defaults.
const (
	// execKillGraceDefault is how long a signalled child has between SIGTERM
	// and SIGKILL.
	execKillGraceDefault = 10 * time.Second
	// execConcurrencyDefault is 1, not the SDK's 10: an arbitrary program
	// is not known to be safe to run many times at once on one host.
	execConcurrencyDefault = 1
)

func (c *cli) workerCommand() *cobra.Command {
	return c.group("worker", "List workers; exec a program as a worker; release a worker id's binding",
		c.workerListCommand(),
		c.workerExecCommand(),
		c.workerReleaseBindingCommand(),
	)
}

func (c *cli) workerReleaseBindingCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "release-binding ID",
		Short: "Free a worker id from the key that owns it (the next key granted a lease as it owns it)",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				owner, err := client.ReleaseWorkerBinding(ctx, args[0])
				if err != nil {
					return err
				}
				if owner == "" {
					return out.say(&leaseholdv1.ReleaseWorkerBindingResponse{}, "worker id %s had no owner", args[0])
				}
				return out.say(&leaseholdv1.ReleaseWorkerBindingResponse{PreviousOwnerId: owner}, "worker id %s released from %s", args[0], owner)
			})
		},
	}
}

func (c *cli) workerListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List workers connected to the coordinator",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				workers, err := client.ListWorkers(ctx)
				if err != nil {
					return err
				}
				return out.list(page{resp: &leaseholdv1.ListWorkersResponse{Workers: workers}, header: workerHeader, rows: rows(workers, workerRow)})
			})
		},
	}
}

// execFlags are worker exec's own flags.
type execFlags struct {
	queues        commaList
	concurrency   int
	leaseDuration time.Duration
	workerID      string
	killGrace     time.Duration
	shutdownGrace time.Duration
	labels        []string
	logLevel      string
}

func (c *cli) workerExecCommand() *cobra.Command {
	var f execFlags
	cmd := &cobra.Command{
		Use:   "exec --queue Q [--queue Q2] [--concurrency N] [--lease-duration D] [--worker-id ID] [--kill-grace D] -- CMD [ARGS...]",
		Short: "Run a program once per job",
		Long: "Run CMD once per job: payload on stdin, metadata in LEASEHOLD_* env vars, stdout is the result.\n" +
			"Exit 0 succeeds the job, 100 fails it for good, anything else (or a signal) is retried.\n" +
			"On cancel or lease loss the child's process group gets SIGTERM, then SIGKILL after --kill-grace.\n" +
			"SIGTERM or SIGINT stops taking jobs and lets running ones finish within --shutdown-grace.",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("missing the command to run: worker exec --queue Q -- CMD [ARGS...]")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.runWorkerExec(cmd.Context(), &f, args)
		},
	}
	fs := cmd.Flags()
	// The first argument that is not a flag starts the command line to
	// run, whose own flags must not be taken for ours.
	fs.SetInterspersed(false)
	fs.Var(&f.queues, "queue", "`queue` to take jobs from; repeatable or comma-separated (required)")
	fs.IntVar(&f.concurrency, "concurrency", execConcurrencyDefault, "most copies of CMD running at once")
	fs.DurationVar(&f.leaseDuration, "lease-duration", 0, "lease asked for each job, renewed while CMD runs; 0 = the queue's (30s by default)")
	fs.StringVar(&f.workerID, "worker-id", "", "this worker's identity (default hostname-pid)")
	fs.DurationVar(&f.killGrace, "kill-grace", execKillGraceDefault, "time between SIGTERM and SIGKILL when a job is stopped")
	fs.DurationVar(&f.shutdownGrace, "shutdown-grace", worker.ShutdownGraceDefault, "on SIGTERM/SIGINT, how long running jobs may finish before they are stopped and released")
	fs.StringArrayVar(&f.labels, "label", nil, "`key=value` shown in \"worker list\"; repeatable")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level on stderr: debug, info, warn, error")
	_ = cmd.RegisterFlagCompletionFunc("log-level", cobra.FixedCompletions(logLevels, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// logLevels are the values of every --log-level flag.
var logLevels = []string{"debug", "info", "warn", "error"}

// runWorkerExec runs argv once per job until ctx (SIGTERM/SIGINT in main)
// is done and the running jobs have finished or been released.
func (c *cli) runWorkerExec(ctx context.Context, f *execFlags, argv []string) error {
	if len(f.queues) == 0 {
		return usagef("--queue is required")
	}
	if f.killGrace <= 0 {
		return usagef("--kill-grace must be positive")
	}
	labels, err := parseKeyValues("label", f.labels)
	if err != nil {
		return usagef("%v", err)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return usagef("--log-level %q: want debug, info, warn or error", f.logLevel)
	}
	// Fail now rather than once per job when the program cannot be found.
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return fmt.Errorf("cannot run %q: %w", argv[0], err)
	}

	// Children's stderr, the SDK's log and our own messages share the
	// stream; lockedWriter keeps each write whole.
	stderr := &lockedWriter{w: c.stderr}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	cfg := worker.Config{
		WorkerID:      f.workerID,
		Queues:        f.queues,
		Capacity:      f.concurrency,
		LeaseDuration: f.leaseDuration,
		ShutdownGrace: f.shutdownGrace,
		Labels:        labels,
		Logger:        logger,
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usagef("%v", err)
	}
	// Telemetry before the worker: New takes the global TracerProvider
	// that Setup installs when the environment asks for export.
	tel, flushTelemetry, err := c.startTelemetry(ctx, logger, serviceNameWorker, false)
	if err != nil {
		return err
	}
	defer flushTelemetry()
	cfg.TracerProvider = tel.TracerProvider
	conn, err := c.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	w, err := worker.New(conn, cfg)
	if err != nil {
		return usagef("%v", err)
	}
	r := &execRunner{
		path:      path,
		argv:      slices.Clone(argv),
		killGrace: f.killGrace,
		stderr:    stderr,
		baseEnv:   os.Environ(),
		logger:    logger,
	}
	w.HandleAny(r.handle)
	logger.InfoContext(ctx, "worker exec started", slog.String("command", strings.Join(argv, " ")),
		slog.Any("queues", []string(f.queues)), slog.Int("concurrency", f.concurrency), slog.String("addr", c.global.addr))
	if err := w.Run(ctx); err != nil {
		return err
	}
	logger.InfoContext(ctx, "worker exec stopped")
	return nil
}
