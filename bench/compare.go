package bench

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/leasehold/leasehold/bench/measure"
)

// The systems compare runs; ratios are first / second.
const (
	systemLeasehold = "leasehold"
	systemRiver     = "river"
)

const (
	roundsDefault = 3
	// childStopDelay is how long an interrupted run gets to clean up (drop
	// its schema) after SIGTERM before it is killed.
	childStopDelay = time.Minute
)

// notCompared are RESULT fields compare takes no medians of: the run's
// set-up, and totals and spans the rates already carry. Every run's own
// lines still show them.
var notCompared = map[string]bool{
	measure.KeySystem: true, measure.KeyEngine: true, measure.KeyMode: true,
	"jobs": true, "batch": true, "rate": true,
	"worker_procs": true, "capacity": true, "max_workers": true,
	"completed": true, "commits": true, "create_s": true, "drain_s": true, "window_s": true,
}

// compareFlags are compare's flags.
type compareFlags struct {
	riverBin     string
	leaseholdBin string
	rounds       int
	modes        []string
	databaseURL  string
	passThrough  []string // common run flags given explicitly, for both systems
}

func parseCompareFlags(args []string, stderr io.Writer) (compareFlags, error) {
	var f compareFlags
	fs := flag.NewFlagSet("leasehold bench compare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var run measure.Options
	run.Register(fs, os.Getenv)
	fs.StringVar(&f.riverBin, "river-bin", "", "the River bench binary (built from bench/river); required")
	fs.StringVar(&f.leaseholdBin, "leasehold-bin", "", "the leasehold binary (default: this one)")
	fs.IntVar(&f.rounds, "rounds", roundsDefault, "rounds; each runs every mode once per system")
	modes := fs.String("modes", strings.Join(measure.Modes, " "), "modes to run, separated by spaces or commas")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if f.riverBin == "" {
		errs = append(errs, errors.New("--river-bin is required (make bench-compare builds it)"))
	}
	if f.rounds < 1 {
		errs = append(errs, fmt.Errorf("--rounds %d must be at least 1", f.rounds))
	}
	for _, m := range strings.FieldsFunc(*modes, func(r rune) bool { return r == ' ' || r == ',' }) {
		if !slices.Contains(measure.Modes, m) {
			errs = append(errs, fmt.Errorf("--modes: unknown mode %q (use %v)", m, measure.Modes))
		}
		f.modes = append(f.modes, m)
	}
	if len(f.modes) == 0 {
		errs = append(errs, errors.New("--modes names no mode"))
	}
	f.databaseURL = run.DatabaseURL
	// Pass on the common flags given explicitly; unset ones keep each
	// mode's default on both sides.
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "jobs", "batch", "duration", "rate", "timeout":
			f.passThrough = append(f.passThrough, "--"+fl.Name, fl.Value.String())
		}
	})
	return f, errors.Join(errs...)
}

func mainCompare(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	f, err := parseCompareFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "leasehold bench compare: %v\n", err)
		return exitUsage
	}
	if f.leaseholdBin == "" {
		if f.leaseholdBin, err = os.Executable(); err != nil {
			fmt.Fprintf(stderr, "leasehold bench compare: %v\n", err)
			return exitFail
		}
	}
	settings, err := serverSettings(ctx, f.databaseURL)
	if err != nil {
		fmt.Fprintf(stderr, "leasehold bench compare: %v\n", err)
		return exitFail
	}
	fmt.Fprintf(stdout, "# %s\n", settings)
	started, loadBefore := time.Now().UTC(), loadAverage()
	var results []*measure.Result
	failures := 0
	total := f.rounds * len(f.modes) * 2
	i := 0
	for round := 1; round <= f.rounds; round++ {
		for _, mode := range f.modes {
			for _, system := range []string{systemLeasehold, systemRiver} {
				i++
				if ctx.Err() != nil {
					fmt.Fprintf(stderr, "leasehold bench compare: interrupted: %v\n", context.Cause(ctx))
					return exitFail
				}
				fmt.Fprintf(stdout, "# run %d/%d: round %d, %s %s\n", i, total, round, system, mode)
				res, err := runChild(ctx, f.command(system, mode), stdout)
				if err != nil {
					failures++
					fmt.Fprintf(stdout, "# run %d/%d failed: %v\n", i, total, err)
					continue
				}
				results = append(results, res)
			}
		}
	}
	fmt.Fprintf(stdout, "\n# medians over %d rounds; ratio = leasehold / river (jobs/s: below 1 is slower; latencies and commits: above 1 is more)\n", f.rounds)
	rows := summarize(results, f.modes)
	writeSummary(stdout, rows)
	fmt.Fprintf(stdout, "\n# for bench/RESULTS.md (newest first):\n\n")
	writeResultsSection(stdout, started, f, rows)
	fmt.Fprintf(stdout, "\n%s. Load average %s before, %s after.\n", settings, loadBefore, loadAverage())
	if failures > 0 {
		fmt.Fprintf(stderr, "leasehold bench compare: %d of %d runs failed\n", failures, total)
		return exitFail
	}
	return exitOK
}

