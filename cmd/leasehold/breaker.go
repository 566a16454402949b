package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func (c *cli) breakerCommand() *cobra.Command {
	return c.group("breaker", "List, get, reset, open circuit breakers; their events and policies",
		c.breakerListCommand(),
		c.breakerGetCommand(),
		c.breakerResetCommand(),
		c.breakerOpenCommand(),
		c.breakerEventsCommand(),
		c.breakerSetPolicyCommand(),
	)
}

// errBreakersUnavailable explains an UNIMPLEMENTED answer: the coordinator
// predates circuit breakers. The status is kept so the exit code and the
// printed gRPC code stay those of the server's answer.
func errBreakersUnavailable(err error) error {
	if status.Code(err) != codes.Unimplemented {
		return err
	}
	return &hintedError{err: err, hint: "circuit breakers are not available in this version of the coordinator"}
}

func (c *cli) breakerListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List circuit breakers per dependency",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				breakers, err := client.ListBreakers(ctx)
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.list(page{
					resp:   &leaseholdv1.ListBreakersResponse{Breakers: breakers},
					header: breakerHeader, rows: rows(breakers, breakerRow),
					empty: "no circuit breakers",
				})
			})
		},
	}
}

func (c *cli) breakerGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get DEP",
		Short: "Show a dependency's breaker: state, window, next probe and policy",
		Args:  positional("DEP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				b, err := client.GetBreaker(ctx, args[0])
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.show(&leaseholdv1.GetBreakerResponse{Breaker: b}, breakerFields(b))
			})
		},
	}
}

func (c *cli) breakerResetCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "reset DEP [--reason TEXT]",
		Short: "Close a dependency's breaker by hand",
		Args:  positional("DEP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				b, err := client.ResetBreaker(ctx, args[0], reason)
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.say(&leaseholdv1.ResetBreakerResponse{Breaker: b}, "breaker %s is %s", args[0], breakerRow(b)[1])
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the breaker's events and the audit log)")
	return cmd
}

func (c *cli) breakerOpenCommand() *cobra.Command {
	var (
		reason string
		d      time.Duration
	)
	cmd := &cobra.Command{
		Use:   "open DEP [--for D] [--reason TEXT]",
		Short: "Open a dependency's breaker by hand (a maintenance window)",
		Long: "Open a dependency's breaker by hand: no coordinator claims its jobs until " +
			"`breaker reset`, or, with --for, until that long has passed and a probe succeeds.",
		Args: positional("DEP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if d < 0 {
				return usagef("--for must not be negative")
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				b, err := client.ForceOpenBreaker(ctx, args[0], d, reason)
				if err != nil {
					return errBreakersUnavailable(err)
				}
				until := "until reset"
				if b.GetNextProbeAt() != nil {
					until = "until " + formatTime(b.GetNextProbeAt()) + ", then probing"
				}
				return out.say(&leaseholdv1.ForceOpenBreakerResponse{Breaker: b}, "breaker %s is OPEN %s", args[0], until)
			})
		},
	}
	cmd.Flags().DurationVar(&d, "for", 0, "how long before half-open probes; 0 = until reset")
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the breaker's events and the audit log)")
	return cmd
}

func (c *cli) breakerEventsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "events DEP",
		Short: "List a dependency's breaker transitions, oldest first",
		Args:  positional("DEP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				events, err := client.BreakerEvents(ctx, args[0])
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.list(page{
					resp:   &leaseholdv1.ListBreakerEventsResponse{Events: events},
					header: breakerEventHeader, rows: rows(events, breakerEventRow),
				})
			})
		},
	}
}

// breakerPolicyFlags are the flags of `breaker set-policy`; a flag given
// replaces that field of the current policy.
type breakerPolicyFlags struct {
	codes                               string
	windowSize, minVolume, probes       int
	window, open, maxOpen, probeTimeout time.Duration
	threshold, multiplier               float64
}

func (f *breakerPolicyFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.codes, "codes", "", "error `codes` that count as the dependency failing, comma-separated; \"\" = every code")
	fs.IntVar(&f.windowSize, "window-size", 0, "count window: the last N outcomes")
	fs.DurationVar(&f.window, "window", 0, "time window: the outcomes of the last D (replaces --window-size)")
	fs.IntVar(&f.minVolume, "min-volume", 0, "outcomes needed before the rate is judged")
	fs.Float64Var(&f.threshold, "threshold", 0, "failure rate that opens the breaker, in (0, 1]")
	fs.DurationVar(&f.open, "open-for", 0, "first open delay")
	fs.DurationVar(&f.maxOpen, "max-open-for", 0, "cap of the open delay")
	fs.Float64Var(&f.multiplier, "backoff", 0, "growth of the open delay per consecutive opening (>= 1)")
	fs.IntVar(&f.probes, "probes", 0, "jobs half-open admits")
	fs.DurationVar(&f.probeTimeout, "probe-timeout", 0, "when a probe that has not reported frees its slot")
}

