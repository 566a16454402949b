package main

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/worker"
)

func (c *cli) scheduleCommand() *cobra.Command {
	return c.group("schedule", "Create, list, change, pause, resume, delete and trigger schedules; their runs",
		c.scheduleCreateCommand(),
		c.scheduleGetCommand(),
		c.scheduleListCommand(),
		c.scheduleUpdateCommand(),
		c.schedulePauseCommand(),
		c.scheduleResumeCommand(),
		c.scheduleDeleteCommand(),
		c.scheduleTriggerCommand(),
		c.scheduleRunsCommand(),
	)
}

// scheduleSpecFlags are the definition flags of `schedule create` and
// `schedule update`; on update, a flag given replaces that field of the
// current definition.
type scheduleSpecFlags struct {
	queue, kind, payload, cron, zone, catchUp, overlap string
	meta                                               []string
	priority, maxAttempts, catchUpMax                  int32
	every, jitter, grace, window                       time.Duration
	start, end                                         string
}

func (f *scheduleSpecFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.queue, "queue", "", "queue of the jobs it creates")
	fs.StringVar(&f.kind, "kind", "", "kind of the jobs it creates")
	fs.StringVar(&f.payload, "payload", "", "payload of every job, as a string")
	fs.StringArrayVar(&f.meta, "meta", nil, "metadata `key=value` of every job; repeatable")
	fs.Int32Var(&f.priority, "priority", 0, "priority of every job, in [-1000, 1000]")
	fs.Int32Var(&f.maxAttempts, "max-attempts", 0, "attempt budget of every job; 0 = the queue's")
	fs.StringVar(&f.cron, "cron", "", "cron expression: 5 fields, or 6 with seconds first (\"0 2 * * *\", \"@hourly\")")
	fs.StringVar(&f.zone, "time-zone", "", "IANA time zone of --cron (\"Europe/Paris\"); default UTC")
	fs.DurationVar(&f.every, "every", 0, "fixed interval instead of --cron, at least 1s")
	fs.StringVar(&f.start, "start", "", "no tick before this RFC 3339 time")
	fs.StringVar(&f.end, "end", "", "no tick after this RFC 3339 time")
	fs.DurationVar(&f.jitter, "jitter", 0, "delay each job by up to this much (fixed per tick)")
	fs.StringVar(&f.catchUp, "catch-up", "", "late ticks: skip, one (default) or all")
	fs.DurationVar(&f.grace, "misfire-grace", 0, "how late a tick may fire and still be on time; default 1m")
	fs.DurationVar(&f.window, "catch-up-window", 0, "with --catch-up all: how far back late ticks fire; default 24h")
	fs.Int32Var(&f.catchUpMax, "catch-up-max", 0, "with --catch-up all: at most this many late ticks fire; default 100")
	fs.StringVar(&f.overlap, "overlap", "", "while the previous run is live: allow (default), skip or cancel-previous")
}

var (
	catchUpNames = map[string]leaseholdv1.CatchUpPolicy{
		"skip": leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_SKIP,
		"one":  leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_ONE,
		"all":  leaseholdv1.CatchUpPolicy_CATCH_UP_POLICY_ALL,
	}
	overlapNames = map[string]leaseholdv1.OverlapPolicy{
		"allow":           leaseholdv1.OverlapPolicy_OVERLAP_POLICY_ALLOW,
		"skip":            leaseholdv1.OverlapPolicy_OVERLAP_POLICY_SKIP,
		"cancel-previous": leaseholdv1.OverlapPolicy_OVERLAP_POLICY_CANCEL_PREVIOUS,
	}
)

