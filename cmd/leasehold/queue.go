package main

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func (c *cli) queueCommand() *cobra.Command {
	return c.group("queue", "List, get, set-policy, pause, resume queues",
		c.queueListCommand(),
		c.queueGetCommand(),
		c.queueSetPolicyCommand(),
		c.queuePauseCommand(),
		c.queueResumeCommand(),
	)
}

func (c *cli) queueListCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List queues with their counts by state",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				queues, err := client.ListQueues(ctx)
				if err != nil {
					return err
				}
				return out.list(page{resp: &leaseholdv1.ListQueuesResponse{Queues: queues}, header: queueHeader, rows: rows(queues, queueRow)})
			})
		},
	}
}

func (c *cli) queueGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get Q",
		Short: "Show a queue's policy and counts",
		Long:  "Show a queue's policy (defaults when none is stored) and counts.",
		Args:  positional("Q"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				q, err := client.GetQueue(ctx, args[0])
				if err != nil {
					return err
				}
				return out.show(&leaseholdv1.GetQueueResponse{Queue: q}, append(policyFields(q.GetPolicy()), statsFields(q.GetStats())...))
			})
		},
	}
}

// policyFlags are set-policy's flags; only those given change the policy.
type policyFlags struct {
	keyConcurrencyLimit, rateStarts                   int
	rateInterval                                      time.Duration
	ratePerKey                                        bool
	defaultDependency                                 string
	maxAttempts, concurrencyLimit                     int
	initialDelay, maxDelay, totalRetryDeadline, lease time.Duration
	multiplier, jitter                                float64
	retryableCodes, nonRetryableCodes                 string
	backoff                                           string
}

func (f *policyFlags) register(fs *pflag.FlagSet) {
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempt budget (>= 1)")
	fs.DurationVar(&f.initialDelay, "initial-delay", 0, "delay after the first failure")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "cap on the computed delay")
	fs.Float64Var(&f.multiplier, "multiplier", 0, "backoff growth per attempt (>= 1)")
	fs.Float64Var(&f.jitter, "jitter", 0, "random extra delay as a fraction of the delay, in [0, 1]")
	fs.StringVar(&f.backoff, "backoff", "", "delay formula: exponential or decorrelated (random between the initial delay and 3x the previous one)")
	fs.StringVar(&f.retryableCodes, "retryable-codes", "", "error `codes` always retried, comma-separated; \"\" clears")
	fs.StringVar(&f.nonRetryableCodes, "non-retryable-codes", "", "error `codes` never retried, comma-separated; \"\" clears")
	fs.DurationVar(&f.totalRetryDeadline, "total-retry-deadline", 0, "time budget from creation; 0 = none")
	fs.DurationVar(&f.lease, "lease-duration", 0, "lease when a claim asks for none")
	fs.IntVar(&f.concurrencyLimit, "concurrency-limit", 0, "most jobs leased at once across the fleet; 0 = unlimited")
	fs.IntVar(&f.keyConcurrencyLimit, "key-concurrency-limit", 0, "most jobs of one concurrency key leased at once; 0 = unlimited")
	fs.IntVar(&f.rateStarts, "rate-starts", 0, "most jobs started per --rate-interval; 0 = no rate limit")
	fs.DurationVar(&f.rateInterval, "rate-interval", 0, "the rate limit's interval, between 1s and 24h")
	fs.BoolVar(&f.ratePerKey, "rate-per-key", false, "apply the rate to each concurrency key instead of the queue")
	fs.StringVar(&f.defaultDependency, "default-dependency", "", "dependency of jobs created without one; \"\" clears")
}

