// Command river-bench is River's side of the side-by-side benchmark: the
// modes, flags, figures and RESULT line of `leasehold bench`, with
// system=river, so `leasehold bench compare` can alternate the two.
//
// River is a library, so it runs in this process: the producer, the
// client's fetchers and its no-op workers share one process and talk to
// PostgreSQL directly, where Leasehold's run has a coordinator process and
// worker processes talking gRPC. That is the honest shape of each system
// as a user deploys it, not an equal split of processes; read the ratios
// with it in mind.
//
// Set-up, as in shared/evidence/perf-2026-12-01.md: River v0.51.2 with
// riverpgxv5, one queue with MaxWorkers 100, FetchCooldown 1 ms,
// FetchPollInterval 10 ms, jobs inserted with InsertMany (1,000 per call
// for drain). Every run migrates a fresh schema with rivermigrate (the
// pool's search_path and the client's Schema point at it) and drops it
// afterwards.
//
// How River's instants are taken (package measure has the definitions):
//
//   - created: river_job.created_at, read after the run;
//   - started: this process's clock when the worker's Work starts;
//   - durably done: this process's clock when the client's job_completed
//     event arrives. River's batch completer sends that event after its
//     UPDATE has committed. river_job.finalized_at is not used for it: the
//     executor stamps it when Work returns, and the completer commits the
//     batch up to ~250 ms later, so the column would credit River with a
//     durability it did not have yet. It is reported beside, as
//     "finalized".
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/leasehold/leasehold/bench/measure"
)

// River's tuning for the comparison.
const (
	maxWorkersDefault = 100
	fetchCooldown     = time.Millisecond
	fetchPollInterval = 10 * time.Millisecond
)

const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2

	// subscribeChanSize buffers completion events; River drops events
	// that overflow it, and a lost event would stall the run (the
	// database check in waitDone catches that).
	subscribeChanSize = 1 << 18
	// lostEventCheck is how often waitDone asks the database whether
	// every job is finished while events are still missing.
	lostEventCheck = time.Second
	// latencySettle lets the client's start-up (leader election, first
	// fetches) pass before latency creates its first job: "at idle".
	latencySettle = 500 * time.Millisecond
	stopLimit     = 30 * time.Second
	cleanupLimit  = 30 * time.Second
	callLimit     = time.Minute
)

const usage = `river-bench: River's side of leasehold bench

Usage:
  river-bench drain|combined|latency [flags]

Run "river-bench MODE -h" for the flags.
`

// noopArgs is the benchmark's job: nothing to do.
type noopArgs struct{}