// apply sets the fields of the flags given on s and reports whether any
// was; the server validates the values.
func (f *scheduleSpecFlags) apply(fs *pflag.FlagSet, s *leaseholdv1.ScheduleSpec) (bool, error) {
	changed := false
	var err error
	fs.Visit(func(fl *pflag.Flag) {
		if err != nil {
			return
		}
		known := true
		switch fl.Name {
		case "queue":
			s.Queue = f.queue
		case "kind":
			s.Kind = f.kind
		case "payload":
			s.Payload = []byte(f.payload)
		case "meta":
			s.Metadata, err = parseKeyValues("meta", f.meta)
		case "priority":
			s.Priority = f.priority
		case "max-attempts":
			s.MaxAttempts = f.maxAttempts
		case "cron":
			s.Cron, s.Interval = f.cron, nil
		case "time-zone":
			s.TimeZone = f.zone
		case "every":
			s.Interval, s.Cron, s.TimeZone = durationpb.New(f.every), "", ""
		case "start":
			s.StartTime, err = optionalTime("--start", f.start)
		case "end":
			s.EndTime, err = optionalTime("--end", f.end)
		case "jitter":
			s.Jitter = durationpb.New(f.jitter)
		case "catch-up":
			p, ok := catchUpNames[f.catchUp]
			if !ok {
				err = usagef("--catch-up must be skip, one or all")
			}
			s.CatchUp = p
		case "misfire-grace":
			s.MisfireGrace = durationpb.New(f.grace)
		case "catch-up-window":
			s.CatchUpWindow = durationpb.New(f.window)
		case "catch-up-max":
			s.CatchUpMax = f.catchUpMax
		case "overlap":
			p, ok := overlapNames[f.overlap]
			if !ok {
				err = usagef("--overlap must be allow, skip or cancel-previous")
			}
			s.Overlap = p
		default:
			known = false // a global or command flag, not the definition's
		}
		changed = changed || known
	})
	return changed, err
}

func optionalTime(flag, v string) (*timestamppb.Timestamp, error) {
	if v == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, usagef("%s must be an RFC 3339 time such as 2030-01-02T15:04:05Z", flag)
	}
	return timestamppb.New(t), nil
}

func (c *cli) scheduleCreateCommand() *cobra.Command {
	var (
		sf     scheduleSpecFlags
		paused bool
	)
	cmd := &cobra.Command{
		Use:   "create NAME --queue Q --kind K (--cron EXPR [--time-zone TZ] | --every D) [flags]",
		Short: "Create a schedule: a job at each tick of a cron expression or a fixed interval",
		Args:  positional("NAME"),
		RunE: func(cmd *cobra.Command, args []string) error {
			spec := &leaseholdv1.ScheduleSpec{}
			if _, err := sf.apply(cmd.Flags(), spec); err != nil {
				return err
			}
			if spec.GetQueue() == "" || spec.GetKind() == "" {
				return usagef("--queue and --kind are required")
			}
			if (spec.GetCron() == "") == (spec.GetInterval() == nil) {
				return usagef("give one of --cron and --every")
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				sc, err := client.CreateSchedule(ctx, args[0], spec, paused)
				if err != nil {
					return err
				}
				return out.show(&leaseholdv1.CreateScheduleResponse{Schedule: sc}, scheduleFields(sc))
			})
		},
	}
	sf.register(cmd.Flags())
	cmd.Flags().BoolVar(&paused, "paused", false, "create it paused")
	return cmd
}

func (c *cli) scheduleGetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "get SCHEDULE",
		Short: "Show a schedule (by id or name)",
		Args:  positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				sc, err := client.GetSchedule(ctx, args[0])
				if err != nil {
					return err
				}
				return out.show(&leaseholdv1.GetScheduleResponse{Schedule: sc}, scheduleFields(sc))
			})
		},
	}
}

