package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/leasehold/leasehold/bench/measure"
	leaseholdv1 "github.com/leasehold/leasehold/gen/leasehold/v1"
	"github.com/leasehold/leasehold/internal/txcount"
	"github.com/leasehold/leasehold/worker"
)

const (
	// donePoll is how often the database is asked whether the run is
	// over, once the workers' handler starts have reached the job count.
	// It decides only when to stop; the figures come from the rows.
	donePoll = 10 * time.Millisecond
	// cleanupLimit bounds dropping the schema after the run.
	cleanupLimit = 30 * time.Second
	// latencySettle lets the workers' first (empty) dispatch round pass
	// before latency creates its first job: "at idle".
	latencySettle = 200 * time.Millisecond
	// createCallLimit bounds one create call.
	createCallLimit = time.Minute
	// logTail is how much of a child's log an error shows.
	logTail = 4 << 10
)

// runner is one Leasehold run. Fields after the flags are set up by run
// and torn down by cleanup, in reverse order.
type runner struct {
	flags          runFlags
	bin            string
	stdout, stderr io.Writer

	dir     string
	schema  *measure.Schema
	appName string // application_name of the coordinator's connections
	monitor *measure.Monitor
	// wire counts the transactions the coordinator ends (idle mode on
	// PostgreSQL): its connections go through it.
	wire    *txcount.Proxy
	coord   *coordinatorProcess
	conn    *grpc.ClientConn
	client  *worker.Client
	table   jobTable
	workers []*workerProcess
	notify  chan struct{}
}

func (r *runner) run(ctx context.Context) (err error) {
	defer func() {
		if cerr := r.cleanup(ctx, err != nil); cerr != nil {
			err = errors.Join(err, cerr)
		}
	}()
	if err := r.setUp(ctx); err != nil {
		return err
	}
	switch r.flags.opts.Mode {
	case modeIdle:
		return r.idle(ctx)
	case modeRecovery:
		return r.recovery(ctx)
	}
	var run *measure.Run
	switch r.flags.opts.Mode {
	case measure.ModeDrain:
		run, err = r.drain(ctx)
	case measure.ModeCombined:
		run, err = r.combined(ctx)
	case measure.ModeLatency:
		run, err = r.latency(ctx)
	}
	if err != nil {
		return err
	}
	if _, err := run.Report(r.stdout); err != nil {
		return err
	}
	return nil
}

// setUp makes the database, starts the coordinator and connects to it.
func (r *runner) setUp(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "leasehold-bench-")
	if err != nil {
		return err
	}
	r.dir = dir
	var storeArgs []string
	if r.flags.engine == enginePostgres {
		if r.flags.opts.Mode == modeIdle {
			// Its figure is the commits of a system doing nothing, which
			// other sessions on a shared database would swamp.
			r.schema, err = measure.CreateDatabase(ctx, r.flags.opts.DatabaseURL, "lh_bench_")
		} else {
			r.schema, err = measure.CreateSchema(ctx, r.flags.opts.DatabaseURL, "lh_bench_")
		}
		if err != nil {
			return err
		}
		// The coordinator's connections carry their own application_name,
		// so the commit window can wait for all of them to close.
		r.appName = "leasehold-bench-" + r.schema.Name
		u, err := measure.WithParams(r.schema.URL, "application_name", r.appName)
		if err != nil {
			return err
		}
		if r.flags.opts.Mode == modeIdle {
			// pg_stat_database also counts what PostgreSQL does by itself
			// in the coordinator's idle backends (see txcount): the
			// figure judged is counted on the wire.
			if r.wire, err = txcount.Start(u); err != nil {
				return err
			}
			u = r.wire.URL
		}
		storeArgs = []string{"--database-url", u}
		if r.monitor, err = measure.OpenMonitor(ctx, r.schema.URL); err != nil {
			return err
		}
		r.table = &pgJobTable{m: r.monitor}
	} else {
		storeArgs = []string{"--sqlite-path", filepath.Join(dir, "bench.db")}
	}
	if r.coord, err = startCoordinator(r.bin, dir, storeArgs...); err != nil {
		return err
	}
	if r.conn, err = grpc.NewClient(r.coord.addr, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		return err
	}
	if err := r.coord.waitServing(ctx, r.conn); err != nil {
		return err
	}
	r.client = worker.NewClient(r.conn)
	if r.flags.engine == engineSQLite {
		// The coordinator has created and migrated the file by now.
		if r.table, err = openSQLiteJobTable(filepath.Join(dir, "bench.db")); err != nil {
			return err
		}
	}
	return nil
}

