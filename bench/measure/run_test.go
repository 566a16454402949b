package measure

import (
	"strings"
	"testing"
	"time"
)

func TestQuantilesOf(t *testing.T) {
	t.Parallel()

	t.Run("nearest rank on 1..100 ms", func(t *testing.T) {
		t.Parallel()
		var ds []time.Duration
		for i := 100; i >= 1; i-- { // unsorted on purpose
			ds = append(ds, time.Duration(i)*time.Millisecond)
		}
		q := QuantilesOf(ds)
		if q.N != 100 || q.P50 != 50*time.Millisecond || q.P90 != 90*time.Millisecond || q.P99 != 99*time.Millisecond {
			t.Fatalf("QuantilesOf = %+v", q)
		}
		if ds[0] != 100*time.Millisecond {
			t.Fatal("QuantilesOf sorted its argument")
		}
	})

	t.Run("90% of ten values is the ninth, not the tenth", func(t *testing.T) {
		t.Parallel()
		var ds []time.Duration
		for i := 1; i <= 10; i++ {
			ds = append(ds, time.Duration(i))
		}
		if q := QuantilesOf(ds); q.P50 != 5 || q.P90 != 9 || q.P99 != 10 {
			t.Fatalf("QuantilesOf = %+v", q)
		}
	})

	t.Run("one value and none", func(t *testing.T) {
		t.Parallel()
		if q := QuantilesOf([]time.Duration{7}); q.P50 != 7 || q.P99 != 7 {
			t.Fatalf("QuantilesOf one = %+v", q)
		}
		if q := QuantilesOf(nil); q.N != 0 {
			t.Fatalf("QuantilesOf none = %+v", q)
		}
	})
}

func TestRunReport(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }

	t.Run("drain: rates over the create phase and from begin to the last done", func(t *testing.T) {
		t.Parallel()
		r := &Run{
			System: "leasehold", Engine: "postgres",
			Options:       Options{Mode: ModeDrain}.WithDefaults(),
			Config:        []Field{{Key: "worker_procs", Value: "2"}},
			Begin:         ms(1000),
			CreateElapsed: 500 * time.Millisecond,
			Window: Window{
				Commits: 42, WALBytes: 4000,
				CPUKnown: true, Machine: 8 * time.Millisecond, Postgres: 4 * time.Millisecond, System: 2 * time.Millisecond,
			},
			CommitsKnown: true,
		}
		for i := range 4 {
			r.Samples = append(r.Samples, Sample{Created: ms(0), Started: ms(1000 + 10*i), Done: ms(1500 + 100*i)})
		}
		var out strings.Builder
		res, err := r.Report(&out)
		if err != nil {
			t.Fatal(err)
		}
		for key, want := range map[string]string{
			"jobs": "4", "completed": "4", "worker_procs": "2", "batch": "1000",
			"create_jobs_per_s": "8.0", // 4 jobs in 0.5s
			"drain_jobs_per_s":  "5.0", // 4 jobs from 1.0s to 1.8s
			"start_p50_ms":      "1010.000", "done_p99_ms": "1800.000",
			"commits_per_job": "10.5000", "commits": "42",
			"wal_bytes_per_job": "1000", "cpu_machine_us_per_job": "2000.0",
			"cpu_postgres_us_per_job": "1000.0", "cpu_system_us_per_job": "500.0",
		} {
			if got, _ := res.Get(key); got != want {
				t.Errorf("%s = %q, want %q", key, got, want)
			}
		}
		if _, ok := res.Get("rows_inserted_per_job"); ok {
			t.Error("rows_inserted_per_job in drain, whose window leaves the creates out")
		}
		if !strings.HasSuffix(out.String(), res.String()+"\n") {
			t.Fatalf("the RESULT line is not last:\n%s", out.String())
		}
	})

	t.Run("combined: completions counted inside the producer's window only", func(t *testing.T) {
		t.Parallel()
		r := &Run{
			System: "river", Engine: "postgres",
			Options:     Options{Mode: ModeCombined}.WithDefaults(),
			Begin:       ms(0),
			ProducerEnd: ms(2000),
			Samples: []Sample{
				{Created: ms(0), Done: ms(100)},
				{Created: ms(0), Done: ms(2000)},
				{Created: ms(1900), Done: ms(2100)},
			},
		}
		res, err := r.Report(&strings.Builder{})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := res.Get("completed_jobs_per_s"); got != "1.0" {
			t.Errorf("completed_jobs_per_s = %q, want 1.0 (2 in 2s)", got)
		}
		if got, _ := res.Get("create_jobs_per_s"); got != "1.5" {
			t.Errorf("create_jobs_per_s = %q, want 1.5", got)
		}
		if _, ok := res.Get("commits_per_job"); ok {
			t.Error("commits_per_job without a commit count")
		}
		if _, ok := res.Get("start_p50_ms"); ok {
			t.Error("start percentiles without any start")
		}
		r.Window, r.CommitsKnown = Window{Commits: 3, RowsInserted: 15}, true
		if res, err = r.Report(&strings.Builder{}); err != nil {
			t.Fatal(err)
		}
		if got, _ := res.Get("rows_inserted_per_job"); got != "5.00" {
			t.Errorf("rows_inserted_per_job = %q, want 5.00 (15 rows for 3 jobs)", got)
		}
	})

	t.Run("a job that never completed fails the run after the report", func(t *testing.T) {
		t.Parallel()
		r := &Run{
			System: "leasehold", Engine: "sqlite",
			Options: Options{Mode: ModeLatency}.WithDefaults(),
			Begin:   ms(0),
			Samples: []Sample{{Created: ms(0), Done: ms(5)}, {Created: ms(10)}},
		}
		res, err := r.Report(&strings.Builder{})
		if err == nil || !strings.Contains(err.Error(), "1 of 2 jobs never completed") {
			t.Fatalf("Report error = %v", err)
		}
		if got, _ := res.Get("completed"); got != "1" {
			t.Fatalf("completed = %q", got)
		}
	})
}

func TestOptions(t *testing.T) {
	t.Parallel()
	for mode, want := range map[string][2]int{
		ModeDrain: {DrainJobsDefault, DrainBatchDefault}, ModeCombined: {0, BatchDefault}, ModeLatency: {LatencyJobsDefault, 1},
	} {
		o := Options{Mode: mode}.WithDefaults()
		if o.Jobs != want[0] || o.Batch != want[1] {
			t.Errorf("%s defaults: jobs %d batch %d, want %v", mode, o.Jobs, o.Batch, want)
		}
		if err := o.Validate(); err != nil {
			t.Errorf("%s defaults do not validate: %v", mode, err)
		}
	}
	err := Options{Mode: "soak", Batch: 5000, Rate: -1}.Validate()
	for _, want := range []string{`mode "soak"`, "--batch 5000", "--rate -1", "--duration", "--timeout"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %s", err, want)
		}
	}
}