func (noopArgs) Kind() string { return measure.JobKind }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	mode := args[0]
	switch mode {
	case measure.ModeDrain, measure.ModeCombined, measure.ModeLatency:
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "river-bench: unknown mode %q\n\n%s", mode, usage)
		return exitUsage
	}
	fs := flag.NewFlagSet("river-bench "+mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var opts measure.Options
	opts.Register(fs, os.Getenv)
	maxWorkers := fs.Int("max-workers", maxWorkersDefault, "River's MaxWorkers for the queue")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	opts.Mode = mode
	opts = opts.WithDefaults()
	err := opts.Validate()
	if fs.NArg() > 0 {
		err = errors.Join(err, fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	if *maxWorkers < 1 || *maxWorkers > 10000 {
		err = errors.Join(err, fmt.Errorf("--max-workers %d must be in [1, 10000]", *maxWorkers))
	}
	if err != nil {
		fmt.Fprintf(stderr, "river-bench %s: %v\n", mode, err)
		return exitUsage
	}
	ctx, cancel := context.WithTimeoutCause(ctx, opts.Timeout, fmt.Errorf("the run took longer than --timeout %s", opts.Timeout))
	defer cancel()
	b := &bench{opts: opts, maxWorkers: *maxWorkers, stdout: stdout, stderr: stderr}
	if err := b.run(ctx); err != nil {
		fmt.Fprintf(stderr, "river-bench %s: %v\n", mode, err)
		return exitFail
	}
	return exitOK
}

// bench is one River run.
type bench struct {
	opts           measure.Options
	maxWorkers     int
	stdout, stderr io.Writer

	schema  *measure.Schema
	appName string
	pool    *pgxpool.Pool
	monitor *measure.Monitor
	client  *river.Client[pgx.Tx]
	started bool

	// mu guards the instants below, written by Work and the event loop.
	mu     sync.Mutex
	starts map[int64]time.Time
	dones  map[int64]time.Time
	failed int
	// changed is poked (never blocking) on each completion event.
	changed chan struct{}
	// eventsDone is closed when the subscription channel has closed.
	eventsDone chan struct{}
}

func (b *bench) run(ctx context.Context) (err error) {
	defer func() { err = errors.Join(err, b.cleanup(ctx)) }()
	if err := b.setUp(ctx); err != nil {
		return err
	}
	var r *measure.Run
	switch b.opts.Mode {
	case measure.ModeDrain:
		r, err = b.drain(ctx)
	case measure.ModeCombined:
		r, err = b.combined(ctx)
	case measure.ModeLatency:
		r, err = b.latency(ctx)
	}
	if err != nil {
		return err
	}
	_, err = r.Report(b.stdout)
	return err
}

func (b *bench) setUp(ctx context.Context) error {
	var err error
	if b.schema, err = measure.CreateSchema(ctx, b.opts.DatabaseURL, "river_bench_"); err != nil {
		return err
	}
	// River's connections carry their own application_name, so the commit
	// window can wait for all of them to close.
	b.appName = "river-bench-" + b.schema.Name
	pcfg, err := pgxpool.ParseConfig(b.schema.URL)
	if err != nil {
		return err
	}
	pcfg.ConnConfig.RuntimeParams["application_name"] = b.appName
	if b.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return err
	}
	driver := riverpgxv5.New(b.pool)
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{
		Schema: b.schema.Name,
		Logger: slog.New(slog.NewTextHandler(b.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("migrate River into %s: %w", b.schema.Name, err)
	}
	if b.monitor, err = measure.OpenMonitor(ctx, b.schema.URL); err != nil {
		return err
	}

	b.starts = map[int64]time.Time{}
	b.dones = map[int64]time.Time{}
	b.changed = make(chan struct{}, 1)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(ctx context.Context, job *river.Job[noopArgs]) error {
		now := time.Now()
		b.mu.Lock()
		if _, ok := b.starts[job.ID]; !ok {
			b.starts[job.ID] = now
		}
		b.mu.Unlock()
		return nil
	}))
	b.client, err = river.NewClient(driver, &river.Config{
		Queues:            map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: b.maxWorkers}},
		FetchCooldown:     fetchCooldown,
		FetchPollInterval: fetchPollInterval,
		Workers:           workers,
		Schema:            b.schema.Name,
		Logger:            slog.New(slog.NewTextHandler(b.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	events, _ := b.client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: subscribeChanSize,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	b.eventsDone = make(chan struct{})
	go func() {
		defer close(b.eventsDone)
		for ev := range events {
			now := time.Now()
			b.mu.Lock()
			if ev.Kind == river.EventKindJobCompleted {
				b.dones[ev.Job.ID] = now
			} else {
				b.failed++
			}
			b.mu.Unlock()
			select {
			case b.changed <- struct{}{}:
			default:
			}
		}
	}()
	return nil
}

// start starts the client (its fetchers and workers).
func (b *bench) start(ctx context.Context) error {
	if err := b.client.Start(ctx); err != nil {
		return fmt.Errorf("start the River client: %w", err)
	}
	b.started = true
	return nil
}

func (b *bench) insertMany(ctx context.Context, n int) error {
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: noopArgs{}}
	}
	ctx, cancel := context.WithTimeout(ctx, callLimit)
	defer cancel()
	res, err := b.client.InsertMany(ctx, params)
	if err != nil {
		return fmt.Errorf("insert %d jobs: %w", n, err)
	}
	if len(res) != n {
		return fmt.Errorf("InsertMany of %d returned %d jobs", n, len(res))
	}
	return nil
}

// waitDone waits for the completion events of n jobs. A job that failed,
// or an event River dropped, fails the run instead of stalling it.
func (b *bench) waitDone(ctx context.Context, n int) error {
	check := time.NewTicker(lostEventCheck)
	defer check.Stop()
	for {
		b.mu.Lock()
		done, failed := len(b.dones), b.failed
		b.mu.Unlock()
		if failed > 0 {
			return fmt.Errorf("%d jobs failed or were cancelled", failed)
		}
		if done >= n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d completions (at %d): %w", n, done, context.Cause(ctx))
		case <-b.changed:
		case <-check.C:
			var unfinished bool
			if err := b.monitor.QueryRow(ctx, []any{&unfinished},
				`SELECT EXISTS (SELECT 1 FROM river_job WHERE state <> 'completed')`); err != nil {
				return err
			}
			b.mu.Lock()
			done = len(b.dones)
			b.mu.Unlock()
			if !unfinished && done < n {
				// Every job is completed in the table: give the last
				// events one more check period before calling them lost.
				check.Reset(lostEventCheck)
				if err := sleep(ctx, lostEventCheck); err != nil {
					return err
				}
				b.mu.Lock()
				done = len(b.dones)
				b.mu.Unlock()
				if done < n {
					return fmt.Errorf("all jobs completed but only %d of %d completion events arrived (dropped?)", done, n)
				}
			}
		}
	}
}

