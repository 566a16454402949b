package measure

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"
)

// The modes both systems implement.
const (
	// ModeDrain creates Jobs first, then starts the workers and times how
	// long they take to finish them all.
	ModeDrain = "drain"
	// ModeCombined runs the workers while a producer creates jobs in
	// batches for Duration (or until Jobs were created).
	ModeCombined = "combined"
	// ModeLatency creates single jobs one at a time at Rate on an idle,
	// connected system, for the latency percentiles.
	ModeLatency = "latency"
)

// Modes lists the modes in the order compare runs them.
var Modes = []string{ModeDrain, ModeCombined, ModeLatency}

// Defaults of the common flags. Zero Jobs and Batch mean the mode's own
// default.
const (
	DrainJobsDefault   = 20000
	LatencyJobsDefault = 1000
	DrainBatchDefault  = 1000
	BatchDefault       = 100
	DurationDefault    = 10 * time.Second
	RateDefault        = 100.0
	TimeoutDefault     = 10 * time.Minute
	CreateBatchMax     = 1000
	DatabaseURLDefault = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	EnvDatabaseURL     = "LEASEHOLD_BENCH_DATABASE_URL"
	QueueName          = "bench"
	JobKind            = "noop"
	jobsMax            = 10_000_000
	rateMax            = 100_000.0
	durationMax        = time.Hour
	timeoutMin         = time.Second
)

// Options are the flags every system's bench takes, with the same names
// and meaning on both sides, so compare can pass them to either.
type Options struct {
	// Mode is drain, combined or latency (the first argument).
	Mode string
	// Jobs: drain and latency create exactly this many (defaults 20,000
	// and 1,000); combined stops creating after this many (0: only
	// Duration bounds it).
	Jobs int
	// Batch is how many jobs one create call carries: default 1,000 for
	// drain, 100 for combined; latency creates one at a time.
	Batch int
	// Duration bounds combined's create phase. Default 10s.
	Duration time.Duration
	// Rate is latency's creates per second. Default 100.
	Rate float64
	// DatabaseURL is the PostgreSQL server the run makes its fresh schema
	// on. Default: env LEASEHOLD_BENCH_DATABASE_URL, else the local
	// postgres database.
	DatabaseURL string
	// Timeout bounds the whole run; past it the run fails and cleans up.
	// Default 10m.
	Timeout time.Duration
}

// Register adds the common flags to fs. getenv supplies the environment
// defaults (os.Getenv in the binaries, a map in tests).
func (o *Options) Register(fs *flag.FlagSet, getenv func(string) string) {
	url := getenv(EnvDatabaseURL)
	if url == "" {
		url = DatabaseURLDefault
	}
	fs.IntVar(&o.Jobs, "jobs", 0, fmt.Sprintf("jobs to create (0: %d for drain, %d for latency, unbounded for combined)", DrainJobsDefault, LatencyJobsDefault))
	fs.IntVar(&o.Batch, "batch", 0, fmt.Sprintf("jobs per create call (0: %d for drain, %d for combined; latency creates one at a time)", DrainBatchDefault, BatchDefault))
	fs.DurationVar(&o.Duration, "duration", DurationDefault, "how long combined creates jobs")
	fs.Float64Var(&o.Rate, "rate", RateDefault, "latency: single creates per second")
	fs.StringVar(&o.DatabaseURL, "database-url", url, "PostgreSQL server for the run's fresh schema (env "+EnvDatabaseURL+")")
	fs.DurationVar(&o.Timeout, "timeout", TimeoutDefault, "bound on the whole run")
}

// WithDefaults returns a copy with the mode's defaults filled in.
func (o Options) WithDefaults() Options {
	out := o
	switch o.Mode {
	case ModeDrain:
		if out.Jobs == 0 {
			out.Jobs = DrainJobsDefault
		}
		if out.Batch == 0 {
			out.Batch = DrainBatchDefault
		}
	case ModeCombined:
		if out.Batch == 0 {
			out.Batch = BatchDefault
		}
	case ModeLatency:
		if out.Jobs == 0 {
			out.Jobs = LatencyJobsDefault
		}
		out.Batch = 1
	}
	if out.Duration == 0 {
		out.Duration = DurationDefault
	}
	if out.Rate == 0 {
		out.Rate = RateDefault
	}
	if out.Timeout == 0 {
		out.Timeout = TimeoutDefault
	}
	return out
}

// Validate reports every problem at once (after WithDefaults).
func (o Options) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !slices.Contains(Modes, o.Mode) {
		bad("mode %q: use one of %v", o.Mode, Modes)
	}
	if o.Jobs < 0 || o.Jobs > jobsMax {
		bad("--jobs %d must be in [0, %d]", o.Jobs, jobsMax)
	}
	if o.Batch < 1 || o.Batch > CreateBatchMax {
		bad("--batch %d must be in [1, %d]", o.Batch, CreateBatchMax)
	}
	if o.Duration <= 0 || o.Duration > durationMax {
		bad("--duration %s must be in (0, %s]", o.Duration, durationMax)
	}
	if !(o.Rate > 0 && o.Rate <= rateMax) {
		bad("--rate %v must be in (0, %v]", o.Rate, rateMax)
	}
	if o.Timeout < timeoutMin {
		bad("--timeout %s must be at least %s", o.Timeout, timeoutMin)
	}
	return errors.Join(errs...)
}
