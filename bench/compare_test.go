package bench

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasehold/leasehold/bench/measure"
)

func mustParse(t *testing.T, line string) *measure.Result {
	t.Helper()
	r, err := measure.ParseResult(line)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   []float64
		want float64
	}{
		{[]float64{3, 1, 2}, 2},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{7}, 7},
	} {
		if got := median(c.in); got != c.want {
			t.Errorf("median(%v) = %v, want %v", c.in, got, c.want)
		}
	}
	if !math.IsNaN(median(nil)) {
		t.Error("median of nothing is not NaN")
	}
	in := []float64{3, 1, 2}
	median(in)
	if in[0] != 3 {
		t.Error("median sorted its argument")
	}
}

func TestSummarize(t *testing.T) {
	t.Parallel()
	results := []*measure.Result{
		mustParse(t, "RESULT system=leasehold engine=postgres mode=drain jobs=100 worker_procs=2 drain_jobs_per_s=500 commits_per_job=1.06 ack_p50_ms=9"),
		mustParse(t, "RESULT system=river engine=postgres mode=drain jobs=100 max_workers=100 drain_jobs_per_s=10000 commits_per_job=0.03 finalized_p50_ms=1"),
		mustParse(t, "RESULT system=leasehold engine=postgres mode=drain jobs=100 worker_procs=2 drain_jobs_per_s=600 commits_per_job=1.04 ack_p50_ms=7"),
		mustParse(t, "RESULT system=river engine=postgres mode=drain jobs=100 max_workers=100 drain_jobs_per_s=12000 commits_per_job=0.02 finalized_p50_ms=2"),
		mustParse(t, "RESULT system=leasehold engine=postgres mode=drain jobs=100 worker_procs=2 drain_jobs_per_s=550 commits_per_job=1.05 ack_p50_ms=8"),
		mustParse(t, "RESULT system=leasehold engine=postgres mode=latency jobs=100 done_p50_ms=7.5"),
		mustParse(t, "RESULT system=river engine=postgres mode=latency jobs=100 done_p50_ms=150"),
	}
	rows := summarize(results, []string{measure.ModeDrain, measure.ModeCombined, measure.ModeLatency})
	type key struct{ mode, metric string }
	got := map[key]summaryRow{}
	var order []string
	for _, r := range rows {
		got[key{r.mode, r.metric}] = r
		order = append(order, r.mode+"/"+r.metric)
	}
	wantOrder := []string{
		"drain/drain_jobs_per_s", "drain/commits_per_job", "drain/ack_p50_ms", "drain/finalized_p50_ms",
		"latency/done_p50_ms",
	}
	if strings.Join(order, " ") != strings.Join(wantOrder, " ") {
		t.Fatalf("rows %v, want %v (set-up fields left out, shared metrics first)", order, wantOrder)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	if r := got[key{"drain", "drain_jobs_per_s"}]; r.leasehold != 550 || r.river != 11000 || !near(r.ratio, 0.05) || r.nL != 3 || r.nR != 2 {
		t.Errorf("drain_jobs_per_s row = %+v, want medians 550 and 11000, ratio 0.05", r)
	}
	if r := got[key{"drain", "commits_per_job"}]; !near(r.leasehold, 1.05) || !near(r.river, 0.025) || !near(r.ratio, 42) {
		t.Errorf("commits_per_job row = %+v, want ratio 42", r)
	}
	if r := got[key{"drain", "ack_p50_ms"}]; r.leasehold != 8 || !math.IsNaN(r.river) || !math.IsNaN(r.ratio) {
		t.Errorf("ack_p50_ms row = %+v, want Leasehold only", r)
	}
	if r := got[key{"latency", "done_p50_ms"}]; !near(r.ratio, 0.05) {
		t.Errorf("latency done_p50_ms row = %+v", r)
	}

	var out bytes.Buffer
	writeSummary(&out, rows)
	for _, want := range []string{"drain_jobs_per_s", "11000", "0.0500", "(3/2)", "ack_p50_ms"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCompare runs compare end to end with two fake systems: shell scripts
// that print a RESULT line from their arguments.
func TestCompare(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// The Leasehold fake is called as "leasehold bench MODE --engine
	// postgres ..."; the River fake as "river MODE ...". Each echoes the
	// flags it got, so the test sees what compare passed on.
	lh := script("leasehold", `echo "leasehold $2 run"; echo "RESULT system=leasehold engine=postgres mode=$2 jobs=10 drain_jobs_per_s=100 args=$(echo "$@" | tr ' =' '_:')"`)
	river := script("river", `echo "RESULT system=river engine=postgres mode=$1 jobs=10 drain_jobs_per_s=400"`)
	failing := script("failing", `echo "boom" >&2; exit 1`)

	t.Run("every run is printed, then medians and ratios", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), []string{"compare", "--leasehold-bin", lh, "--river-bin", river,
			"--rounds", "2", "--modes", "drain,latency", "--jobs", "10", "--database-url", "postgres://x@127.0.0.1/db"}, &stdout, &stderr)
		if code != exitOK {
			t.Fatalf("compare exited %d: %s\n%s", code, stderr.String(), stdout.String())
		}
		out := stdout.String()
		if n := strings.Count(out, "RESULT system="); n != 8 {
			t.Fatalf("%d RESULT lines, want 8 (2 rounds x 2 modes x 2 systems):\n%s", n, out)
		}
		if !strings.Contains(out, "args=bench_drain_--engine_postgres_--database-url_postgres://x@127.0.0.1/db_--jobs_10") {
			t.Errorf("Leasehold was not called as expected:\n%s", out)
		}
		// Runs alternate: leasehold, river, leasehold, river, ...
		first := strings.Index(out, "leasehold drain\n")
		second := strings.Index(out, "river drain\n")
		if first < 0 || second < first {
			t.Errorf("runs are not in the order leasehold, river:\n%s", out)
		}
		medians := strings.Index(out, "# medians")
		if medians < 0 {
			t.Fatalf("no medians:\n%s", out)
		}
		for _, want := range []string{"drain_jobs_per_s", "100.0", "400.0", "0.2500", "(2/2)"} {
			if !strings.Contains(out[medians:], want) {
				t.Errorf("summary lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("a failing run is reported, the others still summarised, exit 1", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		code := Main(context.Background(), []string{"compare", "--leasehold-bin", lh, "--river-bin", failing,
			"--rounds", "1", "--modes", "drain"}, &stdout, &stderr)
		if code != exitFail {
			t.Fatalf("compare exited %d, want %d", code, exitFail)
		}
		if !strings.Contains(stdout.String(), "boom") || !strings.Contains(stderr.String(), "1 of 2 runs failed") {
			t.Fatalf("the failure is not shown:\n%s\n%s", stdout.String(), stderr.String())
		}
	})

	t.Run("usage errors exit 2", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"compare"},
			{"compare", "--river-bin", river, "--modes", "soak"},
			{"compare", "--river-bin", river, "--rounds", "0"},
			{"drain", "--engine", "mysql"},
			{"nope"},
		} {
			var stdout, stderr bytes.Buffer
			if code := Main(context.Background(), args, &stdout, &stderr); code != exitUsage {
				t.Errorf("Main(%q) = %d, want %d; stderr: %s", args, code, exitUsage, stderr.String())
			}
		}
	})
}