// finish stops the client, closes the pool and the commit window, and
// turns the rows and instants into samples.
func (b *bench) finish(ctx context.Context, r *measure.Run) error {
	sctx, cancel := context.WithTimeout(ctx, stopLimit)
	defer cancel()
	if err := b.client.Stop(sctx); err != nil {
		return fmt.Errorf("stop the River client: %w", err)
	}
	b.started = false
	<-b.eventsDone
	b.pool.Close()
	b.pool = nil
	w, err := b.monitor.EndWindow(ctx, b.appName)
	if err != nil {
		return err
	}
	r.Window, r.CommitsKnown = w, true

	b.mu.Lock()
	defer b.mu.Unlock()
	var finalized []time.Duration
	err = b.monitor.Query(ctx, func(row pgx.Rows) error {
		var id int64
		var created time.Time
		var fin *time.Time
		if err := row.Scan(&id, &created, &fin); err != nil {
			return err
		}
		r.Samples = append(r.Samples, measure.Sample{
			ID: strconv.FormatInt(id, 10), Created: created, Started: b.starts[id], Done: b.dones[id],
		})
		if fin != nil {
			finalized = append(finalized, fin.Sub(created))
		}
		return nil
	}, `SELECT id, created_at, finalized_at FROM river_job`)
	if err != nil {
		return fmt.Errorf("read the jobs: %w", err)
	}
	r.Extra = append(r.Extra, measure.Series{Key: "finalized", Label: "create → finalized_at col", Values: finalized})
	return nil
}

func (b *bench) newRun() *measure.Run {
	return &measure.Run{
		System:   "river",
		Engine:   "postgres",
		Options:  b.opts,
		Config:   []measure.Field{{Key: "max_workers", Value: strconv.Itoa(b.maxWorkers)}},
		Describe: fmt.Sprintf("one in-process client on schema %s, MaxWorkers %d, FetchCooldown %s, FetchPollInterval %s, no-op worker", b.schema.Name, b.maxWorkers, fetchCooldown, fetchPollInterval),
	}
}

func (b *bench) drain(ctx context.Context) (*measure.Run, error) {
	r := b.newRun()
	n, batch := b.opts.Jobs, b.opts.Batch
	createStart := time.Now()
	for created := 0; created < n; {
		k := min(batch, n-created)
		if err := b.insertMany(ctx, k); err != nil {
			return nil, err
		}
		created += k
	}
	r.CreateElapsed = time.Since(createStart)
	if err := b.monitor.BeginWindow(ctx); err != nil {
		return nil, err
	}
	r.CommitsNote = "from the client's start until its pool closed; inserts excluded"
	r.Begin = time.Now()
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	if err := b.waitDone(ctx, n); err != nil {
		return nil, err
	}
	return r, b.finish(ctx, r)
}

func (b *bench) combined(ctx context.Context) (*measure.Run, error) {
	r := b.newRun()
	o := b.opts
	if err := b.monitor.BeginWindow(ctx); err != nil {
		return nil, err
	}
	r.CommitsNote = "from the client's start until its pool closed, inserts and the backlog's drain included"
	r.Begin = time.Now()
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	deadline := r.Begin.Add(o.Duration)
	created := 0
	for time.Now().Before(deadline) && (o.Jobs == 0 || created < o.Jobs) {
		k := o.Batch
		if o.Jobs > 0 {
			k = min(k, o.Jobs-created)
		}
		if err := b.insertMany(ctx, k); err != nil {
			return nil, err
		}
		created += k
	}
	r.ProducerEnd = time.Now()
	if err := b.waitDone(ctx, created); err != nil {
		return nil, err
	}
	return r, b.finish(ctx, r)
}

func (b *bench) latency(ctx context.Context) (*measure.Run, error) {
	r := b.newRun()
	o := b.opts
	if err := b.start(ctx); err != nil {
		return nil, err
	}
	if err := sleep(ctx, latencySettle); err != nil {
		return nil, err
	}
	if err := b.monitor.BeginWindow(ctx); err != nil {
		return nil, err
	}
	r.CommitsNote = "from the first insert until the pool closed, inserts included"
	interval := time.Duration(float64(time.Second) / o.Rate)
	r.Begin = time.Now()
	for i := range o.Jobs {
		if err := sleep(ctx, time.Until(r.Begin.Add(time.Duration(i)*interval))); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, callLimit)
		_, err := b.client.Insert(cctx, noopArgs{}, nil)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("insert: %w", err)
		}
	}
	r.CreateElapsed = time.Since(r.Begin)
	if err := b.waitDone(ctx, o.Jobs); err != nil {
		return nil, err
	}
	return r, b.finish(ctx, r)
}

// cleanup stops what is still running and drops the schema, on a context
// detached from ctx (an interrupted run must still clean up) and bounded.
func (b *bench) cleanup(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupLimit)
	defer cancel()
	var errs []error
	if b.started {
		if err := b.client.StopAndCancel(cctx); err != nil {
			errs = append(errs, fmt.Errorf("stop the River client: %w", err))
		}
	}
	if b.pool != nil {
		b.pool.Close()
	}
	if b.monitor != nil {
		_ = b.monitor.Close(cctx)
	}
	if b.schema != nil {
		errs = append(errs, b.schema.Drop(cctx))
	}
	return errors.Join(errs...)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}
