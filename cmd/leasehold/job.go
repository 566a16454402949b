package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// payloadReadLimit bounds what --payload-file and --payload-stdin read. It
// is above the server's default payload limit so that the server, which
// knows its configured limit, is the one that rejects an oversized payload,
// while a runaway pipe cannot exhaust the CLI's memory.
const payloadReadLimit = 64 << 20

func (c *cli) jobCommand() *cobra.Command {
	return c.group("job", "Create, get, list, cancel, events, watch jobs",
		c.jobCreateCommand(),
		c.jobGetCommand(),
		c.jobListCommand(),
		c.jobCancelCommand(),
		c.jobRetryCommand(),
		c.jobDeleteCommand(),
		c.jobPriorityCommand(),
		c.jobEventsCommand(),
		c.jobWatchCommand(),
	)
}

func (c *cli) jobCreateCommand() *cobra.Command {
	var (
		queue, kind, payload, payloadFile string
		payloadStdin                      bool
		opts                              worker.CreateOptions
		meta                              []string
		unique                            uniqueFlags
	)
	cmd := &cobra.Command{
		Use:   "create --queue Q --kind K [--payload S | --payload-file F | --payload-stdin]",
		Short: "Create a job",
		Long: "Create a job. With --request-id the create is idempotent: repeating it returns the original job.\n" +
			"With --unique-key or --unique-by-meta it is unique: while a job with the key is live (or within\n" +
			"--unique-period) the create answers that job (Duplicate: yes), or fails with --unique-fail.",
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if queue == "" || kind == "" {
				return usagef("--queue and --kind are required")
			}
			sources := 0
			for _, set := range []bool{cmd.Flags().Changed("payload"), payloadFile != "", payloadStdin} {
				if set {
					sources++
				}
			}
			if sources > 1 {
				return usagef("give at most one of --payload, --payload-file, --payload-stdin")
			}
			var err error
			if opts.Metadata, err = parseKeyValues("meta", meta); err != nil {
				return usagef("%v", err)
			}
			if opts.RunAfter < 0 {
				return usagef("--run-after must not be negative")
			}
			if opts.Unique, err = unique.options(); err != nil {
				return usagef("%v", err)
			}
			body, err := c.readPayload(payload, payloadFile, payloadStdin)
			if err != nil {
				return err
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.CreateJob(ctx, queue, kind, body, &opts)
				if err != nil {
					return err
				}
				pairs := jobFields(resp.GetJob())
				switch {
				case resp.GetReplayed():
					pairs = append([][2]string{{"Replayed", "yes: this request id was used before; nothing new was created"}}, pairs...)
				case resp.GetDuplicate():
					pairs = append([][2]string{{"Duplicate", "yes: this job holds the unique key; nothing new was created"}}, pairs...)
				}
				return out.show(resp, pairs)
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&queue, "queue", "", "queue to put the job in (required)")
	fs.StringVar(&kind, "kind", "", "job kind; workers dispatch on it (required)")
	fs.StringVar(&payload, "payload", "", "payload as a string")
	fs.StringVar(&payloadFile, "payload-file", "", "read the payload from this file")
	fs.BoolVar(&payloadStdin, "payload-stdin", false, "read the payload from standard input")
	fs.StringVar(&opts.RequestID, "request-id", "", "idempotency key: the same key and request return the original job")
	fs.Int32Var(&opts.Priority, "priority", 0, "higher is claimed first, in [-1000, 1000]")
	fs.DurationVar(&opts.RunAfter, "run-after", 0, "do not run before now + this duration")
	fs.Int32Var(&opts.MaxAttempts, "max-attempts", 0, "attempt budget; 0 = the queue's")
	fs.StringArrayVar(&meta, "meta", nil, "metadata `key=value`; repeatable")
	fs.StringVar(&opts.Dependency, "dependency", "", "external dependency the job needs (circuit breakers)")
	fs.StringVar(&opts.ConcurrencyKey, "concurrency-key", "", "group for the queue's per-key limits (e.g. a customer id)")
	unique.register(fs)
	return cmd
}

// uniqueFlags are job create's unique-job flags.
type uniqueFlags struct {
	key    string
	byMeta []string
	period time.Duration
	fail   bool
}

func (u *uniqueFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&u.key, "unique-key", "", "unique key: while a job with it is live, answer that job instead")
	fs.StringArrayVar(&u.byMeta, "unique-by-meta", nil, "derive the unique key from the kind and this metadata `key`'s value; repeatable")
	fs.DurationVar(&u.period, "unique-period", 0, "hold the unique key this long after the job's creation, finished or not")
	fs.BoolVar(&u.fail, "unique-fail", false, "fail (ALREADY_EXISTS) instead of answering the job that holds the key")
}

