package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func (c *cli) runQueue(ctx context.Context, args []string) int {
	return c.dispatch(ctx, "queue", args, []subcommand{
		{"list", "", "List queues with their counts by state.", c.queueList},
		{"get", "Q", "Show a queue's policy (defaults when none is stored) and counts.", c.queueGet},
		{"set-policy", "Q [--max-attempts N] [--initial-delay D] [--max-delay D] [--multiplier F] [--jitter F] [--retryable-codes a,b] [--non-retryable-codes c] [--total-retry-deadline D] [--lease-duration D] [--concurrency-limit N]",
			"Change a queue's policy. The current policy is read first and only the flags given are changed.", c.queueSetPolicy},
		{"pause", "Q", "Stop handing out the queue's jobs; creates still succeed.", c.queuePause},
		{"resume", "Q", "Hand out the queue's jobs again.", c.queueResume},
	})
}

func (c *cli) queueList(ctx context.Context, cmd *command, args []string) error {
	_, err := cmd.parseArgs(args)
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).ListQueues(callCtx, &leaseholdv1.ListQueuesRequest{})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	rows := make([][]string, len(resp.GetQueues()))
	for i, q := range resp.GetQueues() {
		rows[i] = queueRow(q)
	}
	return out.table(queueHeader, rows)
}

func (c *cli) queueGet(ctx context.Context, cmd *command, args []string) error {
	pos, err := cmd.parseArgs(args, "Q")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).GetQueue(callCtx, &leaseholdv1.GetQueueRequest{Queue: pos[0]})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	return out.fields(append(policyFields(resp.GetQueue().GetPolicy()), statsFields(resp.GetQueue().GetStats())...))
}

// policyFlags are set-policy's flags; only those given change the policy.
type policyFlags struct {
	maxAttempts, concurrencyLimit                     int
	initialDelay, maxDelay, totalRetryDeadline, lease time.Duration
	multiplier, jitter                                float64
	retryableCodes, nonRetryableCodes                 string
}

func (f *policyFlags) register(cmd *command) {
	fs := cmd.fs
	fs.IntVar(&f.maxAttempts, "max-attempts", 0, "attempt budget (>= 1)")
	fs.DurationVar(&f.initialDelay, "initial-delay", 0, "delay after the first failure")
	fs.DurationVar(&f.maxDelay, "max-delay", 0, "cap on the computed delay")
	fs.Float64Var(&f.multiplier, "multiplier", 0, "backoff growth per attempt (>= 1)")
	fs.Float64Var(&f.jitter, "jitter", 0, "random extra delay as a fraction of the delay, in [0, 1]")
	fs.StringVar(&f.retryableCodes, "retryable-codes", "", "error `codes` always retried, comma-separated; \"\" clears")
	fs.StringVar(&f.nonRetryableCodes, "non-retryable-codes", "", "error `codes` never retried, comma-separated; \"\" clears")
	fs.DurationVar(&f.totalRetryDeadline, "total-retry-deadline", 0, "time budget from creation; 0 = none")
	fs.DurationVar(&f.lease, "lease-duration", 0, "lease when a claim asks for none")
	fs.IntVar(&f.concurrencyLimit, "concurrency-limit", 0, "most jobs leased at once across the fleet; 0 = unlimited")
}

// apply changes p for each flag given on the command line and reports
// whether any was. Values are not checked here: the server validates the
// whole policy and names the offending field.
func (f *policyFlags) apply(cmd *command, p *leaseholdv1.QueuePolicy) bool {
	if p.Retry == nil {
		p.Retry = &leaseholdv1.RetryPolicy{}
	}
	r := p.Retry
	changed := false
	cmd.fs.Visit(func(fl *flag.Flag) {
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

func (c *cli) queueSetPolicy(ctx context.Context, cmd *command, args []string) error {
	var pf policyFlags
	pf.register(cmd)
	pos, err := cmd.parseArgs(args, "Q")
	if err != nil {
		return err
	}
	if !pf.apply(cmd, &leaseholdv1.QueuePolicy{}) {
		return cmd.usagef("nothing to change: give at least one policy flag")
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	admin := leaseholdv1.NewAdminServiceClient(conn)
	// Read-modify-write, so that a flag not given keeps its current value
	// instead of falling back to the default. The update carries the whole
	// policy; paused is ignored by UpdateQueuePolicy.
	cur, err := admin.GetQueue(callCtx, &leaseholdv1.GetQueueRequest{Queue: pos[0]})
	if err != nil {
		return err
	}
	policy := proto.Clone(cur.GetQueue().GetPolicy()).(*leaseholdv1.QueuePolicy)
	if policy == nil {
		policy = &leaseholdv1.QueuePolicy{}
	}
	policy.Queue = pos[0]
	pf.apply(cmd, policy)
	resp, err := admin.UpdateQueuePolicy(callCtx, &leaseholdv1.UpdateQueuePolicyRequest{Policy: policy})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	return out.fields(policyFields(resp.GetPolicy()))
}

func (c *cli) queuePause(ctx context.Context, cmd *command, args []string) error {
	return c.queuePauseResume(ctx, cmd, args, true)
}

func (c *cli) queueResume(ctx context.Context, cmd *command, args []string) error {
	return c.queuePauseResume(ctx, cmd, args, false)
}

func (c *cli) queuePauseResume(ctx context.Context, cmd *command, args []string, pause bool) error {
	pos, err := cmd.parseArgs(args, "Q")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	admin := leaseholdv1.NewAdminServiceClient(conn)
	var (
		resp   proto.Message
		policy *leaseholdv1.QueuePolicy
	)
	if pause {
		r, err := admin.PauseQueue(callCtx, &leaseholdv1.PauseQueueRequest{Queue: pos[0]})
		if err != nil {
			return err
		}
		resp, policy = r, r.GetPolicy()
	} else {
		r, err := admin.ResumeQueue(callCtx, &leaseholdv1.ResumeQueueRequest{Queue: pos[0]})
		if err != nil {
			return err
		}
		resp, policy = r, r.GetPolicy()
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	if policy.GetPaused() {
		fmt.Fprintf(out.w, "queue %s paused: jobs are accepted but not handed out\n", pos[0])
	} else {
		fmt.Fprintf(out.w, "queue %s resumed\n", pos[0])
	}
	return nil
}
