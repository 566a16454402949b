package measure

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// Sample is one job's timeline. Every instant is on this host's clock: the
// database server, the coordinator, the workers and the bench share one
// machine, so instants taken by different processes compare directly.
type Sample struct {
	ID string
	// Created is the job row's created_at.
	Created time.Time
	// Started is when a handler first started on the job (worker process
	// clock); zero when no handler start was reported.
	Started time.Time
	// Done is when the job's completion was durable; zero when it never
	// was. How each system knows it is written beside the system's code.
	Done time.Time
}

// Series is an extra latency a system can report beside the common ones,
// as key_p50_ms, key_p90_ms, key_p99_ms.
type Series struct {
	Key, Label string
	Values     []time.Duration
}

// Quantiles are the 50th, 90th and 99th percentiles (nearest rank) of N
// durations.
type Quantiles struct {
	N             int
	P50, P90, P99 time.Duration
}

// QuantilesOf computes the percentiles of ds (not modified).
func QuantilesOf(ds []time.Duration) Quantiles {
	if len(ds) == 0 {
		return Quantiles{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	rank := func(pct int) time.Duration {
		// Nearest rank: the smallest value with at least pct% of the
		// samples at or below it, ceil(pct*n/100) counted from 1. Integer
		// arithmetic, so 90% of 10 is the 9th value, not the 10th.
		i := (pct*len(s)+99)/100 - 1
		return s[min(max(i, 0), len(s)-1)]
	}
	return Quantiles{N: len(s), P50: rank(50), P90: rank(90), P99: rank(99)}
}

// Run is what one benchmark run measured, whichever system ran it. Report
// turns it into the human lines and the RESULT line, so both systems
// compute every figure the same way.
type Run struct {
	System, Engine string
	// Options are the run's options, defaults applied.
	Options Options
	// Config describes the system's set-up (e.g. worker_procs=2,
	// capacity=50), copied into the RESULT line.
	Config []Field
	// Describe is a human line about the set-up.
	Describe string
	// Samples: one per created job.
	Samples []Sample
	// Begin opens the measured window: drain and combined, when the
	// workers were told to start (combined's producer starts then too);
	// latency, when the first job was created.
	Begin time.Time
	// ProducerEnd (combined) is when the producer stopped creating; the
	// combined rates are over [Begin, ProducerEnd].
	ProducerEnd time.Time
	// CreateElapsed is how long creating took: drain, the create phase
	// before the workers start; latency, first create to last.
	CreateElapsed time.Duration
	// Window is what PostgreSQL and the machine saw in the commit window
	// (PostgreSQL only; CommitsKnown false elsewhere).
	Window       Window
	CommitsKnown bool
	// CommitsNote says what the commit window covers, for the human line.
	CommitsNote string
	// Extra are system-specific latencies.
	Extra []Series
}

// Report writes the human-readable lines and, last, the RESULT line, and
// returns the result. It fails when a created job never completed.
func (r *Run) Report(w io.Writer) (*Result, error) {
	o := r.Options
	res := NewResult(r.System, r.Engine, o.Mode)
	created := len(r.Samples)
	res.SetInt("jobs", int64(created))
	if o.Mode != ModeLatency {
		res.SetInt("batch", int64(o.Batch))
	}
	if o.Mode == ModeLatency {
		res.SetFloat("rate", o.Rate, 1)
	}
	for _, f := range r.Config {
		res.Set(f.Key, f.Value)
	}

	t := r.tally()
	lastDone, starts, dones, completed, completedInWindow := t.lastDone, t.starts, t.dones, t.completed, t.completedInWindow
	res.SetInt("completed", int64(completed))

	lines := []string{fmt.Sprintf("%s %s %s: %s", r.System, r.Engine, o.Mode, r.Describe)}
	add := func(format string, args ...any) { lines = append(lines, "  "+fmt.Sprintf(format, args...)) }
	rate := func(n int, d time.Duration) float64 {
		if d <= 0 {
			return 0
		}
		return float64(n) / d.Seconds()
	}
	switch o.Mode {
	case ModeDrain:
		cr := rate(created, r.CreateElapsed)
		drain := lastDone.Sub(r.Begin)
		dr := rate(completed, drain)
		res.SetFloat("drain_jobs_per_s", dr, 1)
		res.SetFloat("create_jobs_per_s", cr, 1)
		res.SetFloat("create_s", r.CreateElapsed.Seconds(), 3)
		res.SetFloat("drain_s", drain.Seconds(), 3)
		add("create  %10.1f jobs/s  (%d jobs in %.3fs, %d per call)", cr, created, r.CreateElapsed.Seconds(), o.Batch)
		add("drain   %10.1f jobs/s  (%d jobs from the workers' start to the last durable completion, %.3fs)", dr, completed, drain.Seconds())
	case ModeCombined:
		window := r.ProducerEnd.Sub(r.Begin)
		compl := rate(completedInWindow, window)
		cr := rate(created, window)
		res.SetFloat("completed_jobs_per_s", compl, 1)
		res.SetFloat("create_jobs_per_s", cr, 1)
		res.SetFloat("window_s", window.Seconds(), 3)
		add("completed %8.1f jobs/s  (%d jobs durably done while the producer ran, %.3fs)", compl, completedInWindow, window.Seconds())
		add("created   %8.1f jobs/s  (%d jobs, %d per call); the backlog of %d was drained afterwards", cr, created, o.Batch, created-completedInWindow)
	case ModeLatency:
		span := lastDone.Sub(r.Begin)
		compl := rate(completed, span)
		cr := rate(created, r.CreateElapsed)
		res.SetFloat("completed_jobs_per_s", compl, 1)
		res.SetFloat("create_jobs_per_s", cr, 1)
		add("completed %8.1f jobs/s  (%d jobs, first create to last completion %.3fs)", compl, completed, span.Seconds())
		add("created   %8.1f jobs/s  (one at a time, asked for %.0f/s)", cr, o.Rate)
	}

	quant := func(key, label string, ds []time.Duration) {
		q := QuantilesOf(ds)
		if q.N == 0 {
			return
		}
		res.SetMillis(key+"_p50_ms", q.P50)
		res.SetMillis(key+"_p90_ms", q.P90)
		res.SetMillis(key+"_p99_ms", q.P99)
		add("%-26s p50 %9.3f ms  p90 %9.3f ms  p99 %9.3f ms  (n=%d)", label, ms(q.P50), ms(q.P90), ms(q.P99), q.N)
	}
	quant("start", "create → start", starts)
	quant("done", "create → durably done", dones)
	for _, s := range r.Extra {
		quant(s.Key, s.Label, s.Values)
	}
	if r.CommitsKnown && completed > 0 {
		r.reportWindow(res, add, completed)
	}
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
	fmt.Fprintln(w, res.String())
	if completed < created {
		return res, fmt.Errorf("%d of %d jobs never completed", created-completed, created)
	}
	return res, nil
}

// reportWindow adds the commit window's figures per completed job.
func (r *Run) reportWindow(res *Result, add func(string, ...any), completed int) {
	w := r.Window
	n := float64(completed)
	per := float64(w.Commits) / n
	res.SetFloat("commits_per_job", per, 4)
	res.SetInt("commits", w.Commits)
	add("commits per completed job %.4f  (%d commits / %d jobs; %s)", per, w.Commits, completed, r.CommitsNote)
	if r.Options.Mode != ModeDrain { // the window holds the creates
		res.SetFloat("rows_inserted_per_job", float64(w.RowsInserted)/n, 2)
		add("rows inserted per job     %.2f  (pg_stat_user_tables of the schema, same window)", float64(w.RowsInserted)/n)
	}
	res.SetFloat("wal_bytes_per_job", float64(w.WALBytes)/n, 0)
	add("WAL per completed job     %.0f bytes  (same window, every writer of the server)", float64(w.WALBytes)/n)
	if !w.CPUKnown {
		add("CPU per completed job     unknown: %s", w.CPUNote)
		return
	}
	us := func(d time.Duration) float64 { return float64(d.Microseconds()) / n }
	res.SetFloat("cpu_machine_us_per_job", us(w.Machine), 1)
	res.SetFloat("cpu_postgres_us_per_job", us(w.Postgres), 1)
	res.SetFloat("cpu_system_us_per_job", us(w.System), 1)
	add("CPU per completed job     machine %.1f µs, PostgreSQL %.1f µs, %s's processes %.1f µs  (same window; 10 ms resolution)",
		us(w.Machine), us(w.Postgres), r.System, us(w.System))
}

// tally is what the samples say: each job's latencies, how many
// completed (in all, and while the producer ran) and when the last did.
type tally struct {
	starts, dones                []time.Duration
	completed, completedInWindow int
	lastDone                     time.Time
}

func (r *Run) tally() tally {
	var t tally
	for _, s := range r.Samples {
		if !s.Started.IsZero() {
			t.starts = append(t.starts, s.Started.Sub(s.Created))
		}
		if s.Done.IsZero() {
			continue
		}
		t.completed++
		t.dones = append(t.dones, s.Done.Sub(s.Created))
		if s.Done.After(t.lastDone) {
			t.lastDone = s.Done
		}
		if !s.Done.After(r.ProducerEnd) {
			t.completedInWindow++
		}
	}
	return t
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Indent prefixes each line of s (for quoting a child's output).
func Indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix) + "\n"
}
