package main

// Bulk operations: `job cancel|retry|delete|priority --filter`, `dlq
// replay|abandon --filter` and `op list|get|cancel|wait`. A bulk command
// with --dry-run prints how many jobs match and a sample; without it, it
// starts an operation and prints it (with --wait, it follows it to the end,
// with a progress bar when stdout is a terminal).

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

// bulkFlags are the flags every bulk command takes.
type bulkFlags struct {
	filter string
	dryRun bool
	reason string
	wait   bool
}

// byFilter says whether a command that takes one job ID or --filter acts
// by the filter (a bulk operation), and refuses an ID with a filter, no
// ID without one, and the bulk-only flags with an ID.
func (f *bulkFlags) byFilter(cmd *cobra.Command, args []string) (bool, error) {
	if f.filter != "" || len(args) == 0 {
		switch {
		case len(args) > 0:
			return false, usagef("give a job ID or --filter, not both")
		case !cmd.Flags().Changed("filter"):
			return false, usagef("missing ID (or --filter F for every matching job)")
		}
		return true, nil
	}
	if f.dryRun || f.wait {
		return false, usagef("--dry-run and --wait go with --filter")
	}
	return false, nil
}

func (f *bulkFlags) register(fs *pflag.FlagSet, reasonHelp string) {
	fs.StringVar(&f.filter, "filter", "", "which jobs: the ListJobs filter grammar, e.g. 'queue = emails AND error_code = SMTP_DOWN'")
	fs.BoolVar(&f.dryRun, "dry-run", false, "only count the matching jobs and show a few; change nothing")
	fs.StringVar(&f.reason, "reason", "", reasonHelp)
	fs.BoolVar(&f.wait, "wait", false, "follow the operation until it is done (op wait)")
}

// bulkCommand is one bulk command: kind, its use and help.
func (c *cli) bulkCommand(kind worker.BulkKind, use, short, long string, extra func(*cobra.Command, *worker.BulkRequest)) *cobra.Command {
	var f bulkFlags
	var req worker.BulkRequest
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return c.runBulk(cmd, kind, f, req)
		},
	}
	f.register(cmd.Flags(), "why, recorded in each job's history and the audit log")
	if extra != nil {
		extra(cmd, &req)
	}
	return cmd
}

// runBulk validates the flags and runs a bulk call.
func (c *cli) runBulk(cmd *cobra.Command, kind worker.BulkKind, f bulkFlags, req worker.BulkRequest) error {
	if strings.TrimSpace(f.filter) == "" {
		return usagef("--filter is required (e.g. --filter 'queue = emails')")
	}
	if f.dryRun && f.wait {
		return usagef("--wait follows an operation: a --dry-run starts none")
	}
	req.Filter, req.DryRun, req.Reason = f.filter, f.dryRun, f.reason
	var started *leaseholdv1.Operation
	err := c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
		res, err := client.Bulk(ctx, kind, req)
		if err != nil {
			return err
		}
		if res.DryRun != nil {
			return printDryRun(out, res.DryRun)
		}
		started = res.Operation
		if f.wait {
			return nil
		}
		return printOperation(out, started)
	})
	if err != nil || started == nil || !f.wait {
		return err
	}
	return c.waitOperation(cmd, started.GetName(), 0)
}

func printDryRun(out *printer, d *leaseholdv1.BulkDryRun) error {
	if out.json {
		return out.message(d)
	}
	n := strconv.FormatInt(d.GetCount(), 10)
	if d.GetCapped() {
		n = "at least " + n
	}
	fmt.Fprintf(out.w, "%s jobs match (dry run: nothing changed)\n", n)
	if len(d.GetSample()) == 0 {
		return nil
	}
	fmt.Fprintln(out.w)
	return out.table(jobHeader, rows(d.GetSample(), jobRow))
}

// operationState is a state's short name.
func operationState(s leaseholdv1.OperationState) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "OPERATION_STATE_"))
}

func operationKind(k leaseholdv1.OperationKind) string {
	return strings.ToLower(strings.TrimPrefix(k.String(), "OPERATION_KIND_"))
}

func operationFields(o *leaseholdv1.Operation) [][2]string {
	n := o.GetCounts()
	pairs := [][2]string{
		{"ID", o.GetId()},
		{"Kind", operationKind(o.GetKind())},
		{"State", operationState(o.GetState())},
		{"Filter", o.GetFilter()},
		{"Reason", o.GetReason()},
		{"Actor", o.GetActor()},
		{"Queue scope", strings.Join(o.GetQueueScope(), ", ")},
		{"Created", formatTime(o.GetCreateTime())},
		{"Updated", formatTime(o.GetUpdateTime())},
		{"Finished", formatTime(o.GetFinishTime())},
		{"Matched", strconv.FormatInt(n.GetMatched(), 10)},
		{"Acted", strconv.FormatInt(n.GetActed(), 10)},
		{"Skipped (changed)", strconv.FormatInt(n.GetSkippedChanged(), 10)},
		{"Skipped (out of scope)", strconv.FormatInt(n.GetSkippedOutOfScope(), 10)},
		{"Failed", strconv.FormatInt(n.GetFailed(), 10)},
		{"Remaining", strconv.FormatInt(n.GetRemaining(), 10)},
		{"Error", o.GetError()},
	}
	if o.GetKind() == leaseholdv1.OperationKind_OPERATION_KIND_SET_PRIORITY {
		pairs = append(pairs, [2]string{"Priority", strconv.Itoa(int(o.GetPriority()))})
	}
	if o.GetCancelRequested() && !o.GetDone() {
		pairs = append(pairs, [2]string{"Cancel requested", "yes"})
	}
	return pairs
}

