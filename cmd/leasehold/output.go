package main

// Rendering for the operator commands. JSON output is the RPC's response
// message in the canonical protobuf JSON mapping (the same shape grpcurl
// prints), so scripts can rely on the proto field names and on every field
// being present. The SDK client returns what is inside a response, so the
// commands put it back into the response message to print it. Table output
// is for people: aligned columns, times in UTC, long values shortened.

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/pflag"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
)

// printer writes one command's output in the --output format.
type printer struct {
	w     io.Writer // stdout: the result
	notes io.Writer // stderr: what is not the result (the next page's token)
	json  bool
}

func (c *cli) printer() *printer {
	return &printer{w: c.stdout, notes: c.stderr, json: c.global.output == outputJSON}
}

// page is one page of a listing, as every list command prints it.
type page struct {
	resp          proto.Message // the RPC's response, all --output json prints
	header        []string
	rows          [][]string
	nextPageToken string // when set, printed on stderr for the next call
	empty         string // when set, printed instead of an empty table
}

// list prints a page: the response as JSON, or a table followed by the
// next page's token on stderr, so that stdout stays a clean table for
// pipes.
func (p *printer) list(pg page) error {
	if p.json {
		return p.message(pg.resp)
	}
	if len(pg.rows) == 0 && pg.empty != "" {
		_, err := fmt.Fprintln(p.w, pg.empty)
		return err
	}
	if err := p.table(pg.header, pg.rows); err != nil {
		return err
	}
	if pg.nextPageToken != "" {
		fmt.Fprintf(p.notes, "more: --page-token %s\n", pg.nextPageToken)
	}
	return nil
}

// rows renders each item as a table row.
func rows[T any](items []T, row func(T) []string) [][]string {
	out := make([][]string, len(items))
	for i, it := range items {
		out[i] = row(it)
	}
	return out
}

// show prints one object: the response as JSON, or its fields.
func (p *printer) show(resp proto.Message, pairs [][2]string) error {
	if p.json {
		return p.message(resp)
	}
	return p.fields(pairs)
}

// say prints the outcome of an action: the response as JSON, or one line.
func (p *printer) say(resp proto.Message, format string, a ...any) error {
	if p.json {
		return p.message(resp)
	}
	_, err := fmt.Fprintf(p.w, format+"\n", a...)
	return err
}

// message prints m as indented JSON, every field included.
func (p *printer) message(m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

// line prints m as JSON on one line, for streams (one object per line).
func (p *printer) line(m proto.Message) error {
	b, err := protojson.MarshalOptions{EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s: %w", m.ProtoReflect().Descriptor().FullName(), err)
	}
	_, err = fmt.Fprintf(p.w, "%s\n", b)
	return err
}

// table prints aligned columns under a header.
func (p *printer) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = cell(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// fields prints "Name: value" pairs aligned, skipping empty values.
func (p *printer) fields(pairs [][2]string) error {
	tw := tabwriter.NewWriter(p.w, 0, 4, 1, ' ', 0)
	for _, kv := range pairs {
		if kv[1] == "" {
			continue
		}
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	return tw.Flush()
}

// cell keeps a table cell on one line: tabs and newlines would break the
// columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\n' || r == '\r' {
			return ' '
		}
		return r
	}, s)
}

// shorten cuts s to at most n runes, marking the cut.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// formatTime renders a timestamp in UTC; unset is empty.
func formatTime(t *timestamppb.Timestamp) string {
	if t == nil {
		return ""
	}
	return t.AsTime().UTC().Format(time.RFC3339)
}

// formatDuration renders a duration; unset is empty.
func formatDuration(d *durationpb.Duration) string {
	if d == nil {
		return ""
	}
	return d.AsDuration().String()
}

// bytesLimit is how much of a payload or result the table view shows.
const bytesLimit = 512