func (f *breakerPolicyFlags) apply(fs *pflag.FlagSet, p *leaseholdv1.BreakerPolicy) bool {
	changed := false
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "codes":
			p.CountedErrorCodes = splitCodes(f.codes)
		case "window-size":
			p.WindowSize, p.WindowDuration = int32(clampInt32(f.windowSize)), nil
		case "window":
			p.WindowDuration, p.WindowSize = durationpb.New(f.window), 0
		case "min-volume":
			p.MinimumVolume = int32(clampInt32(f.minVolume))
		case "threshold":
			p.FailureRateThreshold = f.threshold
		case "open-for":
			p.OpenDuration = durationpb.New(f.open)
		case "max-open-for":
			p.MaxOpenDuration = durationpb.New(f.maxOpen)
		case "backoff":
			p.BackoffMultiplier = f.multiplier
		case "probes":
			p.HalfOpenProbes = int32(clampInt32(f.probes))
		case "probe-timeout":
			p.ProbeTimeout = durationpb.New(f.probeTimeout)
		default:
			return
		}
		changed = true
	})
	return changed
}

func (c *cli) breakerSetPolicyCommand() *cobra.Command {
	var pf breakerPolicyFlags
	cmd := &cobra.Command{
		Use:   "set-policy DEP [--codes a,b] [--window-size N | --window D] [--min-volume N] [--threshold F] [--open-for D] [--max-open-for D] [--backoff F] [--probes N] [--probe-timeout D]",
		Short: "Change a dependency's breaker policy",
		Long:  "Change a dependency's breaker policy. The current policy (or the default) is read first and only the flags given are changed.",
		Args:  positional("DEP"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !pf.apply(cmd.Flags(), &leaseholdv1.BreakerPolicy{}) {
				return usagef("nothing to change: give at least one policy flag")
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				policy := &leaseholdv1.BreakerPolicy{}
				cur, err := client.GetBreaker(ctx, args[0])
				switch {
				case err == nil:
					policy = proto.CloneOf(cur.GetPolicy())
				case status.Code(err) == codes.NotFound:
					// No breaker yet: start from the defaults.
				default:
					return errBreakersUnavailable(err)
				}
				policy.Dependency = args[0]
				pf.apply(cmd.Flags(), policy)
				b, err := client.UpdateBreakerPolicy(ctx, policy)
				if err != nil {
					return errBreakersUnavailable(err)
				}
				return out.show(&leaseholdv1.UpdateBreakerPolicyResponse{Breaker: b}, breakerFields(b))
			})
		},
	}
	pf.register(cmd.Flags())
	return cmd
}

// breakerFields are the lines of `breaker get`.
func breakerFields(b *leaseholdv1.Breaker) [][2]string {
	p := b.GetPolicy()
	window := strconv.Itoa(int(p.GetWindowSize())) + " outcomes"
	if p.GetWindowDuration() != nil {
		window = formatDuration(p.GetWindowDuration())
	}
	codes := strings.Join(p.GetCountedErrorCodes(), ",")
	if codes == "" {
		codes = "every code"
	}
	policy := "default"
	if b.GetPolicyStored() {
		policy = "stored"
	}
	return [][2]string{
		{"dependency", b.GetDependency()},
		{"state", breakerRow(b)[1]},
		{"failure rate", breakerRow(b)[2]},
		{"window counts", strconv.FormatInt(b.GetWindowFailures(), 10) + " failed of " + strconv.FormatInt(b.GetWindowOutcomes(), 10)},
		{"opened at", formatTime(b.GetOpenedAt())},
		{"next probe", formatTime(b.GetNextProbeAt())},
		{"trips", strconv.Itoa(int(b.GetTrips()))},
		{"forced", strconv.FormatBool(b.GetForced())},
		{"probes in flight", strconv.Itoa(int(b.GetProbesInFlight()))},
		{"policy", policy},
		{"counted codes", codes},
		{"window", window},
		{"minimum volume", strconv.Itoa(int(p.GetMinimumVolume()))},
		{"threshold", strconv.FormatFloat(p.GetFailureRateThreshold(), 'g', -1, 64)},
		{"open for", formatDuration(p.GetOpenDuration()) + " x" + strconv.FormatFloat(p.GetBackoffMultiplier(), 'g', -1, 64) +
			" up to " + formatDuration(p.GetMaxOpenDuration())},
		{"probes", strconv.Itoa(int(p.GetHalfOpenProbes())) + " (timeout " + formatDuration(p.GetProbeTimeout()) + ")"},
	}
}
