package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// payloadReadLimit bounds what --payload-file and --payload-stdin read. It
// is above the server's default payload limit so that the server, which
// knows its configured limit, is the one that rejects an oversized payload,
// while a runaway pipe cannot exhaust the CLI's memory.
const payloadReadLimit = 64 << 20

func (c *cli) runJob(ctx context.Context, args []string) int {
	return c.dispatch(ctx, "job", args, []subcommand{
		{"create", "--queue Q --kind K [--payload S | --payload-file F | --payload-stdin] [flags]",
			"Create a job. With --request-id the create is idempotent: repeating it returns the original job.", c.jobCreate},
		{"get", "ID", "Show one job.", c.jobGet},
		{"list", "[--queue Q] [--state S ...] [--kind K] [--limit N] [--page-token T]",
			"List jobs, newest first, one page at a time.", c.jobList},
		{"cancel", "ID [--reason R]",
			"Cancel a job. A queued job is cancelled at once; a leased one is marked cancel-requested and its worker told to stop.", c.jobCancel},
		{"events", "ID", "Show a job's history, oldest first.", c.jobEvents},
		{"watch", "ID", "Print a job's events as they happen until it reaches a terminal state. Not bounded by --timeout unless it is given.", c.jobWatch},
	})
}

func (c *cli) jobCreate(ctx context.Context, cmd *command, args []string) error {
	var (
		queue, kind, payload, payloadFile, requestID, dependency string
		payloadStdin                                             bool
		priority, maxAttempts                                    int
		meta                                                     stringList
	)
	fs := cmd.fs
	fs.StringVar(&queue, "queue", "", "queue to put the job in (required)")
	fs.StringVar(&kind, "kind", "", "job kind; workers dispatch on it (required)")
	fs.StringVar(&payload, "payload", "", "payload as a string")
	fs.StringVar(&payloadFile, "payload-file", "", "read the payload from this file")
	fs.BoolVar(&payloadStdin, "payload-stdin", false, "read the payload from standard input")
	fs.StringVar(&requestID, "request-id", "", "idempotency key: the same key and request return the original job")
	fs.IntVar(&priority, "priority", 0, "higher is claimed first, in [-1000, 1000]")
	runAfter := fs.Duration("run-after", 0, "do not run before now + this duration")
	fs.IntVar(&maxAttempts, "max-attempts", 0, "attempt budget; 0 = the queue's")
	fs.Var(&meta, "meta", "metadata `key=value`; repeatable")
	fs.StringVar(&dependency, "dependency", "", "external dependency the job needs (circuit breakers)")
	_, err := cmd.parseArgs(args)
	if err != nil {
		return err
	}
	if queue == "" || kind == "" {
		return cmd.usagef("--queue and --kind are required")
	}
	sources := 0
	for _, set := range []bool{cmd.isSet("payload"), payloadFile != "", payloadStdin} {
		if set {
			sources++
		}
	}
	if sources > 1 {
		return cmd.usagef("give at most one of --payload, --payload-file, --payload-stdin")
	}
	metadata, err := parseKeyValues("meta", meta.values)
	if err != nil {
		return cmd.usagef("%v", err)
	}
	if *runAfter < 0 {
		return cmd.usagef("--run-after must not be negative")
	}
	var body []byte
	switch {
	case payloadFile != "":
		f, err := os.Open(payloadFile)
		if err != nil {
			return fmt.Errorf("read payload: %w", err)
		}
		defer f.Close()
		if body, err = readLimited(f); err != nil {
			return fmt.Errorf("read payload from %s: %w", payloadFile, err)
		}
	case payloadStdin:
		if body, err = readLimited(c.stdin); err != nil {
			return fmt.Errorf("read payload from standard input: %w", err)
		}
	default:
		body = []byte(payload)
	}
	spec := &leaseholdv1.JobSpec{
		Queue:       queue,
		Kind:        kind,
		Payload:     body,
		Metadata:    metadata,
		Priority:    int32(priority),
		MaxAttempts: int32(maxAttempts),
		Dependency:  dependency,
	}
	if *runAfter > 0 {
		spec.RunAfter = durationpb.New(*runAfter)
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewJobServiceClient(conn).CreateJob(callCtx, &leaseholdv1.CreateJobRequest{Job: spec, RequestId: requestID})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	pairs := jobFields(resp.GetJob())
	if resp.GetReplayed() {
		pairs = append([][2]string{{"Replayed", "yes: this request id was used before; nothing new was created"}}, pairs...)
	}
	return out.fields(pairs)
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

func (c *cli) jobGet(ctx context.Context, cmd *command, args []string) error {
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewJobServiceClient(conn).GetJob(callCtx, &leaseholdv1.GetJobRequest{JobId: pos[0]})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	return out.fields(jobFields(resp.GetJob()))
}

func (c *cli) jobList(ctx context.Context, cmd *command, args []string) error {
	var (
		queue, kind, pageToken string
		limit                  int
		states                 = stringList{split: true}
	)
	fs := cmd.fs
	fs.StringVar(&queue, "queue", "", "only this queue")
	fs.Var(&states, "state", "only jobs in this `state` (queued, leased, succeeded, failed, cancelled, dead); repeatable or comma-separated")
	fs.StringVar(&kind, "kind", "", "only this kind")
	fs.IntVar(&limit, "limit", 0, "page size; 0 = the server's default (50), at most 500")
	fs.StringVar(&pageToken, "page-token", "", "continue from a previous page")
	_, err := cmd.parseArgs(args)
	if err != nil {
		return err
	}
	if limit < 0 {
		return cmd.usagef("--limit must not be negative")
	}
	req := &leaseholdv1.ListJobsRequest{Queue: queue, Kind: kind, PageSize: int32(min(limit, 1<<30)), PageToken: pageToken}
	for _, s := range states.values {
		st, err := parseJobState(s)
		if err != nil {
			return cmd.usagef("%v", err)
		}
		req.States = append(req.States, st)
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewJobServiceClient(conn).ListJobs(callCtx, req)
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	rows := make([][]string, len(resp.GetJobs()))
	for i, j := range resp.GetJobs() {
		rows[i] = jobRow(j)
	}
	if err := out.table(jobHeader, rows); err != nil {
		return err
	}
	if t := resp.GetNextPageToken(); t != "" {
		// On stderr so that stdout stays a clean table for pipes.
		fmt.Fprintf(c.stderr, "more: --page-token %s\n", t)
	}
	return nil
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

func (c *cli) jobCancel(ctx context.Context, cmd *command, args []string) error {
	reason := cmd.fs.String("reason", "", "why, recorded in the job's history")
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	resp, err := leaseholdv1.NewJobServiceClient(conn).CancelJob(callCtx, &leaseholdv1.CancelJobRequest{JobId: pos[0], Reason: *reason})
	if err != nil {
		return err
	}
	out := cmd.out()
	if out.json {
		return out.message(resp)
	}
	j := resp.GetJob()
	if j.GetState() == leaseholdv1.JobState_JOB_STATE_CANCELLED {
		fmt.Fprintf(out.w, "%s cancelled\n", j.GetId())
	} else {
		fmt.Fprintf(out.w, "%s cancel requested: its worker (%s) has been told to stop\n", j.GetId(), j.GetLease().GetOwner())
	}
	return nil
}

func (c *cli) jobEvents(ctx context.Context, cmd *command, args []string) error {
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	callCtx, conn, done, err := cmd.connect(ctx)
	if err != nil {
		return err
	}
	defer done()
	client := leaseholdv1.NewJobServiceClient(conn)
	// Every page, so the output is the whole history whatever its length.
	all := &leaseholdv1.ListJobEventsResponse{}
	var after int64
	for {
		resp, err := client.ListJobEvents(callCtx, &leaseholdv1.ListJobEventsRequest{JobId: pos[0], AfterSequence: after})
		if err != nil {
			return err
		}
		all.Events = append(all.Events, resp.GetEvents()...)
		if !resp.GetHasMore() || len(resp.GetEvents()) == 0 {
			break
		}
		after = resp.GetEvents()[len(resp.GetEvents())-1].GetSequence()
	}
	out := cmd.out()
	if out.json {
		return out.message(all)
	}
	rows := make([][]string, len(all.GetEvents()))
	for i, e := range all.GetEvents() {
		rows[i] = eventRow(e)
	}
	return out.table(eventHeader, rows)
}

func (c *cli) jobWatch(ctx context.Context, cmd *command, args []string) error {
	pos, err := cmd.parseArgs(args, "ID")
	if err != nil {
		return err
	}
	conn, err := cmd.dial()
	if err != nil {
		return err
	}
	defer conn.Close()
	// A watch lasts as long as the job runs, so the default per-call
	// deadline would cut it short; only an explicit --timeout bounds it.
	var (
		streamCtx context.Context
		cancel    context.CancelFunc
	)
	if cmd.isSet("timeout") && cmd.timeout > 0 {
		streamCtx, cancel = context.WithTimeout(ctx, cmd.timeout)
	} else {
		streamCtx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	stream, err := leaseholdv1.NewJobServiceClient(conn).WatchJob(streamCtx, &leaseholdv1.WatchJobRequest{JobId: pos[0]})
	if err != nil {
		return err
	}
	out := cmd.out()
	// Rows are printed as they arrive, so the columns are fixed widths
	// rather than tabwriter's (which needs every row first).
	const watchRow = "%-4s  %-20s  %-16s  %s\n"
	if !out.json {
		fmt.Fprintf(out.w, watchRow, eventHeader[0], eventHeader[1], eventHeader[2], eventHeader[3])
	}
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			// The server ends the stream after the terminal event.
			return nil
		}
		if err != nil {
			return err
		}
		if out.json {
			if err := out.line(resp); err != nil {
				return err
			}
			continue
		}
		r := eventRow(resp.GetEvent())
		if _, err := fmt.Fprintf(out.w, watchRow, r[0], r[1], r[2], r[3]); err != nil {
			return err
		}
	}
}