// formatBytes renders a payload or result for a person: printable text as
// it is, anything else as base64, both cut at bytesLimit with the full size
// noted (--output json always has all of it).
func formatBytes(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	printable := utf8.Valid(b) && bytes.IndexFunc(b, func(r rune) bool {
		return !unicode.IsPrint(r) && r != '\n' && r != '\t' && r != '\r'
	}) < 0
	var s string
	if printable {
		s = strings.TrimRight(string(b), "\n")
	} else {
		s = "base64:" + base64.StdEncoding.EncodeToString(b)
	}
	if len(s) > bytesLimit {
		cut := s[:bytesLimit]
		for !utf8.ValidString(cut) {
			cut = cut[:len(cut)-1]
		}
		s = fmt.Sprintf("%s… (%d bytes; --output json shows all)", cut, len(b))
	}
	return strings.ReplaceAll(s, "\n", "\n\t")
}

// stateName is a job state without its enum prefix ("QUEUED").
func stateName(s leaseholdv1.JobState) string {
	return strings.TrimPrefix(s.String(), "JOB_STATE_")
}

// formatMeta renders metadata as sorted k=v pairs.
func formatMeta(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, " ")
}

// formatError renders a worker's error as "CODE: message (retryable)".
func formatError(e *leaseholdv1.JobError) string {
	if e == nil {
		return ""
	}
	s := e.GetMessage()
	if e.GetCode() != "" {
		s = e.GetCode() + ": " + s
	}
	if e.GetRetryable() {
		s += " (retryable)"
	}
	return s
}

// jobHeader and jobRow are the columns of a job listing.
var jobHeader = []string{"ID", "QUEUE", "KIND", "STATE", "ATTEMPTS", "PRIORITY", "CREATED"}

func jobRow(j *leaseholdv1.Job) []string {
	state := stateName(j.GetState())
	if j.GetCancelRequested() && j.GetState() == leaseholdv1.JobState_JOB_STATE_LEASED {
		state += " (cancel requested)"
	}
	return []string{
		j.GetId(), j.GetQueue(), j.GetKind(), state,
		fmt.Sprintf("%d/%d", j.GetAttempts(), j.GetMaxAttempts()),
		strconv.Itoa(int(j.GetPriority())),
		formatTime(j.GetCreatedAt()),
	}
}

// jobFields are the rows of a single job's view.
func jobFields(j *leaseholdv1.Job) [][2]string {
	pairs := [][2]string{
		{"ID", j.GetId()},
		{"Queue", j.GetQueue()},
		{"Kind", j.GetKind()},
		{"State", stateName(j.GetState())},
		{"Attempts", fmt.Sprintf("%d of %d", j.GetAttempts(), j.GetMaxAttempts())},
		{"Priority", strconv.Itoa(int(j.GetPriority()))},
		{"Dependency", j.GetDependency()},
		{"Created", formatTime(j.GetCreatedAt())},
		{"Available", formatTime(j.GetAvailableAt())},
		{"Finished", formatTime(j.GetFinishedAt())},
		{"Retry deadline", formatTime(j.GetRetryDeadline())},
	}
	if j.GetCancelRequested() {
		pairs = append(pairs, [2]string{"Cancel requested", "yes"})
	}
	if l := j.GetLease(); l.GetOwner() != "" {
		lease := fmt.Sprintf("%s, generation %d", l.GetOwner(), l.GetGeneration())
		if l.GetExpiresAt() != nil {
			lease += ", expires " + formatTime(l.GetExpiresAt())
		}
		pairs = append(pairs, [2]string{"Lease", lease})
	}
	if cp := j.GetCheckpoint(); cp != nil {
		pairs = append(pairs, [2]string{"Checkpoint", fmt.Sprintf("%s (generation %d, %s)", cp.GetPhase(), cp.GetLeaseGeneration(), formatTime(cp.GetCreatedAt()))})
	}
	pairs = append(pairs,
		[2]string{"Replay of", j.GetReplayOf()},
		[2]string{"Metadata", formatMeta(j.GetMetadata())},
		[2]string{"Last error", formatError(j.GetLastError())},
		[2]string{"Payload", formatBytes(j.GetPayload())},
		[2]string{"Result", formatBytes(j.GetResult())},
	)
	return pairs
}

// eventHeader and eventRow are the columns of a job's history.
var eventHeader = []string{"SEQ", "TIME", "TYPE", "DATA"}

func eventRow(e *leaseholdv1.Event) []string {
	return []string{
		strconv.FormatInt(e.GetSequence(), 10),
		formatTime(e.GetTime()),
		strings.TrimPrefix(e.GetType().String(), "EVENT_TYPE_"),
		e.GetDataJson(),
	}
}

