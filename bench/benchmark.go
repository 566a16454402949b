// Package bench is `leasehold bench`: Leasehold measured the way a user
// runs it, beside River (bench/river) with the same modes, flags and
// figures.
//
// A run starts the coordinator (`leasehold serve`) as a child process on a
// free loopback port, on a fresh PostgreSQL schema (dropped afterwards) or
// a fresh SQLite file, and --worker-procs worker processes (this binary's
// hidden `bench worker` mode), each one Go SDK worker with a no-op handler.
// The modes, and every figure's definition, are in package measure; how
// Leasehold's instants are taken:
//
//   - created: the job row's created_at, read from the database after the
//     run;
//   - started: the worker process's clock when the handler starts; each
//     worker sends its instants to the bench on stdout when it exits;
//   - durably done: the job row's finished_at. PostgreSQL stamps it with
//     the completing transaction's start, so it precedes the COMMIT by the
//     rest of that transaction; the "ack" series (the worker's clock when
//     the coordinator acknowledged the Complete, which it does only after
//     the commit) bounds it from above.
//
// Two modes are Leasehold's own, outside measure and compare: idle (what
// idle worker streams cost the coordinator, idle.go) and recovery (how
// soon a killed worker's jobs start elsewhere, recovery.go).
//
// Compare (`leasehold bench compare`) alternates Leasehold and River run by
// run and prints per mode and metric the median of each and their ratio.
//
// Main does not depend on the CLI framework, so the command can be wired
// into any.
package bench

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/leasehold/leasehold/bench/measure"
)

// Exit codes of Main.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// Engines a run can put the coordinator on.
const (
	enginePostgres = "postgres"
	engineSQLite   = "sqlite"
)

// Defaults of the Leasehold-specific flags: two worker processes of 50
// handlers each match River's MaxWorkers of 100 in one process.
const (
	workerProcsDefault = 2
	capacityDefault    = 50
	workerProcsMax     = 64
)

const usage = `leasehold bench: Leasehold side by side with River

Usage:
  leasehold bench drain    [flags]   create --jobs, then time the workers draining them
  leasehold bench combined [flags]   workers run while a producer creates jobs for --duration
  leasehold bench latency  [flags]   single creates at --rate on an idle system: latency percentiles
  leasehold bench compare  [flags]   alternate Leasehold and River runs, print medians and ratios

Leasehold only (River has no equivalent; compare does not run them):
  leasehold bench idle     [flags]   --streams idle Connect streams on an empty queue: the
                                     coordinator's commits/s, CPU and memory per stream
  leasehold bench recovery [flags]   a worker holding --jobs is killed with SIGKILL: how long
                                     until an idle worker starts each of them

Each run prints human-readable lines and one "RESULT key=value ..." line.
Run "leasehold bench MODE -h" for the flags.
`

// Main runs `leasehold bench` with args (the words after "bench") and
// returns the exit code: 0 success, 1 the run failed, 2 usage error.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	switch args[0] {
	case measure.ModeDrain, measure.ModeCombined, measure.ModeLatency, modeIdle, modeRecovery:
		return mainRun(ctx, args[0], args[1:], stdout, stderr)
	case "compare":
		return mainCompare(ctx, args[1:], stdout, stderr)
	case workerMode:
		return mainWorker(ctx, args[1:], os.Stdin, stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "leasehold bench: unknown mode %q\n\n%s", args[0], usage)
		return exitUsage
	}
}

// runFlags are a Leasehold run's flags.
type runFlags struct {
	opts        measure.Options
	engine      string
	workerProcs int
	capacity    int
	verbose     bool
	// dependency, when set, is every job's dependency: the run then pays
	// for its (closed) circuit breaker on every report batch.
	dependency string
	// idle and recovery are the flags of those modes only.
	idle     idleFlags
	recovery recoveryFlags
}

func parseRunFlags(mode string, args []string, stderr io.Writer) (runFlags, error) {
	if mode == modeIdle || mode == modeRecovery {
		return parseOwnFlags(mode, args, stderr)
	}
	var f runFlags
	fs := flag.NewFlagSet("leasehold bench "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.opts.Register(fs, os.Getenv)
	fs.StringVar(&f.engine, "engine", enginePostgres, "coordinator database: postgres (a fresh schema on --database-url) or sqlite (a fresh temporary file)")
	fs.IntVar(&f.workerProcs, "worker-procs", workerProcsDefault, "worker processes")
	fs.IntVar(&f.capacity, "capacity", capacityDefault, "handlers per worker process (worker.Config.Capacity)")
	fs.BoolVar(&f.verbose, "v", false, "print the coordinator's and workers' logs after the run")
	fs.StringVar(&f.dependency, "dependency", "", "every job's dependency (its circuit breaker stays closed; measures what a breaker costs)")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	f.opts.Mode = mode
	f.opts = f.opts.WithDefaults()
	var errs []error
	if err := f.opts.Validate(); err != nil {
		errs = append(errs, err)
	}
	if f.engine != enginePostgres && f.engine != engineSQLite {
		errs = append(errs, fmt.Errorf("--engine %q: use %s or %s", f.engine, enginePostgres, engineSQLite))
	}
	if f.workerProcs < 1 || f.workerProcs > workerProcsMax {
		errs = append(errs, fmt.Errorf("--worker-procs %d must be in [1, %d]", f.workerProcs, workerProcsMax))
	}
	if f.capacity < 1 || f.capacity > 10000 {
		errs = append(errs, fmt.Errorf("--capacity %d must be in [1, 10000]", f.capacity))
	}
	return f, errors.Join(errs...)
}

func mainRun(ctx context.Context, mode string, args []string, stdout, stderr io.Writer) int {
	f, err := parseRunFlags(mode, args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasehold bench %s: %v\n", mode, err)
		return exitUsage
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "leasehold bench %s: cannot find this binary to start the coordinator and workers: %v\n", mode, err)
		return exitFail
	}
	ctx, cancel := context.WithTimeoutCause(ctx, f.opts.Timeout,
		fmt.Errorf("the run took longer than --timeout %s", f.opts.Timeout))
	defer cancel()
	r := &runner{flags: f, bin: bin, stdout: stdout, stderr: stderr}
	if err := r.run(ctx); err != nil {
		fmt.Fprintf(stderr, "leasehold bench %s: %v\n", mode, err)
		return exitFail
	}
	return exitOK
}