// startWorkers starts the worker processes and waits until each is
// connected (but not yet taking work).
func (r *runner) startWorkers(ctx context.Context) error {
	r.notify = make(chan struct{}, 1)
	for i := range r.flags.workerProcs {
		id := "bench-worker-" + strconv.Itoa(i+1)
		p, err := startWorkerProcess(r.bin, r.dir, id, r.coord.addr, r.flags.capacity, r.notify)
		if err != nil {
			return err
		}
		r.workers = append(r.workers, p)
	}
	for _, p := range r.workers {
		if err := p.waitReady(ctx); err != nil {
			return err
		}
	}
	return nil
}

// beginWork reads the commit counter (PostgreSQL) and tells every worker
// to start; it returns the instant the window opened.
func (r *runner) beginWork(ctx context.Context) (time.Time, error) {
	if r.monitor != nil {
		if err := r.monitor.BeginWindow(ctx); err != nil {
			return time.Time{}, err
		}
	}
	begin := time.Now()
	for _, p := range r.workers {
		if err := p.begin(); err != nil {
			return time.Time{}, err
		}
	}
	return begin, nil
}

// waitDone waits until every one of the n created jobs succeeded: first
// for the workers' handler starts to reach n (no database reads), then for
// the database to show no queued or leased job.
func (r *runner) waitDone(ctx context.Context, n int) error {
	for r.progress() < int64(n) {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d handler starts (at %d): %w", n, r.progress(), context.Cause(ctx))
		case <-r.coord.exited:
			return fmt.Errorf("the coordinator exited during the run (%w); its log: %s", r.coord.waitErr, r.coord.logPath)
		case <-r.notify:
		}
		if err := r.workersAlive(); err != nil {
			return err
		}
	}
	tick := time.NewTicker(donePoll)
	defer tick.Stop()
	for {
		busy, err := r.table.unfinished(ctx)
		if err != nil {
			return fmt.Errorf("watch the jobs table: %w", err)
		}
		if !busy {
			total, succeeded, err := r.table.count(ctx)
			if err != nil {
				return fmt.Errorf("count jobs: %w", err)
			}
			if total != int64(n) || succeeded != int64(n) {
				return fmt.Errorf("%d jobs created, but the table has %d of which %d succeeded", n, total, succeeded)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for the last jobs to complete: %w", context.Cause(ctx))
		case <-r.coord.exited:
			return fmt.Errorf("the coordinator exited during the run (%w); its log: %s", r.coord.waitErr, r.coord.logPath)
		case <-tick.C:
		}
		if err := r.workersAlive(); err != nil {
			return err
		}
	}
}

func (r *runner) progress() int64 {
	var n int64
	for _, p := range r.workers {
		n += p.progress.Load()
	}
	return n
}

func (r *runner) workersAlive() error {
	for _, p := range r.workers {
		select {
		case <-p.exited:
			return fmt.Errorf("worker %s exited during the run (%w); its log: %s", p.id, p.waitErr, p.logPath)
		default:
		}
	}
	return nil
}