func (c *cli) scheduleListCommand() *cobra.Command {
	var (
		queue string
		pf    pageFlags
	)
	cmd := &cobra.Command{
		Use:   "list [--queue Q]",
		Short: "List schedules by name",
		Args:  positional(),
		RunE: func(cmd *cobra.Command, _ []string) error {
			size, token, err := pf.request()
			if err != nil {
				return err
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				resp, err := client.ListSchedules(ctx, &leaseholdv1.ListSchedulesRequest{Queue: queue, PageSize: size, PageToken: token})
				if err != nil {
					return err
				}
				return out.list(page{resp: resp, header: scheduleHeader, rows: rows(resp.GetSchedules(), scheduleRow),
					nextPageToken: resp.GetNextPageToken(), empty: "no schedules"})
			})
		},
	}
	cmd.Flags().StringVar(&queue, "queue", "", "only this queue's schedules")
	pf.add(cmd.Flags())
	return cmd
}

func (c *cli) scheduleUpdateCommand() *cobra.Command {
	var sf scheduleSpecFlags
	cmd := &cobra.Command{
		Use:   "update SCHEDULE [flags]",
		Short: "Change a schedule's definition; its next tick is recomputed from now",
		Long: "Change a schedule's definition. The current definition is read first and only the flags given are changed; " +
			"the next tick is the first after now (past ticks never fire again).",
		Args: positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if changed, err := sf.apply(cmd.Flags(), &leaseholdv1.ScheduleSpec{}); err != nil {
				return err
			} else if !changed {
				return usagef("nothing to change: give at least one definition flag")
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				cur, err := client.GetSchedule(ctx, args[0])
				if err != nil {
					return err
				}
				spec := proto.CloneOf(cur.GetSpec())
				if _, err := sf.apply(cmd.Flags(), spec); err != nil {
					return err
				}
				sc, err := client.UpdateSchedule(ctx, cur.GetId(), spec)
				if err != nil {
					return err
				}
				return out.show(&leaseholdv1.UpdateScheduleResponse{Schedule: sc}, scheduleFields(sc))
			})
		},
	}
	sf.register(cmd.Flags())
	return cmd
}

func (c *cli) schedulePauseCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "pause SCHEDULE [--reason TEXT]",
		Short: "Stop a schedule from firing",
		Args:  positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				sc, err := client.PauseSchedule(ctx, args[0], reason)
				if err != nil {
					return err
				}
				return out.say(&leaseholdv1.PauseScheduleResponse{Schedule: sc}, "schedule %s paused", sc.GetName())
			})
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (shown by schedule get)")
	return cmd
}

func (c *cli) scheduleResumeCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "resume SCHEDULE",
		Short: "Let a paused schedule fire again (ticks while paused are not caught up)",
		Args:  positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				sc, err := client.ResumeSchedule(ctx, args[0])
				if err != nil {
					return err
				}
				return out.say(&leaseholdv1.ResumeScheduleResponse{Schedule: sc}, "schedule %s resumed; next tick %s",
					sc.GetName(), formatTime(sc.GetNextTickTime()))
			})
		},
	}
}

func (c *cli) scheduleDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete SCHEDULE",
		Short: "Delete a schedule and its runs (its jobs stay)",
		Args:  positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				if err := client.DeleteSchedule(ctx, args[0]); err != nil {
					return err
				}
				return out.say(&leaseholdv1.DeleteScheduleResponse{}, "schedule %s deleted", args[0])
			})
		},
	}
}

func (c *cli) scheduleTriggerCommand() *cobra.Command {
	var requestID string
	cmd := &cobra.Command{
		Use:   "trigger SCHEDULE [--request-id ID]",
		Short: "Fire a schedule now, once, without moving its next tick",
		Args:  positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				run, err := client.TriggerSchedule(ctx, args[0], requestID)
				if err != nil {
					return err
				}
				return out.say(&leaseholdv1.TriggerScheduleResponse{Run: run}, "schedule %s triggered: job %s", args[0], run.GetJobId())
			})
		},
	}
	cmd.Flags().StringVar(&requestID, "request-id", "", "idempotency key: the same key fires once")
	return cmd
}