// deadHeader and deadRow are the columns of the dead-letter listing.
var deadHeader = []string{"ID", "QUEUE", "KIND", "ATTEMPTS", "DIED", "LAST ERROR", "REPLAYED AS", "ABANDONED"}

func deadRow(d *leaseholdv1.DeadJob) []string {
	j := d.GetJob()
	abandoned := ""
	if d.GetAbandoned() {
		abandoned = "yes"
	}
	return []string{
		j.GetId(), j.GetQueue(), j.GetKind(),
		strconv.Itoa(int(j.GetAttempts())),
		formatTime(j.GetFinishedAt()),
		shorten(formatError(j.GetLastError()), 60),
		d.GetReplayedAs(), abandoned,
	}
}

// attemptHeader and attemptRow are the columns of a dead job's attempts.
var attemptHeader = []string{"ATTEMPT", "GENERATION", "WORKER", "CLAIMED", "FINISHED", "OUTCOME", "ERROR"}

func attemptRow(a *leaseholdv1.Attempt) []string {
	return []string{
		strconv.Itoa(int(a.GetAttempt())),
		strconv.FormatInt(a.GetLeaseGeneration(), 10),
		a.GetWorkerId(),
		formatTime(a.GetClaimedAt()),
		formatTime(a.GetFinishedAt()),
		strings.TrimPrefix(a.GetOutcome().String(), "ATTEMPT_OUTCOME_"),
		shorten(formatError(a.GetError()), 80),
	}
}

// queueHeader and queueRow are the columns of the queue listing.
var queueHeader = []string{"QUEUE", "PAUSED", "QUEUED", "AVAILABLE", "LEASED", "SUCCEEDED", "FAILED", "CANCELLED", "DEAD"}

func queueRow(q *leaseholdv1.QueueSummary) []string {
	s := q.GetStats()
	paused := "no"
	if q.GetPolicy().GetPaused() || s.GetPaused() {
		paused = "yes"
	}
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	name := q.GetPolicy().GetQueue()
	if name == "" {
		name = s.GetQueue()
	}
	return []string{name, paused, n(s.GetQueued()), n(s.GetAvailable()), n(s.GetLeased()),
		n(s.GetSucceeded()), n(s.GetFailed()), n(s.GetCancelled()), n(s.GetDead())}
}

// policyFields are the rows of a queue policy's view.
func policyFields(p *leaseholdv1.QueuePolicy) [][2]string {
	r := p.GetRetry()
	jitter := "default"
	if r.JitterFraction != nil {
		jitter = strconv.FormatFloat(r.GetJitterFraction(), 'g', -1, 64)
	}
	paused := "no"
	if p.GetPaused() {
		paused = "yes"
	}
	concurrency := "unlimited"
	if p.GetConcurrencyLimit() > 0 {
		concurrency = strconv.Itoa(int(p.GetConcurrencyLimit()))
	}
	keyConcurrency := "unlimited"
	if p.GetKeyConcurrencyLimit() > 0 {
		keyConcurrency = strconv.Itoa(int(p.GetKeyConcurrencyLimit())) + " per key"
	}
	rate := "unlimited"
	if rl := p.GetRateLimit(); rl.GetStarts() > 0 {
		rate = strconv.Itoa(int(rl.GetStarts())) + " per " + formatDuration(rl.GetInterval())
		if rl.GetPerKey() {
			rate += " per key"
		}
	}
	deadline := "none"
	if d := r.GetTotalRetryDeadline(); d != nil && d.AsDuration() > 0 {
		deadline = d.AsDuration().String()
	}
	return [][2]string{
		{"Queue", p.GetQueue()},
		{"Paused", paused},
		{"Max attempts", strconv.Itoa(int(r.GetMaxAttempts()))},
		{"Initial delay", formatDuration(r.GetInitialDelay())},
		{"Max delay", formatDuration(r.GetMaxDelay())},
		{"Multiplier", strconv.FormatFloat(r.GetMultiplier(), 'g', -1, 64)},
		{"Jitter", jitter},
		{"Backoff", strings.ToLower(strings.TrimPrefix(r.GetBackoff().String(), "RETRY_BACKOFF_"))},
		{"Retryable codes", strings.Join(r.GetRetryableErrorCodes(), ",")},
		{"Non-retryable codes", strings.Join(r.GetNonRetryableErrorCodes(), ",")},
		{"Total retry deadline", deadline},
		{"Lease duration", formatDuration(p.GetDefaultLeaseDuration())},
		{"Concurrency limit", concurrency},
		{"Key concurrency limit", keyConcurrency},
		{"Rate limit", rate},
		{"Default dependency", p.GetDefaultDependency()},
	}
}