// finish stops the workers and the coordinator gracefully, closes the
// commit window, and turns the rows and the workers' instants into
// samples.
func (r *runner) finish(ctx context.Context, run *measure.Run) error {
	var errs []error
	for _, p := range r.workers {
		p.requestStop() // all at once, then wait for each
	}
	for _, p := range r.workers {
		errs = append(errs, p.stop(stopLimit))
	}
	errs = append(errs, r.coord.stop())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if r.monitor != nil {
		w, err := r.monitor.EndWindow(ctx, r.appName)
		if err != nil {
			return err
		}
		run.Window, run.CommitsKnown = w, true
	}
	rows, err := r.table.rows(ctx)
	if err != nil {
		return fmt.Errorf("read the jobs: %w", err)
	}
	starts := map[string]time.Time{}
	acks := map[string]time.Time{}
	for _, p := range r.workers {
		for _, s := range p.starts {
			// A job started twice (a lost lease) counts from its first start.
			if t, ok := starts[s.id]; !ok || s.at < t.UnixNano() {
				starts[s.id] = time.Unix(0, s.at)
			}
		}
		for _, s := range p.acks {
			acks[s.id] = time.Unix(0, s.at)
		}
	}
	var ackLat []time.Duration
	for _, j := range rows {
		s := measure.Sample{ID: j.id, Created: j.created, Started: starts[j.id]}
		if j.state == "succeeded" {
			s.Done = j.finished
			if a, ok := acks[j.id]; ok {
				ackLat = append(ackLat, a.Sub(j.created))
			}
		}
		run.Samples = append(run.Samples, s)
	}
	run.Extra = append(run.Extra, measure.Series{Key: "ack", Label: "create → complete acked", Values: ackLat})
	return nil
}

func (r *runner) newRun() *measure.Run {
	f := r.flags
	return &measure.Run{
		System:  "leasehold",
		Engine:  f.engine,
		Options: f.opts,
		Config: []measure.Field{
			{Key: "worker_procs", Value: strconv.Itoa(f.workerProcs)},
			{Key: "capacity", Value: strconv.Itoa(f.capacity)},
		},
		Describe: fmt.Sprintf("coordinator on %s, %d worker processes of capacity %d, no-op handler", r.where(), f.workerProcs, f.capacity),
	}
}

// where names the run's database for the human lines.
func (r *runner) where() string {
	if r.schema != nil && r.schema.Database {
		return "database " + r.schema.Name
	}
	if r.schema != nil {
		return "schema " + r.schema.Name
	}
	return "a fresh SQLite file"
}

// createBatch creates n jobs in one BatchCreateJobs call.
func (r *runner) createBatch(ctx context.Context, n int) error {
	reqs := make([]*leaseholdv1.CreateJobRequest, n)
	for i := range reqs {
		reqs[i] = &leaseholdv1.CreateJobRequest{Job: &leaseholdv1.JobSpec{Queue: measure.QueueName, Kind: measure.JobKind, Dependency: r.flags.dependency}}
	}
	ctx, cancel := context.WithTimeout(ctx, createCallLimit)
	defer cancel()
	resps, err := r.client.BatchCreate(ctx, reqs)
	if err != nil {
		return err
	}
	if len(resps) != n {
		return fmt.Errorf("batch create of %d returned %d jobs", n, len(resps))
	}
	return nil
}

func (r *runner) drain(ctx context.Context) (*measure.Run, error) {
	run := r.newRun()
	n, batch := r.flags.opts.Jobs, r.flags.opts.Batch
	createStart := time.Now()
	for created := 0; created < n; {
		k := min(batch, n-created)
		if err := r.createBatch(ctx, k); err != nil {
			return nil, err
		}
		created += k
	}
	run.CreateElapsed = time.Since(createStart)
	if err := r.startWorkers(ctx); err != nil {
		return nil, err
	}
	begin, err := r.beginWork(ctx)
	if err != nil {
		return nil, err
	}
	run.Begin = begin
	run.CommitsNote = "from the workers' start until the coordinator exited; creates excluded"
	if err := r.waitDone(ctx, n); err != nil {
		return nil, err
	}
	return run, r.finish(ctx, run)
}

func (r *runner) combined(ctx context.Context) (*measure.Run, error) {
	run := r.newRun()
	o := r.flags.opts
	if err := r.startWorkers(ctx); err != nil {
		return nil, err
	}
	begin, err := r.beginWork(ctx)
	if err != nil {
		return nil, err
	}
	run.Begin = begin
	deadline := begin.Add(o.Duration)
	created := 0
	for time.Now().Before(deadline) && (o.Jobs == 0 || created < o.Jobs) {
		k := o.Batch
		if o.Jobs > 0 {
			k = min(k, o.Jobs-created)
		}
		if err := r.createBatch(ctx, k); err != nil {
			return nil, err
		}
		created += k
	}
	run.ProducerEnd = time.Now()
	run.CommitsNote = "from the workers' start until the coordinator exited, creates and the backlog's drain included"
	if err := r.waitDone(ctx, created); err != nil {
		return nil, err
	}
	return run, r.finish(ctx, run)
}