func (c *cli) scheduleRunsCommand() *cobra.Command {
	var limit int32
	cmd := &cobra.Command{
		Use:   "runs SCHEDULE [--limit N]",
		Short: "List a schedule's newest runs: ticks fired (with their jobs), skipped and missed",
		Args:  positional("SCHEDULE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if limit < 0 {
				return usagef("--limit must not be negative")
			}
			return c.call(cmd, func(ctx context.Context, client *worker.Client, out *printer) error {
				runs, err := client.ScheduleRuns(ctx, args[0], limit)
				if err != nil {
					return err
				}
				return out.list(page{resp: &leaseholdv1.ListScheduleRunsResponse{Runs: runs}, header: scheduleRunHeader,
					rows: rows(runs, scheduleRunRow), empty: "no runs yet"})
			})
		},
	}
	cmd.Flags().Int32Var(&limit, "limit", 0, "at most this many; 0 = 20, at most 100")
	return cmd
}

var (
	scheduleHeader    = []string{"NAME", "QUEUE", "KIND", "SPEC", "NEXT TICK", "STATE", "ID"}
	scheduleRunHeader = []string{"TICK", "OUTCOME", "JOB", "MISSED", "REASON"}
)

func scheduleSpecText(s *leaseholdv1.ScheduleSpec) string {
	if s.GetCron() != "" {
		zone := s.GetTimeZone()
		if zone == "" {
			zone = "UTC"
		}
		return s.GetCron() + " (" + zone + ")"
	}
	return "every " + formatDuration(s.GetInterval())
}

func scheduleState(sc *leaseholdv1.Schedule) string {
	if sc.GetPaused() {
		return "paused: " + sc.GetPausedReason()
	}
	if sc.GetNextTickTime() == nil {
		return "ended"
	}
	return "active"
}

func scheduleRow(sc *leaseholdv1.Schedule) []string {
	return []string{sc.GetName(), sc.GetSpec().GetQueue(), sc.GetSpec().GetKind(), scheduleSpecText(sc.GetSpec()),
		formatTime(sc.GetNextTickTime()), scheduleState(sc), sc.GetId()}
}

func scheduleFields(sc *leaseholdv1.Schedule) [][2]string {
	s := sc.GetSpec()
	return [][2]string{
		{"id", sc.GetId()},
		{"name", sc.GetName()},
		{"queue", s.GetQueue()},
		{"kind", s.GetKind()},
		{"spec", scheduleSpecText(s)},
		{"state", scheduleState(sc)},
		{"next tick", formatTime(sc.GetNextTickTime())},
		{"last tick", formatTime(sc.GetLastTickTime())},
		{"last job", sc.GetLastJobId()},
		{"start", formatTime(s.GetStartTime())},
		{"end", formatTime(s.GetEndTime())},
		{"jitter", formatDuration(s.GetJitter())},
		{"catch-up", strings.ToLower(strings.TrimPrefix(s.GetCatchUp().String(), "CATCH_UP_POLICY_")) +
			" (grace " + formatDuration(s.GetMisfireGrace()) + ", window " + formatDuration(s.GetCatchUpWindow()) +
			", max " + strconv.Itoa(int(s.GetCatchUpMax())) + ")"},
		{"overlap", strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(s.GetOverlap().String(), "OVERLAP_POLICY_")), "_", "-")},
		{"metadata", formatMeta(s.GetMetadata())},
		{"owner", sc.GetOwner()},
		{"created", formatTime(sc.GetCreateTime())},
	}
}

func scheduleRunRow(r *leaseholdv1.ScheduleRun) []string {
	missed := ""
	if r.GetMissedTicks() > 0 {
		missed = strconv.FormatInt(r.GetMissedTicks(), 10)
	}
	return []string{formatTime(r.GetTickTime()), strings.ToLower(strings.TrimPrefix(r.GetOutcome().String(), "SCHEDULE_RUN_OUTCOME_")),
		r.GetJobId(), missed, r.GetReason()}
}
