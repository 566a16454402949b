package bench

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/leasehold/leasehold/bench/measure"
)

// Modes only Leasehold has: River has no streams to hold idle and no
// worker process to kill, so compare does not run them and package measure
// does not define them.
const (
	// modeIdle opens idle Connect streams on an empty queue and measures
	// what they cost the coordinator (idle.go).
	modeIdle = "idle"
	// modeRecovery kills a worker that holds leases and times how long an
	// idle worker takes to start each job (recovery.go).
	modeRecovery = "recovery"
)

// Defaults and bounds of their flags.
const (
	idleStreamsDefault   = 2000
	idleStreamsMax       = 20000
	idleWindowDefault    = 10 * time.Second
	recoveryJobsDefault  = 20
	recoveryJobsMax      = 10000
	recoveryLeaseDefault = 5 * time.Second
	// The lease bounds of Hello.lease_duration.
	leaseMin = time.Second
	leaseMax = time.Hour
)

// idleSettleDefault is the quiet period between the last stream
// connecting and the window. PostgreSQL holds a backend's unflushed
// counters for up to 10 s (PGSTAT_IDLE_INTERVAL) once it goes idle, so a
// settle past that keeps the connect phase's commits out of the window.
const idleSettleDefault = 11 * time.Second

// idleFlags are idle's own flags.
type idleFlags struct {
	streams        int
	window, settle time.Duration
}

// recoveryFlags are recovery's own flags.
type recoveryFlags struct {
	jobs  int
	lease time.Duration
}

// parseOwnFlags parses the flags of idle or recovery: the coordinator's
// (--engine, --database-url, --timeout, -v) and the mode's own.
func parseOwnFlags(mode string, args []string, stderr io.Writer) (runFlags, error) {
	var f runFlags
	fs := flag.NewFlagSet("leasehold bench "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	url := os.Getenv(measure.EnvDatabaseURL)
	if url == "" {
		url = measure.DatabaseURLDefault
	}
	// idle counts commits per database, so it makes a database of its own.
	fresh := "schema"
	if mode == modeIdle {
		fresh = "database (the role needs CREATEDB)"
	}
	fs.StringVar(&f.engine, "engine", enginePostgres, "coordinator database: postgres (a fresh "+fresh+" on --database-url) or sqlite (a fresh temporary file)")
	fs.StringVar(&f.opts.DatabaseURL, "database-url", url, "PostgreSQL server for the run's fresh "+fresh+" (env "+measure.EnvDatabaseURL+")")
	fs.DurationVar(&f.opts.Timeout, "timeout", measure.TimeoutDefault, "bound on the whole run")
	fs.BoolVar(&f.verbose, "v", false, "print the coordinator's and workers' logs after the run")
	switch mode {
	case modeIdle:
		fs.IntVar(&f.idle.streams, "streams", idleStreamsDefault, "idle Connect streams, each on its own connection")
		fs.DurationVar(&f.idle.window, "window", idleWindowDefault, "how long the idle cost is measured")
		fs.DurationVar(&f.idle.settle, "settle", idleSettleDefault, "quiet period between the last stream connecting and the window")
	case modeRecovery:
		fs.IntVar(&f.recovery.jobs, "jobs", recoveryJobsDefault, "jobs the killed worker holds")
		fs.DurationVar(&f.recovery.lease, "lease", recoveryLeaseDefault, "lease duration both workers ask for")
	}
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 0 {
		return f, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	f.opts.Mode = mode
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if f.engine != enginePostgres && f.engine != engineSQLite {
		bad("--engine %q: use %s or %s", f.engine, enginePostgres, engineSQLite)
	}
	if f.opts.Timeout < time.Second {
		bad("--timeout %s must be at least 1s", f.opts.Timeout)
	}
	switch mode {
	case modeIdle:
		if f.idle.streams < 1 || f.idle.streams > idleStreamsMax {
			bad("--streams %d must be in [1, %d]", f.idle.streams, idleStreamsMax)
		}
		if f.idle.window < time.Second || f.idle.window > time.Hour {
			bad("--window %s must be in [1s, 1h]", f.idle.window)
		}
		if f.idle.settle < 0 || f.idle.settle > time.Hour {
			bad("--settle %s must be in [0, 1h]", f.idle.settle)
		}
	case modeRecovery:
		if f.recovery.jobs < 1 || f.recovery.jobs > recoveryJobsMax {
			bad("--jobs %d must be in [1, %d]", f.recovery.jobs, recoveryJobsMax)
		}
		if f.recovery.lease < leaseMin || f.recovery.lease > leaseMax {
			bad("--lease %s must be in [%s, %s]", f.recovery.lease, leaseMin, leaseMax)
		}
	}
	return f, errors.Join(errs...)
}