func (r *runner) latency(ctx context.Context) (*measure.Run, error) {
	run := r.newRun()
	o := r.flags.opts
	if err := r.startWorkers(ctx); err != nil {
		return nil, err
	}
	for _, p := range r.workers {
		if err := p.begin(); err != nil {
			return nil, err
		}
	}
	if err := r.waitConnected(ctx); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, latencySettle); err != nil {
		return nil, err
	}
	if r.monitor != nil {
		if err := r.monitor.BeginWindow(ctx); err != nil {
			return nil, err
		}
	}
	run.CommitsNote = "from the first create until the coordinator exited, creates included"
	interval := time.Duration(float64(time.Second) / o.Rate)
	begin := time.Now()
	run.Begin = begin
	for i := range o.Jobs {
		if err := sleepCtx(ctx, time.Until(begin.Add(time.Duration(i)*interval))); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, createCallLimit)
		_, _, err := r.client.Create(cctx, measure.QueueName, measure.JobKind, nil, nil)
		cancel()
		if err != nil {
			return nil, err
		}
	}
	run.CreateElapsed = time.Since(begin)
	if err := r.waitDone(ctx, o.Jobs); err != nil {
		return nil, err
	}
	return run, r.finish(ctx, run)
}

// waitConnected waits until every worker process has a stream open on the
// coordinator (AdminService.ListWorkers, answered from memory).
func (r *runner) waitConnected(ctx context.Context) error {
	admin := leaseholdv1.NewAdminServiceClient(r.conn)
	tick := time.NewTicker(donePoll)
	defer tick.Stop()
	for {
		resp, err := admin.ListWorkers(ctx, &leaseholdv1.ListWorkersRequest{})
		if err != nil {
			return fmt.Errorf("list workers: %w", err)
		}
		if len(resp.GetWorkers()) >= len(r.workers) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d workers to connect (%d are): %w", len(r.workers), len(resp.GetWorkers()), context.Cause(ctx))
		case <-tick.C:
		}
		if err := r.workersAlive(); err != nil {
			return err
		}
	}
}

// cleanup stops whatever is still running and removes the run's database
// and files. It runs on a context detached from ctx (an interrupted run
// must still clean up), bounded by cleanupLimit. failed says the run went
// wrong: children are killed rather than stopped, and their logs shown.
func (r *runner) cleanup(ctx context.Context, failed bool) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupLimit)
	defer cancel()
	var errs []error
	for _, p := range r.workers {
		p.kill()
	}
	if r.coord != nil {
		r.coord.kill()
	}
	if r.wire != nil {
		r.wire.Close()
	}
	if r.conn != nil {
		_ = r.conn.Close()
	}
	if r.table != nil {
		r.table.close(cctx)
	}
	if r.monitor != nil {
		_ = r.monitor.Close(cctx)
	}
	if r.schema != nil {
		errs = append(errs, r.schema.Drop(cctx))
	}
	if failed || r.flags.verbose {
		r.showLogs()
	}
	if r.dir != "" {
		errs = append(errs, os.RemoveAll(r.dir))
	}
	return errors.Join(errs...)
}

// showLogs copies the tail of each child's log to stderr (all of it with
// -v).
func (r *runner) showLogs() {
	paths := []string{}
	if r.coord != nil {
		paths = append(paths, r.coord.logPath)
	}
	for _, p := range r.workers {
		paths = append(paths, p.logPath)
	}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		s := string(b)
		if !r.flags.verbose && len(s) > logTail {
			s = "…" + s[len(s)-logTail:]
		}
		fmt.Fprintf(r.stderr, "--- %s\n%s", filepath.Base(path), measure.Indent(s, "  "))
	}
}

// sleepCtx waits d, or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) error {
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