// options are the flags as the request's unique options; nil when no
// unique flag is set.
func (u *uniqueFlags) options() (*leaseholdv1.UniqueOptions, error) {
	if u.key == "" && len(u.byMeta) == 0 {
		if u.period != 0 || u.fail {
			return nil, errors.New("--unique-period and --unique-fail need --unique-key or --unique-by-meta")
		}
		return nil, nil
	}
	o := &leaseholdv1.UniqueOptions{Key: u.key, ByMetadataKeys: u.byMeta}
	if u.period != 0 {
		o.Period = durationpb.New(u.period)
	}
	if u.fail {
		o.OnConflict = leaseholdv1.UniqueOptions_ON_CONFLICT_FAIL
	}
	return o, nil
}

// readPayload returns the payload from the one source given.
func (c *cli) readPayload(payload, file string, stdin bool) ([]byte, error) {
	switch {
	case file != "":
		f, err := os.Open(file)
		if err != nil {
			return nil, fmt.Errorf("read payload: %w", err)
		}
		defer func() { _ = f.Close() }() // read only: a failed close loses nothing
		b, err := readLimited(f)
		if err != nil {
			return nil, fmt.Errorf("read payload from %s: %w", file, err)
		}
		return b, nil
	case stdin:
		b, err := readLimited(c.stdin)
		if err != nil {
			return nil, fmt.Errorf("read payload from standard input: %w", err)
		}
		return b, nil
	default:
		return []byte(payload), nil
	}
}

// readLimited reads all of r, failing past payloadReadLimit.
func readLimited(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, payloadReadLimit+1))
	if err != nil {
		return nil, err
	}
	if len(b) > payloadReadLimit {
		return nil, fmt.Errorf("larger than %d bytes", payloadReadLimit)
	}
	return b, nil
}

func (c *cli) jobGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show one job",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				job, err := client.Get(ctx, args[0])
				if err != nil {
					return err
				}
				return out.show(&leaseholdv1.GetJobResponse{Job: job}, jobFields(job))
			})
		},
	}
}

func (c *cli) jobListCommand() *cobra.Command {
	var (
		req    leaseholdv1.ListJobsRequest
		states commaList
		pages  pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list [--queue Q] [--state S ...] [--kind K] [--filter F] [--limit N] [--page-token T]",
		Short: "List jobs, newest first, one page at a time",
		Long: `List jobs, newest first, one page at a time.

--filter selects jobs by a filter string (docs/filters.md), ANDed with
--queue, --state and --kind, e.g.

  leasehold job list --filter 'queue = "emails" AND state:(QUEUED, LEASED) AND metadata.customer = "42"'
  leasehold job list --filter 'error_code = "TIMEOUT" AND finished >= "2026-12-01T00:00:00Z"'`,
		Args: positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.PageSize, req.PageToken, err = pages.request(); err != nil {
				return err
			}
			// The table shows no payloads: BASIC pages stay small however
			// large the jobs are (job get shows one job whole).
			req.View = leaseholdv1.JobView_JOB_VIEW_BASIC
			for _, s := range states {
				st, err := parseJobState(s)
				if err != nil {
					return usagef("%v", err)
				}
				req.States = append(req.States, st)
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.List(ctx, &req)
				if err != nil {
					return err
				}
				return out.list(page{resp: resp, header: jobHeader, rows: rows(resp.GetJobs(), jobRow), nextPageToken: resp.GetNextPageToken()})
			})
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&req.Queue, "queue", "", "only this queue")
	fs.Var(&states, "state", "only jobs in this `state` (queued, leased, succeeded, failed, cancelled, dead); repeatable or comma-separated")
	fs.StringVar(&req.Kind, "kind", "", "only this kind")
	fs.StringVar(&req.Filter, "filter", "", "only jobs this `filter` selects (docs/filters.md), e.g. 'metadata.customer = \"42\" AND created >= \"2026-12-01T00:00:00Z\"'")
	pages.add(fs)
	_ = cmd.RegisterFlagCompletionFunc("state", cobra.FixedCompletions(
		[]string{"queued", "leased", "succeeded", "failed", "cancelled", "dead"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// parseJobState accepts a state in any case, with or without the
// JOB_STATE_ prefix ("queued", "DEAD", "job_state_leased").
func parseJobState(s string) (leaseholdv1.JobState, error) {
	name := strings.ToUpper(strings.TrimSpace(s))
	if !strings.HasPrefix(name, "JOB_STATE_") {
		name = "JOB_STATE_" + name
	}
	v, ok := leaseholdv1.JobState_value[name]
	if !ok || v == int32(leaseholdv1.JobState_JOB_STATE_UNSPECIFIED) {
		return 0, fmt.Errorf("unknown state %q: want queued, leased, succeeded, failed, cancelled or dead", s)
	}
	return leaseholdv1.JobState(v), nil
}

func (c *cli) jobCancelCommand() *cobra.Command {
	var bulk bulkFlags
	cmd := &cobra.Command{
		Use:   "cancel (ID | --filter F [--dry-run] [--wait]) [--reason R]",
		Short: "Cancel a job, or every job a filter matches",
		Long: "Cancel a job. A queued job is cancelled at once; a leased one is marked cancel-requested and its worker told to stop.\n" +
			"With --filter instead of an ID, cancel every queued or leased job the filter matches, as a bulk operation (op get/wait).",
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			byFilter, err := bulk.byFilter(cmd, args)
			if err != nil {
				return err
			}
			if byFilter {
				return c.runBulk(cmd, worker.BulkCancel, bulk, worker.BulkRequest{})
			}
			if args[0] == "" {
				return usagef("ID must not be empty")
			}
			reason := bulk.reason
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				job, err := client.Cancel(ctx, args[0], reason)
				if err != nil {
					return err
				}
				resp := &leaseholdv1.CancelJobResponse{Job: job}
				if job.GetState() == leaseholdv1.JobState_JOB_STATE_CANCELLED {
					return out.say(resp, "%s cancelled", job.GetId())
				}
				return out.say(resp, "%s cancel requested: its worker (%s) has been told to stop", job.GetId(), job.GetLease().GetOwner())
			})
		},
	}
	bulk.register(cmd.Flags(), "why, recorded in the job's history")
	return cmd
}

