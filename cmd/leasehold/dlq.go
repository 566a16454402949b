package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func (c *cli) dlqCommand() *cobra.Command {
	return c.group("dlq", "List, show, replay, abandon dead jobs",
		c.dlqListCommand(),
		c.dlqShowCommand(),
		c.dlqReplayCommand(),
		c.dlqAbandonCommand(),
	)
}

func (c *cli) dlqListCommand() *cobra.Command {
	var (
		req   leaseholdv1.ListDeadJobsRequest
		pages pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--include-abandoned] [--filter F] [--limit N] [--page-token T]",
		Short: "List the dead-letter queue, newest first",
		Long: `List the dead-letter queue (jobs whose retry budget is spent), newest first.

--filter selects dead jobs by a filter string (docs/filters.md), ANDed with
--queue and --include-abandoned, e.g.

  leasehold dlq list --filter 'error_code = "TIMEOUT" AND metadata.customer = "42"'`,
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.PageSize, req.PageToken, err = pages.request(); err != nil {
				return err
			}
			req.View = leaseholdv1.JobView_JOB_VIEW_BASIC // as job list: no payloads in a table
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.ListDeadJobs(ctx, &req)
				if err != nil {
					return err
				}
				return out.list(page{resp: resp, header: deadHeader, rows: rows(resp.GetDeadJobs(), deadRow), nextPageToken: resp.GetNextPageToken()})
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Queue, "queue", "", "only this queue")
	fs.BoolVar(&req.IncludeAbandoned, "include-abandoned", false, "list abandoned dead jobs too")
	fs.StringVar(&req.Filter, "filter", "", "only dead jobs this `filter` selects (docs/filters.md), e.g. 'error_code = \"TIMEOUT\"'")
	pages.add(fs)
	return cmd
}

func (c *cli) dlqShowCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "show ID",
		Short: "Show a dead job with its evidence",
		Long:  "Show a dead job with its evidence: the job, its last error and every attempt.",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				dead, err := client.GetDeadJob(ctx, args[0])
				if err != nil {
					return err
				}
				if out.json {
					return out.message(&leaseholdv1.GetDeadJobResponse{DeadJob: dead})
				}
				return printDeadJob(out, dead)
			})
		},
	}
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
	return out.table(attemptHeader, rows(d.GetAttempts(), attemptRow))
}

func (c *cli) dlqReplayCommand() *cobra.Command {
	var bulk bulkFlags
	cmd := &cobra.Command{
		Use:   "replay (ID | --filter F [--dry-run] [--wait]) [--reason R]",
		Short: "Create a new job from a dead one, or from every dead job a filter matches",
		Long: "Create a new job from a dead one (new id, attempts reset). Replaying the same dead job again returns the first replay.\n" +
			"With --filter instead of an ID, replay every dead job the filter matches, as a bulk operation (op get/wait).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byFilter, err := bulk.byFilter(cmd, args)
			if err != nil {
				return err
			}
			if byFilter {
				return c.runBulk(cmd, worker.BulkReplay, bulk, worker.BulkRequest{})
			}
			reason := bulk.reason
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				job, already, err := client.ReplayDeadJob(ctx, args[0], reason)
				if err != nil {
					return err
				}
				resp := &leaseholdv1.ReplayDeadJobResponse{Job: job, AlreadyReplayed: already}
				if already {
					return out.say(resp, "%s was already replayed as %s", args[0], job.GetId())
				}
				return out.say(resp, "%s replayed as %s", args[0], job.GetId())
			})
		},
	}
	bulk.register(cmd.Flags(), "why, recorded in the dead job's history")
	return cmd
}

func (c *cli) dlqAbandonCommand() *cobra.Command {
	var bulk bulkFlags
	cmd := &cobra.Command{
		Use:   "abandon (ID | --filter F [--dry-run] [--wait]) [--reason R]",
		Short: "Give up on a dead job, or on every dead job a filter matches",
		Long: "Give up on a dead job: it leaves the listing and stays as evidence until retention prunes it.\n" +
			"With --filter instead of an ID, abandon every dead job the filter matches, as a bulk operation (op get/wait).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byFilter, err := bulk.byFilter(cmd, args)
			if err != nil {
				return err
			}
			if byFilter {
				return c.runBulk(cmd, worker.BulkAbandon, bulk, worker.BulkRequest{})
			}
			reason := bulk.reason
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				dead, err := client.AbandonDeadJob(ctx, args[0], reason)
				if err != nil {
					return err
				}
				return out.say(&leaseholdv1.AbandonDeadJobResponse{DeadJob: dead}, "%s abandoned", dead.GetJob().GetId())
			})
		},
	}
	bulk.register(cmd.Flags(), "why, recorded in the dead job's history")
	return cmd
}