// statsFields are the rows of a queue's counts.
func statsFields(s *leaseholdv1.QueueStats) [][2]string {
	n := func(v int64) string { return strconv.FormatInt(v, 10) }
	return [][2]string{
		{"Queued", n(s.GetQueued())},
		{"Available", n(s.GetAvailable())},
		{"Leased", n(s.GetLeased())},
		{"Succeeded", n(s.GetSucceeded())},
		{"Failed", n(s.GetFailed())},
		{"Cancelled", n(s.GetCancelled())},
		{"Dead", n(s.GetDead())},
	}
}

// breakerHeader and breakerRow are the columns of the breaker listing.
var breakerHeader = []string{"DEPENDENCY", "STATE", "FAILURE RATE", "OPENED", "NEXT PROBE"}

func breakerRow(b *leaseholdv1.Breaker) []string {
	return []string{
		b.GetDependency(),
		strings.TrimPrefix(b.GetState().String(), "BREAKER_STATE_"),
		strconv.FormatFloat(b.GetFailureRate()*100, 'f', 1, 64) + "%",
		formatTime(b.GetOpenedAt()),
		formatTime(b.GetNextProbeAt()),
	}
}

// workerHeader and workerRow are the columns of the worker listing. A
// worker seen through unary calls only has no capacity, active leases,
// labels or SDK to show ("-").
var workerHeader = []string{"WORKER", "VIA", "QUEUES", "CAPACITY", "ACTIVE", "CREDITS", "LABELS", "SDK", "CONNECTED", "LAST SEEN", "COORDINATOR"}

func workerRow(w *leaseholdv1.WorkerInfo) []string {
	via, capacity, active, credits := "stream", strconv.Itoa(int(w.GetCapacity())), strconv.Itoa(int(w.GetActiveLeases())), strconv.Itoa(int(w.GetCredits()))
	if w.GetTransport() == leaseholdv1.WorkerTransport_WORKER_TRANSPORT_UNARY {
		via, capacity, active, credits = "unary", "-", "-", "-"
	}
	return []string{
		w.GetWorkerId(),
		via,
		strings.Join(w.GetQueues(), ","),
		capacity,
		active,
		credits,
		formatLabels(w.GetLabels()),
		cmp.Or(w.GetSdk(), "-"),
		formatTime(w.GetConnectedAt()),
		formatTime(w.GetLastSeenAt()),
		w.GetCoordinatorId(),
	}
}

// formatLabels renders labels as k=v pairs sorted by key; none is "-".
func formatLabels(labels map[string]string) string {
	if len(labels) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(labels))
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + labels[k]
	}
	return strings.Join(pairs, ",")
}

// breakerEventHeader and breakerEventRow are the columns of `breaker events`.
var breakerEventHeader = []string{"SEQ", "TIME", "TYPE", "DATA"}

func breakerEventRow(e *leaseholdv1.BreakerEvent) []string {
	return []string{
		strconv.FormatInt(e.GetSequence(), 10),
		formatTime(e.GetTime()),
		strings.TrimPrefix(e.GetType().String(), "BREAKER_EVENT_TYPE_"),
		e.GetData(),
	}
}

// pageFlags are a list command's --limit and --page-token.
type pageFlags struct {
	limit int
	token string
}

func (p *pageFlags) add(fs *pflag.FlagSet) {
	fs.IntVar(&p.limit, "limit", 0, "page size; 0 = the server's default (50), at most 500")
	fs.StringVar(&p.token, "page-token", "", "continue from a previous page")
}

// request returns the page size and token to ask for; the server bounds
// the size, this only refuses what cannot be one.
func (p *pageFlags) request() (size int32, token string, err error) {
	if p.limit < 0 {
		return 0, "", usagef("--limit must not be negative")
	}
	return int32(min(p.limit, 1<<30)), p.token, nil
}