// apply changes p for each flag given on the command line and reports
// whether any was. Values are not checked here: the server validates the
// whole policy and names the offending field.
func (f *policyFlags) apply(fs *pflag.FlagSet, p *leaseholdv1.QueuePolicy) bool {
	if p.GetRetry() == nil {
		p.Retry = &leaseholdv1.RetryPolicy{}
	}
	r := p.GetRetry()
	changed := false
	fs.Visit(func(fl *pflag.Flag) {
		switch fl.Name {
		case "max-attempts":
			r.MaxAttempts = int32(clampInt32(f.maxAttempts))
		case "initial-delay":
			r.InitialDelay = durationpb.New(f.initialDelay)
		case "max-delay":
			r.MaxDelay = durationpb.New(f.maxDelay)
		case "multiplier":
			r.Multiplier = f.multiplier
		case "jitter":
			r.JitterFraction = proto.Float64(f.jitter)
		case "backoff":
			// An unknown name is sent as an unknown value: the server
			// refuses it, naming policy.retry.backoff.
			r.Backoff = leaseholdv1.RetryBackoff(-1)
			switch f.backoff {
			case "exponential":
				r.Backoff = leaseholdv1.RetryBackoff_RETRY_BACKOFF_EXPONENTIAL
			case "decorrelated":
				r.Backoff = leaseholdv1.RetryBackoff_RETRY_BACKOFF_DECORRELATED
			}
		case "retryable-codes":
			r.RetryableErrorCodes = splitCodes(f.retryableCodes)
		case "non-retryable-codes":
			r.NonRetryableErrorCodes = splitCodes(f.nonRetryableCodes)
		case "total-retry-deadline":
			r.TotalRetryDeadline = durationpb.New(f.totalRetryDeadline)
		case "lease-duration":
			p.DefaultLeaseDuration = durationpb.New(f.lease)
		case "concurrency-limit":
			p.ConcurrencyLimit = int32(clampInt32(f.concurrencyLimit))
		case "key-concurrency-limit":
			p.KeyConcurrencyLimit = int32(clampInt32(f.keyConcurrencyLimit))
		case "rate-starts", "rate-interval", "rate-per-key":
			if p.GetRateLimit() == nil {
				p.RateLimit = &leaseholdv1.RateLimit{}
			}
			switch fl.Name {
			case "rate-starts":
				p.RateLimit.Starts = int32(clampInt32(f.rateStarts))
			case "rate-interval":
				p.RateLimit.Interval = durationpb.New(f.rateInterval)
			default:
				p.RateLimit.PerKey = f.ratePerKey
			}
			if p.GetRateLimit().GetStarts() == 0 && p.GetRateLimit().GetInterval().AsDuration() == 0 && !p.GetRateLimit().GetPerKey() {
				p.RateLimit = nil // --rate-starts 0 clears the limit
			}
		case "default-dependency":
			p.DefaultDependency = f.defaultDependency
		default:
			return
		}
		changed = true
	})
	return changed
}

// clampInt32 keeps an int flag inside int32 so an absurd value reaches the
// server as an out-of-range number (and is rejected there) instead of
// wrapping around to a plausible one.
func clampInt32(v int) int {
	return max(min(v, 1<<31-1), -1<<31)
}

// splitCodes turns "a, b,,c" into [a b c].
func splitCodes(s string) []string {
	var codes []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			codes = append(codes, p)
		}
	}
	return codes
}

func (c *cli) queueSetPolicyCommand() *cobra.Command {
	var pf policyFlags
	cmd := &cobra.Command{
		Use: "set-policy Q [--max-attempts N] [--initial-delay D] [--max-delay D] [--multiplier F] [--jitter F] [--backoff exponential|decorrelated] " +
			"[--retryable-codes a,b] [--non-retryable-codes c] [--total-retry-deadline D] [--lease-duration D] [--concurrency-limit N] " +
			"[--key-concurrency-limit N] [--rate-starts N --rate-interval D [--rate-per-key]] [--default-dependency DEP]",
		Short: "Change a queue's policy",
		Long:  "Change a queue's policy. The current policy is read first and only the flags given are changed.",
		Args:  positional("Q"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !pf.apply(cmd.Flags(), &leaseholdv1.QueuePolicy{}) {
				return usagef("nothing to change: give at least one policy flag")
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				// Read-modify-write, so that a flag not given keeps its
				// current value instead of falling back to the default. The
				// update carries the whole policy; paused is ignored by
				// UpdateQueuePolicy.
				cur, err := client.GetQueue(ctx, args[0])
				if err != nil {
					return err
				}
				policy := proto.CloneOf(cur.GetPolicy())
				if policy == nil {
					policy = &leaseholdv1.QueuePolicy{}
				}
				policy.Queue = args[0]
				pf.apply(cmd.Flags(), policy)
				stored, err := client.UpdateQueuePolicy(ctx, policy)
				if err != nil {
					return err
				}
				return out.show(&leaseholdv1.UpdateQueuePolicyResponse{Policy: stored}, policyFields(stored))
			})
		},
	}
	pf.register(cmd.Flags())
	return cmd
}

func (c *cli) queuePauseCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "pause Q",
		Short: "Stop handing out the queue's jobs; creates still succeed",
		Args:  positional("Q"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				policy, err := client.PauseQueue(ctx, args[0])
				if err != nil {
					return err
				}
				return sayPaused(out, &leaseholdv1.PauseQueueResponse{Policy: policy}, args[0], policy)
			})
		},
	}
}

func (c *cli) queueResumeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "resume Q",
		Short: "Hand out the queue's jobs again",
		Args:  positional("Q"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				policy, err := client.ResumeQueue(ctx, args[0])
				if err != nil {
					return err
				}
				return sayPaused(out, &leaseholdv1.ResumeQueueResponse{Policy: policy}, args[0], policy)
			})
		},
	}
}

// sayPaused reports the state the server answered with.
func sayPaused(out *printer, resp proto.Message, queue string, policy *leaseholdv1.QueuePolicy) error {
	if policy.GetPaused() {
		return out.say(resp, "queue %s paused: jobs are accepted but not handed out", queue)
	}
	return out.say(resp, "queue %s resumed", queue)
}