func printOperation(out *printer, o *leaseholdv1.Operation) error {
	return out.show(&leaseholdv1.GetOperationResponse{Operation: o}, operationFields(o))
}

var operationHeader = []string{"ID", "KIND", "STATE", "MATCHED", "ACTED", "SKIPPED", "FAILED", "CREATED", "FILTER"}

func operationRow(o *leaseholdv1.Operation) []string {
	n := o.GetCounts()
	return []string{
		o.GetId(), operationKind(o.GetKind()), operationState(o.GetState()),
		strconv.FormatInt(n.GetMatched(), 10), strconv.FormatInt(n.GetActed(), 10),
		strconv.FormatInt(n.GetSkippedChanged()+n.GetSkippedOutOfScope(), 10), strconv.FormatInt(n.GetFailed(), 10),
		formatTime(o.GetCreateTime()), o.GetFilter(),
	}
}

func (c *cli) opCommand() *cobra.Command {
	return c.group("op", "List, show, cancel and wait for bulk operations",
		c.opListCommand(),
		c.opGetCommand(),
		c.opCancelCommand(),
		c.opWaitCommand(),
	)
}

func (c *cli) opListCommand() *cobra.Command {
	var (
		req   leaseholdv1.ListOperationsRequest
		pages pageFlags
		state string
	)
	cmd := &cobra.Command{
		Use:   "list [--state S] [--limit N] [--page-token T]",
		Short: "List bulk operations, newest first",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if req.PageSize, req.PageToken, err = pages.request(); err != nil {
				return err
			}
			if state != "" {
				v, ok := leaseholdv1.OperationState_value["OPERATION_STATE_"+strings.ToUpper(state)]
				if !ok {
					return usagef("--state must be running, succeeded, cancelled or failed")
				}
				req.State = leaseholdv1.OperationState(v)
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.ListOperations(ctx, &req)
				if err != nil {
					return err
				}
				return out.list(page{resp: resp, header: operationHeader, rows: rows(resp.GetOperations(), operationRow),
					nextPageToken: resp.GetNextPageToken(), empty: "no operations"})
			})
		},
	}
	cmd.Flags().StringVar(&state, "state", "", "only operations in this state: running, succeeded, cancelled or failed")
	pages.add(cmd.Flags())
	return cmd
}

func (c *cli) opGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get ID",
		Short: "Show a bulk operation and its counts",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				o, err := client.GetOperation(ctx, args[0])
				if err != nil {
					return err
				}
				return printOperation(out, o)
			})
		},
	}
}

func (c *cli) opCancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel ID",
		Short: "Stop a bulk operation after its current chunk",
		Long:  "Stop a bulk operation after its current chunk: what it did stays done.",
		Args:  positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				o, err := client.CancelOperation(ctx, args[0])
				if err != nil {
					return err
				}
				return printOperation(out, o)
			})
		},
	}
}

func (c *cli) opWaitCommand() *cobra.Command {
	var within time.Duration
	cmd := &cobra.Command{
		Use:   "wait ID [--within D]",
		Short: "Follow a bulk operation until it is done",
		Long: "Follow a bulk operation until it is done, with a progress bar when stdout is a terminal, then show it.\n" +
			"Exits non-zero when it failed or was cancelled, or when --within passes first.",
		Args: positional("ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.waitOperation(cmd, args[0], within)
		},
	}
	cmd.Flags().DurationVar(&within, "within", 0, "give up after this long (0 = wait as long as it runs)")
	return cmd
}

// waitOperation follows an operation with repeated bounded waits until it
// is done, then prints it.
func (c *cli) waitOperation(cmd *cobra.Command, name string, within time.Duration) error {
	return c.follow(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
		if within > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, within)
			defer cancel()
		}
		bar := newOperationBar(out)
		for {
			o, err := client.WaitOperation(ctx, name, time.Second)
			if err != nil {
				return err
			}
			bar.update(o)
			if !o.GetDone() {
				continue
			}
			bar.finish()
			if err := printOperation(out, o); err != nil {
				return err
			}
			if s := o.GetState(); s != leaseholdv1.OperationState_OPERATION_STATE_SUCCEEDED {
				return fmt.Errorf("operation %s %s", o.GetId(), operationState(s))
			}
			return nil
		}
	})
}

// operationBar draws an operation's progress on a terminal; elsewhere (a
// pipe, a file, --output json) it draws nothing.
type operationBar struct {
	bar *progressbar.ProgressBar
}

func newOperationBar(out *printer) *operationBar {
	f, ok := out.w.(*os.File)
	if out.json || !ok || (!isatty.IsTerminal(f.Fd()) && !isatty.IsCygwinTerminal(f.Fd())) {
		return &operationBar{}
	}
	return &operationBar{bar: progressbar.NewOptions64(-1,
		progressbar.OptionSetWriter(io.Writer(os.Stderr)),
		progressbar.OptionSetDescription("jobs"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("jobs"),
		progressbar.OptionClearOnFinish(),
	)}
}

func (b *operationBar) update(o *leaseholdv1.Operation) {
	if b.bar == nil {
		return
	}
	n := o.GetCounts()
	b.bar.ChangeMax64(n.GetMatched())
	_ = b.bar.Set64(n.GetMatched() - n.GetRemaining())
}

func (b *operationBar) finish() {
	if b.bar != nil {
		_ = b.bar.Finish()
	}
}
