package main

import (
	"context"
	"fmt"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

func (c *cli) runDLQ(ctx context.Context, args []string) int {
	return c.dispatch(ctx, "dlq", args, []subcommand{
		{"list", "[--queue Q] [--include-abandoned] [--limit N] [--page-token T]",
			"List the dead-letter queue (jobs whose retry budget is spent), newest first.", c.dlqList},
		{"show", "ID", "Show a dead job with its evidence: the job, its last error and every attempt.", c.dlqShow},
		{"replay", "ID [--reason R]",
			"Create a new job from a dead one (new id, attempts reset). Replaying the same dead job again returns the first replay.", c.dlqReplay},
		{"abandon", "ID [--reason R]",
			"Give up on a dead job: it leaves the listing and stays as evidence until retention prunes it.", c.dlqAbandon},
	})
}

func (c *cli) dlqList(ctx context.Context, cmd *command, args []string) error {
	queue := cmd.fs.String("queue", "", "only this queue")
	includeAbandoned := cmd.fs.Bool("include-abandoned", false, "list abandoned dead jobs too")
	limit := cmd.fs.Int("limit", 0, "page size; 0 = the server's default (50), at most 500")
	pageToken := cmd.fs.String("page-token", "", "continue from a previous page")
	_, err := cmd.parseArgs(args)
	if err != nil {
		return err
	}
	if *limit < 0 {
		return cmd.usagef("--limit must not be negative")
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).ListDeadJobs(callCtx, &leaseholdv1.ListDeadJobsRequest{
		Queue:            *queue,
		PageSize:         int32(min(*limit, 1<<30)),
		PageToken:        *pageToken,
		IncludeAbandoned: *includeAbandoned,
	})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	rows := make([][]string, len(resp.GetDeadJobs()))
	for i, d := range resp.GetDeadJobs() {
		rows[i] = deadRow(d)
	}
	if err := out.table(deadHeader, rows); err != nil {
		return err
	}
	if t := resp.GetNextPageToken(); t != "" {
		fmt.Fprintf(c.stderr, "more: --page-token %s\n", t)
	}
	return nil
}

func (c *cli) dlqShow(ctx context.Context, cmd *command, args []string) error {
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).GetDeadJob(callCtx, &leaseholdv1.GetDeadJobRequest{JobId: pos[0]})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	return printDeadJob(out, resp.GetDeadJob())
}

// printDeadJob shows the job, what operators did to it, and its attempts.
func printDeadJob(out *printer, d *leaseholdv1.DeadJob) error {
	pairs := jobFields(d.GetJob())
	pairs = append(pairs, [2]string{"Replayed as", d.GetReplayedAs()})
	if d.GetAbandoned() {
		pairs = append(pairs, [2]string{"Abandoned", "yes"})
	}
	if err := out.fields(pairs); err != nil {
		return err
	}
	if len(d.GetAttempts()) == 0 {
		return nil
	}
	fmt.Fprintln(out.w)
	rows := make([][]string, len(d.GetAttempts()))
	for i, a := range d.GetAttempts() {
		rows[i] = attemptRow(a)
	}
	return out.table(attemptHeader, rows)
}

func (c *cli) dlqReplay(ctx context.Context, cmd *command, args []string) error {
	reason := cmd.fs.String("reason", "", "why, recorded in the dead job's history")
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).ReplayDeadJob(callCtx, &leaseholdv1.ReplayDeadJobRequest{JobId: pos[0], Reason: *reason})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	if resp.GetAlreadyReplayed() {
		fmt.Fprintf(out.w, "%s was already replayed as %s\n", pos[0], resp.GetJob().GetId())
	} else {
		fmt.Fprintf(out.w, "%s replayed as %s\n", pos[0], resp.GetJob().GetId())
	}
	return nil
}

func (c *cli) dlqAbandon(ctx context.Context, cmd *command, args []string) error {
	reason := cmd.fs.String("reason", "", "why, recorded in the dead job's history")
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewAdminServiceClient(conn).AbandonDeadJob(callCtx, &leaseholdv1.AbandonDeadJobRequest{JobId: pos[0], Reason: *reason})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	fmt.Fprintf(out.w, "%s abandoned\n", resp.GetDeadJob().GetJob().GetId())
	return nil
}