func (c *cli) jobRetryCommand() *cobra.Command {
	return c.bulkCommand(worker.BulkRetry, "retry --filter F [--dry-run] [--wait] [--reason R]",
		"Make waiting queued jobs available now",
		"Make every queued job the filter matches that waits (for its retry backoff, or scheduled later) available now,\n"+
			"as a bulk operation (op get/wait).", nil)
}

func (c *cli) jobDeleteCommand() *cobra.Command {
	return c.bulkCommand(worker.BulkDelete, "delete --filter F [--dry-run] [--wait] [--reason R]",
		"Delete finished jobs",
		"Delete every finished job (succeeded, failed, cancelled, dead) the filter matches, with its history, as retention\n"+
			"would, as a bulk operation (op get/wait). Live jobs are never deleted.", nil)
}

func (c *cli) jobPriorityCommand() *cobra.Command {
	return c.bulkCommand(worker.BulkSetPriority, "priority --filter F --priority N [--dry-run] [--wait] [--reason R]",
		"Set the priority of queued jobs",
		"Set the priority of every queued job the filter matches (higher is claimed first), as a bulk operation (op get/wait).",
		func(cmd *cobra.Command, req *worker.BulkRequest) {
			cmd.Flags().Int32Var(&req.Priority, "priority", 0, "the new priority")
			_ = cmd.MarkFlagRequired("priority")
		})
}

func (c *cli) jobEventsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "events ID",
		Short: "Show a job's history, oldest first",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				// Every page, so the output is the whole history whatever
				// its length.
				events, err := client.Events(ctx, args[0])
				if err != nil {
					return err
				}
				return out.list(page{resp: &leaseholdv1.ListJobEventsResponse{Events: events}, header: eventHeader, rows: rows(events, eventRow)})
			})
		},
	}
}

func (c *cli) jobWatchCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "watch ID",
		Short: "Follow a job's events until it is final",
		Long: "Print a job's events as they happen until it reaches a terminal state. " +
			"Not bounded by --timeout unless it is given; a broken stream is resumed after the last event printed.",
		Args: positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.follow(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				// Rows are printed as they arrive, so the columns are fixed
				// widths rather than tabwriter's (which needs every row first).
				const watchRow = "%-4s  %-20s  %-16s  %s\n"
				if !out.json {
					fmt.Fprintf(out.w, watchRow, eventHeader[0], eventHeader[1], eventHeader[2], eventHeader[3])
				}
				// Watch returns nil after the terminal event.
				return client.Watch(ctx, args[0], func(e *leaseholdv1.Event) error {
					if out.json {
						return out.line(&leaseholdv1.WatchJobResponse{Event: e})
					}
					r := eventRow(e)
					_, err := fmt.Fprintf(out.w, watchRow, r[0], r[1], r[2], r[3])
					return err
				})
			})
		},
	}
}