// command is the command line of one run.
func (f compareFlags) command(system, mode string) []string {
	var cmd []string
	if system == systemLeasehold {
		cmd = []string{f.leaseholdBin, "bench", mode, "--engine", enginePostgres}
	} else {
		cmd = []string{f.riverBin, mode}
	}
	cmd = append(cmd, "--database-url", f.databaseURL)
	return append(cmd, f.passThrough...)
}

// runChild runs one benchmark process, echoes its output, and returns its
// RESULT line.
func runChild(ctx context.Context, argv []string, stdout io.Writer) (*measure.Result, error) {
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdout = io.MultiWriter(&out, stdout)
	cmd.Stderr = &errOut
	// An interrupted run gets SIGTERM, so it can still drop its schema.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = childStopDelay
	cmd.SysProcAttr = childSysProcAttr()
	start := time.Now()
	err := cmd.Run()
	if err != nil {
		return nil, fmt.Errorf("%s: %w after %s\n%s", strings.Join(argv, " "), err, time.Since(start).Round(time.Millisecond), measure.Indent(errOut.String(), "#   "))
	}
	res, err := measure.FindResult(out.String())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
	}
	return res, nil
}

// summaryRow is one mode and metric: the median of each system and the
// ratio of the medians (NaN where a system has no value).
type summaryRow struct {
	mode, metric     string
	leasehold, river float64
	nL, nR           int
	ratio            float64
}

// summarize takes, per mode (in modes' order) and metric, the median of
// each system's runs. Metrics come in the order the results first name
// them, those of both systems before those of one.
func summarize(results []*measure.Result, modes []string) []summaryRow {
	var rows []summaryRow
	for _, mode := range modes {
		var metrics []string
		values := map[string]map[string][]float64{} // system → metric → values
		for _, r := range results {
			if m, _ := r.Get(measure.KeyMode); m != mode {
				continue
			}
			system, _ := r.Get(measure.KeySystem)
			if values[system] == nil {
				values[system] = map[string][]float64{}
			}
			for _, fld := range r.Fields() {
				v, ok := r.Float(fld.Key)
				if !ok || notCompared[fld.Key] {
					continue
				}
				if !slices.Contains(metrics, fld.Key) {
					metrics = append(metrics, fld.Key)
				}
				values[system][fld.Key] = append(values[system][fld.Key], v)
			}
		}
		// Metrics both systems report first, then each one's own.
		both := func(m string) bool {
			return len(values[systemLeasehold][m]) > 0 && len(values[systemRiver][m]) > 0
		}
		metrics = append(slices.DeleteFunc(slices.Clone(metrics), func(m string) bool { return !both(m) }),
			slices.DeleteFunc(metrics, both)...)
		for _, metric := range metrics {
			l, r := values[systemLeasehold][metric], values[systemRiver][metric]
			row := summaryRow{mode: mode, metric: metric, leasehold: median(l), river: median(r), nL: len(l), nR: len(r), ratio: math.NaN()}
			if len(l) > 0 && len(r) > 0 && row.river != 0 {
				row.ratio = row.leasehold / row.river
			}
			rows = append(rows, row)
		}
	}
	return rows
}

// median of vs (not modified); NaN when empty. An even count averages the
// middle two.
func median(vs []float64) float64 {
	if len(vs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

func writeSummary(w io.Writer, rows []summaryRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tmetric\tleasehold\triver\tratio\t(runs)\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t(%d/%d)\t\n", r.mode, r.metric,
			formatOr(r.leasehold, "-"), formatOr(r.river, "-"), formatOr(r.ratio, "-"), r.nL, r.nR)
	}
	tw.Flush()
}

// writeResultsSection prints the comparison as bench/RESULTS.md keeps
// runs: a dated heading, what ran, and one table of medians.
func writeResultsSection(w io.Writer, started time.Time, f compareFlags, rows []summaryRow) {
	fmt.Fprintf(w, "## %s — leasehold bench compare\n\n", started.Format("2006-01-02 15:04 MST"))
	fmt.Fprintf(w, "Medians of %d alternated rounds of %s", f.rounds, strings.Join(f.modes, ", "))
	if len(f.passThrough) > 0 {
		fmt.Fprintf(w, " (`%s`)", strings.Join(f.passThrough, " "))
	}
	fmt.Fprintf(w, ".\n\n| mode | metric | Leasehold | River | Leasehold / River | runs |\n| --- | --- | --- | --- | --- | --- |\n")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | `%s` | %s | %s | %s | %d / %d |\n", r.mode, r.metric,
			formatOr(r.leasehold, "–"), formatOr(r.river, "–"), formatOr(r.ratio, "–"), r.nL, r.nR)
	}
}

// formatOr is formatFloat(v), or none for a missing value (NaN).
func formatOr(v float64, none string) string {
	if math.IsNaN(v) {
		return none
	}
	return formatFloat(v)
}

// formatFloat prints about four significant digits.
func formatFloat(v float64) string {
	switch a := math.Abs(v); {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 10:
		return fmt.Sprintf("%.2f", v)
	case a >= 1:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.4f", v)
	}
}
